"""Building engines once and caching them (spec/RUNNING.md section 4 step 2).

Cases describe engines by build arguments; building one per case would dominate the run time,
so each distinct argument set is built once into `$KVCONFORM_CACHE/engines/<digest>/` (default
`.kvconform-cache/` at the repository root). The digest covers the arguments and a *salt* that
names the builder (for the bundled backend: a digest of its source files), so editing the
backend invalidates its engines. A build goes to a temporary folder that is renamed into place,
so concurrent shards never see a half-written engine.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent


def cache_root() -> Path:
    return Path(os.environ.get("KVCONFORM_CACHE") or ROOT / ".kvconform-cache")


def digest(obj, length: int = 16) -> str:
    """A stable short digest of a JSON-able value (sorted keys)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def source_digest(package_dir: Path) -> str:
    """A digest of every .py file of a package: changes whenever its code does."""
    h = hashlib.sha256()
    for f in sorted(Path(package_dir).rglob("*.py")):
        h.update(str(f.relative_to(package_dir)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def build_cached(build_args: dict, salt: str, build: Callable[[Path], None]) -> Path:
    """The engine folder for `build_args`, calling `build(folder)` only when it is not cached.

    `build` may raise (a refused build); nothing is cached then.
    """
    key = digest({"args": build_args, "salt": salt})
    folder = cache_root() / "engines" / key
    if (folder / ".built").exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".tmp-{key}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        build(tmp)
        (tmp / ".built").write_text(json.dumps(build_args, sort_keys=True))
        try:
            os.rename(tmp, folder)
        except OSError:  # another process finished the same build first
            if not (folder / ".built").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def fixed_engine(engine_dir: str, description: str | None = None):
    """The one engine of a deployment under test: its folder and the description the oracle reads
    (DIR/config.json, or `description` for a runtime whose folder holds something else)."""
    from reference.engine import resolve_paths

    from . import oracle
    from .adapters.base import Engine
    from .errors import KvconformError
    from .schemas import read_json
    if not os.path.isdir(engine_dir):
        raise KvconformError("not an engine folder", engine_dir)
    source = description or os.path.join(engine_dir, "config.json")
    try:
        config = oracle.engine_of(resolve_paths(read_json(source), os.path.dirname(os.path.abspath(source)))).to_config()
    except oracle.InputError as e:
        raise KvconformError(e.message, source, e.path) from None
    return Engine("fixed-" + digest(config, 8), config, os.path.abspath(engine_dir), fixed=True)
