"""gpu_backend: the bundled kvconform backend.

A real torch runtime (CUDA when available, CPU otherwise) with a paged FP16 KV pool and its
own implementation of context reuse (spec/context-reuse.md). It shares no code with
`reference/` or `conformance/`: the kit tests the two against each other.

    build_engine(engine_dir, build_args) -> config dict
    Runtime(engine_dir, enable_context_reuse=..., ...).infer(request_dict, base_dir) -> results
    capabilities(device="auto") -> manifest (spec/schemas/capabilities.schema.json)
"""
from importlib import import_module

# Imported when first used (PEP 562), so `python -m gpu_backend` answers a usage error, and the
# kit's tools read engine_build, without paying for torch.
_LAZY = {"capabilities": ".capabilities", "build_engine": ".engine_build", "BackendInputError": ".errors",
         "DeploymentRejected": ".errors", "Runtime": ".runtime"}
__all__ = sorted(_LAZY)
__version__ = "1.0.0"


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
