"""gpu_backend: the bundled kvconform backend.

A real torch runtime (CUDA when available, CPU otherwise) with a paged FP16 KV pool and its
own implementation of context reuse (spec/context-reuse.md). It shares no code with
`reference/` or `conformance/`: the kit tests the two against each other.

    build_engine(engine_dir, build_args) -> config dict
    Runtime(engine_dir, enable_context_reuse=..., ...).infer(request_dict, base_dir) -> results
    capabilities(device="auto") -> manifest (spec/schemas/capabilities.schema.json)
"""
from .capabilities import capabilities
from .engine_build import build_engine
from .errors import BackendInputError, DeploymentRejected
from .runtime import Runtime

__all__ = ["BackendInputError", "DeploymentRejected", "Runtime", "build_engine", "capabilities"]
__version__ = "1.0.0"
