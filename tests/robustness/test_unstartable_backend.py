"""A backend that cannot start is bad input (docs/verdicts.md section 5: exit 2), decided before any
case runs: `--executable /nonexistent/llm_inference` once ended NOT CONFORMANT (exit 1), every case
an ERROR of a backend that never ran."""
from __future__ import annotations

import pytest

from conformance.cli import main as kvconform

RUN = ["run", "--backend", "command", "--no-generated", "--no-progress", "-k", "golden/plan-kinds-p4"]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from gpu_backend import build_engine
    folder = tmp_path_factory.mktemp("engine") / "e"
    build_engine(str(folder), {"maxInputLen": 64, "maxKVCacheCapacity": 96, "maxKVPoolPages": 0, "tokensPerPage": 4})
    return folder


@pytest.mark.parametrize("program, why", [
    ("/nonexistent/llm_inference", "no such file"),
    ("NOT_EXECUTABLE", "not executable"),
    ("no-such-llm-inference-on-path", "not found on PATH"),
])
@pytest.mark.parametrize("flag", ["--executable", "--build-command"])
def test_a_backend_that_cannot_start_is_bad_input(engine, tmp_path, capsys, program, why, flag):
    if program == "NOT_EXECUTABLE":
        program = str(tmp_path / "llm_inference")
        (tmp_path / "llm_inference").write_text("#!/bin/sh\n")
    argv = RUN + [flag, f"{program} infer", "--report", str(tmp_path / "r")]
    argv += ["--engine-dir", str(engine)] if flag == "--executable" else ["--executable", "/bin/true"]
    assert kvconform(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"{flag}: cannot start {program!r}: {why}" in err, err
    assert not (tmp_path / "r").exists()
