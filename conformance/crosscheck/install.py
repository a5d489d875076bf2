"""Which runtime versions the cross-check installs, and their venvs (tools/crosscheck/install.sh).

    name, version = parse_runtime("vllm==0.32.0")
    python = install(name, version)      # the venv's interpreter; installs first when missing

The runtime is installed into .kvconform-cache/crosscheck/<runtime>-<version>/ from the package
registry and run as its own process (driver.py); the kit never imports it.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .. import KvconformError

RUNTIMES = {"vllm": ("0.32.0", "0.33.0"), "sglang": ("0.5.23",)}
SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "crosscheck" / "install.sh"


class InstallError(RuntimeError):
    """The runtime did not install (install.sh's own message went to stderr)."""


def parse_runtime(spec: str) -> tuple[str, str]:
    """`name==version` of a runtime the cross-check installs; KvconformError (bad input) otherwise."""
    name, sep, version = spec.partition("==")
    if not sep or name not in RUNTIMES or version not in RUNTIMES[name]:
        known = ", ".join(f"{n}=={v}" for n, vs in RUNTIMES.items() for v in vs)
        raise KvconformError(f"--runtime {spec!r}: not one the cross-check installs ({known})")
    return name, version


def install(name: str, version: str) -> str:
    """The venv interpreter that has the runtime, installing it first when needed."""
    print(f"crosscheck: {name} {version} from .kvconform-cache/crosscheck/{name}-{version}/ (installed first when "
          "missing: minutes, once; install.log there)", file=sys.stderr)
    done = subprocess.run(["bash", str(SCRIPT), name, version], capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise InstallError(f"{name} {version} did not install")
    return done.stdout.strip().splitlines()[-1]
