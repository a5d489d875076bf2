"""Request and image files have a size bound checked before a byte is read, named in the message
(spec/RUNNING.md section 8, spec/tokenizer.md section 3: 32 MiB): a 1 GB file of NULs once took
2 GB of memory before it was refused as not JSON. And a file of 100,000 unknown keys prints 10
warnings and "... and 99,990 more", not 100,000 lines (each with a spelling hint to compute).

The large files are sparse (no disk is used); each command runs in a child process under a
3 GiB memory cap (tests/robustness/bounded.py)."""
from __future__ import annotations

import json
import os

import pytest

from tests.robustness import harness
from tests.robustness.bounded import measured

GIB = 1 << 30
LIMIT = 32 << 20


def _sparse(path, size: int):
    with open(path, "wb") as f:
        f.truncate(size)


@pytest.fixture
def huge(world, tmp_path):
    """A 1 GB request file of NULs, and a request naming a 1 GB image file of NULs."""
    _sparse(tmp_path / "huge.json", GIB)
    _sparse(tmp_path / "huge.png", GIB)
    (tmp_path / "image.json").write_text(json.dumps({"requests": [{"messages": [{"role": "user", "content": [
        {"type": "image", "image": "huge.png"}, {"type": "text", "text": "hi"}]}]}]}))
    return tmp_path


CASES = {
    "validate, request file": ("conformance.cli", ["validate", "{tmp}/huge.json"], "huge.json"),
    "infer, request file": ("gpu_backend", ["infer", "--engineDir", "{engine}", "--inputFile", "{tmp}/huge.json",
                                            "--outputFile", "{tmp}/out.json"], "huge.json"),
    "validate, image file": ("conformance.cli", ["validate", "{tmp}/image.json"], "huge.png"),
    "infer, image file": ("gpu_backend", ["infer", "--engineDir", "{engine}", "--inputFile", "{tmp}/image.json",
                                          "--outputFile", "{tmp}/out.json"], "huge.png"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_file_above_the_bound_is_refused_before_it_is_read(world, huge, name):
    module, argv, file = CASES[name]
    got = measured(module, [a.format(tmp=huge, engine=world["engine"]) for a in argv], huge)
    lines = [line for line in got.err.splitlines() if line.strip()]
    assert got.rc == 2 and len(lines) == 1 and "Traceback" not in got.err, got.err[-2000:]
    assert file in lines[0] and str(GIB) in lines[0] and str(LIMIT) in lines[0], lines[0]
    assert got.rss_mb < 1024 and got.cpu_s < 10, (got.rss_mb, got.cpu_s)
    assert not (huge / "out.json").exists()


def test_simulate_refuses_it_too(world, huge):
    got = harness.kvconform(["simulate", "--engineDir", str(world["engine"]), "--inputFile", str(huge / "huge.json"),
                             "--profileOutputFile", str(huge / "p.json")])
    assert got.rc == 2 and "huge.json" in got.err and str(LIMIT) in got.err and not got.crash, got.err


def test_the_bound_is_the_same_on_both_sides():
    from conformance.cases.schemas import MAX_INPUT_BYTES
    from gpu_backend.inputs import MAX_FILE_BYTES
    from gpu_backend.media import MAX_FILE_BYTES as BACKEND_MEDIA
    from reference.decode import MAX_MEDIA_BYTES
    from reference.engine import MAX_DESCRIPTION_BYTES
    assert MAX_INPUT_BYTES == MAX_FILE_BYTES == BACKEND_MEDIA == MAX_MEDIA_BYTES == MAX_DESCRIPTION_BYTES == LIMIT


def _unknown_keys(path, count: int):
    request = {"messages": [{"role": "user", "content": "hello"}]}
    request.update({f"unknown_key_{i}": i for i in range(count)})
    path.write_text(json.dumps({"max_generate_length": 1, "requests": [request]}))


@pytest.mark.parametrize("command", ["validate", "simulate", "infer"])
def test_unknown_keys_print_a_capped_list_of_warnings(world, tmp_path, command):
    _unknown_keys(tmp_path / "keys.json", 100_000)
    file = str(tmp_path / "keys.json")
    if command == "validate":
        got = harness.kvconform(["validate", file])
    elif command == "simulate":
        got = harness.kvconform(["simulate", "--engineDir", str(world["engine"]), "--inputFile", file,
                                 "--profileOutputFile", str(tmp_path / "p.json")])
    else:
        got = harness.backend(["infer", "--engineDir", str(world["engine"]), "--inputFile", file,
                               "--outputFile", str(tmp_path / "o.json"), "--device", "cpu"])
    assert got.rc == 0 and not got.crash, got.err[-2000:]
    warnings = got.warnings()
    assert len(warnings) == 11 and len(got.err.splitlines()) == 11, got.err[-2000:]
    assert warnings[0].endswith("$.requests[0].unknown_key_0: unknown key ignored")
    assert warnings[-1].endswith("$: ... and 99,990 more unknown keys ignored"), warnings[-1]
    assert file in warnings[-1]
