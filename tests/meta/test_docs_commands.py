"""The command blocks of README.md and docs/*.md, as a new user copies them.

Every ```bash block is classified here once: RUN (cheap: run as written, in a fresh copy of the
checkout after a run has left the default report folder behind, by the `slow` test below), LONG
(minutes or a third-party install: not run here; the time it took is written beside it) or
TEMPLATE (it names the user's own files, e.g. /path/to/engine: not runnable as written). The
default tests check what costs nothing: each block is classified, and every option a block gives
`kvconform` or `python -m gpu_backend` is one that command accepts under its current spelling
(a deprecated spelling is hidden from --help, so it fails here too).

    pytest -m slow tests/meta/test_docs_commands.py     # runs the RUN blocks (80-105 s at load 11-15)
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"```(?:bash|sh|shell|console)\n(.*?)```", re.S)

RUN = "run"
LONG = "long"
TEMPLATE = "template"

# (file, a phrase of the block) -> (kind, why). A LONG block's why holds its measured time.
BLOCKS = {
    ("README.md", "tools/run.sh      # the main job"): (
        LONG, "tools/run.sh: 456 s wall (189 cases; 2431 greedy requests checked against the numerical "
              "reference) on a 2-core machine at load 11-15; tools/test.sh: the default suite, under 4 min "
              "on an idle 2-core machine (docs/development.md)"),
    ("README.md", "media-trim-missing infer"): (RUN, "the failing-run example, with its own --report"),
    ("docs/crosscheck.md", "tools/crosscheck.sh vllm"): (
        LONG, "installs a runtime into its own venv: 5-15 min per runtime and version (docs/crosscheck.md)"),
    ("docs/edge-llm-deployments.md", "describe --engine-dir /path/to/engine"): (TEMPLATE, "the user's engine folder"),
    ("docs/edge-llm-deployments.md", "--executable /path/to/llm_inference"): (TEMPLATE, "the user's llm_inference"),
    ("docs/mutation.md", "pip install -e '.[mutate]'"): (
        LONG, "the campaign over the default modules: about 2,400 mutants at 15-50 s each on a 2-core machine "
              "at load 12-20 (docs/mutation.md section 7), a day of both cores"),
    ("docs/mutation.md", "# templates and JPEG"): (
        LONG, "1,387 s, 477 s and 622 s wall on a 2-core machine at load 12-20 (docs/mutation.md section 7)"),
    ("docs/mutation.md", "--case cases/vlm_context_reuse.json --jobs 1"): (
        LONG, "342 s and 1,135 s wall on a 2-core machine at load 5-8 (docs/mutation.md section 7)"),
    ("docs/parity.md", ".venv/bin/kvconform parity                 #"): (RUN, "seconds; --update-readme in the copy"),
    ("docs/peers.md", "--profile vllm-apc \\\n    --tokenizer DIR --model NAME"): (TEMPLATE, "the user's server"),
    ("docs/peers.md", "gpu_backend serve --profile vllm-apc --port 8000"): (
        RUN, "the bundled server in one shell, the run in a second"),
    ("docs/report.md", "kvconform report /ci/artifacts/rep"): (TEMPLATE, "a CI artifact folder"),
    ("docs/running-a-backend.md", "/path/to/build/examples/llm/llm_inference"): (TEMPLATE, "the user's engine"),
    ("docs/simulate.md", "--capacity 20000 --capacity-unit pages"): (TEMPLATE, "the user's traffic.jsonl"),
    ("docs/simulate.md", "--capacity 1e5:1e9:9,inf"): (TEMPLATE, "the user's traffic.jsonl"),
    ("docs/simulate.md", "for t in conversation synthetic"): (
        LONG, "needs Mooncake's published traces (downloaded by hand, docs/simulate.md section 5); minutes"),
    ("docs/writing-cases.md", "--engineConfig config.json --inputFile in.json"): (
        TEMPLATE, "the user's engine description and request file"),
}


def blocks() -> list[tuple[str, int, str]]:
    """(file, line, text) of every command block."""
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        for m in FENCE.finditer(text):
            out.append((str(path.relative_to(ROOT)), text[:m.start()].count("\n") + 1, m.group(1)))
    return out


def classified(file: str, text: str):
    keys = [k for k in BLOCKS if k[0] == file and k[1] in text]
    return keys


def test_every_command_block_is_classified_once():
    found = blocks()
    assert len(found) >= 12
    used = set()
    for file, line, text in found:
        keys = classified(file, text)
        assert len(keys) == 1, f"{file}:{line}: classify this block in BLOCKS (run, long with its time, or template)"
        used.add(keys[0])
    assert used == set(BLOCKS), f"BLOCKS names blocks the docs no longer have: {set(BLOCKS) - used}"


def _commands(text: str) -> list[list[str]]:
    """The kvconform and gpu_backend invocations of a block: [program, subcommand, options...]."""
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.split(" #")[0]
        for part in re.split(r"&&|;|\|", line):
            words = part.replace("[", " ").replace("]", " ").split()
            for i, word in enumerate(words):
                if word.endswith("bin/kvconform") or word == "kvconform":
                    out.append(["kvconform", *words[i + 1:]])
                    break
                if word == "gpu_backend" and i > 0 and words[i - 1] == "-m":
                    out.append(["gpu_backend", *words[i + 1:]])
                    break
    return [c for c in out if len(c) > 1]


def _help(program: str, sub: str) -> str:
    if program == "kvconform":
        from conformance.cli import main
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), pytest.raises(SystemExit):
            main([sub, "--help"])
        return buf.getvalue()
    return subprocess.run([sys.executable, "-m", "gpu_backend", sub, "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60).stdout


def test_every_option_in_the_docs_is_accepted_under_its_current_spelling():
    helps: dict = {}
    problems = []
    for file, line, text in blocks():
        for program, sub, *rest in _commands(text):
            if (program, sub) not in helps:
                helps[(program, sub)] = _help(program, sub)
            known = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", helps[(program, sub)]))
            for option in re.findall(r"(?<![\w$/.-])(--[A-Za-z][\w-]*)", " ".join(rest)):
                if option not in known:
                    problems.append(f"{file}:{line}: {program} {sub} {option}")
    assert not problems, "options the command does not list under --help (unknown or deprecated):\n" + \
        "\n".join(problems)


# -- the RUN blocks, as written, in a fresh copy ----------------------------------------------------

def _fresh_copy(tmp: Path) -> Path:
    """The checkout's tracked and new files (what a clone holds), with this venv linked in, and
    the default report folder left behind by a run, as after `tools/run.sh`."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    copy = tmp / "kvconform"
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file() or src.is_symlink():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, copy / name, follow_symlinks=False)
    os.symlink(ROOT / ".venv", copy / ".venv")
    done = subprocess.run([str(copy / ".venv/bin/kvconform"), "run", "--backend", "reference", "--no-generated",
                           "-k", "golden/plan-kinds-p4", "--no-progress"], cwd=copy, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and (copy / "kvconform-report" / "report.json").is_file(), done.stderr
    return copy


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(copy: Path, script: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PWD": str(copy)}
    env.pop("PYTHONPATH", None)
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=copy, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
def test_the_cheap_blocks_run_as_written(tmp_path):
    copy = _fresh_copy(tmp_path)
    runs = {key: text for file, _, text in blocks() for key in classified(file, text) if BLOCKS[key][0] == RUN}
    assert len(runs) == 3
    for (file, phrase), text in runs.items():
        if "gpu_backend serve" in text:
            continue
        start = time.monotonic()
        done = _run(copy, text)
        expected = 1 if "media-trim-missing" in text else 0       # the README's example is a failing run
        assert done.returncode == expected, f"{file}: {phrase}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stdout + done.stderr
        print(f"{file}: {time.monotonic() - start:.0f} s")
    # peers.md section 8: the server in one shell, the run in another (a free port for 8000)
    server_line, *run_lines = next(t for k, t in runs.items() if "gpu_backend serve" in t).strip().splitlines()
    port = str(_free_port())
    server = subprocess.Popen(["bash", "-c", "exec " + server_line.replace("8000", port)], cwd=copy,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert "listening on" in server.stdout.readline()
        done = _run(copy, "\n".join(run_lines).replace("8000", port))
        assert done.returncode == 0 and "CONFORMANT (vllm-apc)" in done.stdout, done.stdout + done.stderr
    finally:
        server.terminate()
        server.wait(timeout=30)
