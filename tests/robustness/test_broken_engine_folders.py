"""A broken engine folder is bad input, not a verdict on the backend: the pre-flight check reads
the weights' headers against the description (spec/engine.md section 5) before any case runs, so
config.json sizes that do not match the weights, a transposed tensor, data offsets past the end,
a dtype no loader reads, a header length of 2^63 - 1 or 1 GiB, and truncated or empty weights are
one line naming the file, exit 2 (they once ended NOT CONFORMANT: "the oracle accepts this
request file, so the backend must run it"). Each broken folder is made here from a bundled one."""
from __future__ import annotations

import json
import shutil
import struct

import pytest

from conformance.cli import main as kvconform

ENGINE = {"maxInputLen": 64, "maxKVCacheCapacity": 96, "maxKVPoolPages": 0, "tokensPerPage": 4}
RUN = ["run", "--no-generated", "--no-progress", "-k", "golden/plan-kinds-p4"]


@pytest.fixture(scope="module")
def good_engine(tmp_path_factory):
    from gpu_backend import build_engine
    folder = tmp_path_factory.mktemp("engine") / "good"
    build_engine(str(folder), ENGINE)
    return folder


def _read(path):
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8:8 + n]), data[8 + n:]


def _write(path, header: dict, body: bytes, length: int | None = None):
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + body)


def _config_sizes(folder):
    cfg = json.loads((folder / "config.json").read_text())
    cfg["intermediate_size"] += 8
    (folder / "config.json").write_text(json.dumps(cfg))


def _transposed(folder):
    path = folder / "model.safetensors"
    header, body = _read(path)
    header["embed"]["shape"] = header["embed"]["shape"][::-1]
    _write(path, header, body)


def _offsets_past_the_end(folder):
    path = folder / "model.safetensors"
    header, body = _read(path)
    last = max((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][1])
    header[last]["data_offsets"][1] += 4096
    _write(path, header, body)


def _dtype_q4k(folder):
    path = folder / "model.safetensors"
    header, body = _read(path)
    header["embed"]["dtype"] = "Q4_K"
    _write(path, header, body)


def _header_length(length):
    def edit(folder):
        path = folder / "model.safetensors"
        header, body = _read(path)
        _write(path, header, body, length=length)
    return edit


def _truncated(folder):
    path = folder / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


def _empty(folder):
    (folder / "model.safetensors").write_bytes(b"")


BROKEN = {
    "config-sizes-do-not-match": (_config_sizes, "does not match the weights"),
    "transposed-tensor": (_transposed, "tensor embed has shape"),
    "offsets-past-the-end": (_offsets_past_the_end, "past the end"),
    "dtype-q4k": (_dtype_q4k, "dtype 'Q4_K'"),
    "header-length-2^63-1": (_header_length(2 ** 63 - 1), "header claims 9223372036854775807 bytes"),
    "header-length-1GiB": (_header_length(2 ** 30), "header claims 1073741824 bytes"),
    "truncated": (_truncated, "truncated"),
    "empty": (_empty, "too short for a safetensors file"),
}


@pytest.mark.parametrize("adapter", [["--backend", "command"], ["--backend", "inprocess"]])
@pytest.mark.parametrize("name", list(BROKEN))
def test_a_broken_engine_folder_is_bad_input(good_engine, tmp_path, capsys, name, adapter):
    folder = tmp_path / name
    shutil.copytree(good_engine, folder)
    edit, words = BROKEN[name]
    edit(folder)
    code = kvconform(RUN + adapter + ["--engine-dir", str(folder), "--report", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert str(folder / "model.safetensors") in err and words in err, err
    assert not (tmp_path / "r").exists(), "nothing ran, nothing was written"


def test_the_good_folder_passes_the_check(good_engine, tmp_path, capsys):
    from conformance.adapters.engines import fixed_engine
    assert fixed_engine(str(good_engine), bundled=True).config["tokens_per_page"] == 4
