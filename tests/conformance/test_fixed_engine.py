"""A real deployment has one engine: the whole suite comes to it.

Five fixed engines (an Edge-LLM-shaped P = 128 engine with vision, LoRA and batch 4; a P = 16
hybrid engine with LoRA; a P = 4 text engine with batch 1; and at P = 128 the real Phi-3-mini
tokenizer with LoRA and batch 4, and Phi-3-vision's under transformers' loader with its image
counter): the bundled backend is CONFORMANT on
each with every case materialized for it, and a wrapper that reuses more than it may (one page
too many on a full hit; a checkpoint of another prefix on the hybrid engine), or that misreports
one counter, is NOT CONFORMANT on each, with the rule and a reproducer that re-runs.
The default tests drive the curated cases in process (on the three P = 128 engines one
interleaved shard of three each, together every case but the birthday bound, which the page size
leaves alone) and one catching case per wrapper through
the command adapter (the miscounting wrapper on two engines, the reproducer re-run on one engine
of each kind); `-m slow` runs every curated case in process on each engine, the miscounting
wrapper and the re-run on each, and the whole suite through the command adapter."""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance.cases.case import discover, in_shard
from conformance.cli import main as kvconform
from conformance.adapters.engines import build_cached, source_digest

ROOT = Path(__file__).resolve().parents[2]
ENGINES = {
    "p128-vision-lora-b4": ["--tokensPerPage", "128", "--vision", "--loraAdapters", "a,b", "--maxBatchSize", "4",
                            "--maxInputLen", "3072", "--maxKVCacheCapacity", "4096"],
    "p16-hybrid-lora": ["--tokensPerPage", "16", "--model", "hybrid", "--loraAdapters", "a,b", "--maxBatchSize", "2",
                        "--maxInputLen", "1024", "--maxKVCacheCapacity", "1280"],
    "p4-text-b1": ["--tokensPerPage", "4", "--maxInputLen", "256", "--maxKVCacheCapacity", "320"],
    # real tokenizers at Edge-LLM's page size (spec/hf-tokenizer.md): every case's text in one-token units
    "p128-phi3-mini-lora-b4": ["--tokensPerPage", "128", "--tokenizer", str(ROOT / "spec/tokenizers/phi-3-mini"),
                               "--loraAdapters", "a,b", "--maxBatchSize", "4", "--maxInputLen", "3072",
                               "--maxKVCacheCapacity", "4096"],
    "p128-phi3-vision-auto": ["--tokensPerPage", "128", "--tokenizer", str(ROOT / "spec/tokenizers/phi-3-vision"),
                              "--tokenizerLoader", "transformers-auto", "--vision", "--maxInputLen", "3072",
                              "--maxKVCacheCapacity", "4096"],
}
# What the curated cases give on each engine in process (measured; a drop means the suite lost reach)
MIN_JUDGED = {"p128-vision-lora-b4": 104, "p16-hybrid-lora": 96, "p4-text-b1": 72, "p128-phi3-mini-lora-b4": 85,
              "p128-phi3-vision-auto": 80}
# The P = 128 engines judge every output against the float64 forward of prompts of up to 3072
# tokens: in the default run each takes another interleaved shard of three of the curated cases
# (cases of 12 of the 13 sections), so that together they meet every curated case but one at
# P = 128; `-m slow` gives each the whole suite. The judged counts are measured.
# The one left out of the shards is CR-ID-6's birthday bound: it needs 5 * 2^16 / (pool pages)
# page lookups, 10,240 pages of 128 tokens on these 32-page pools (1,024 prompts of 1,280 tokens:
# 175 s of the 193 s its shard's cases took with the float64 reference computed afresh). The
# collision it looks for is one of 16-bit digests, which the page size does not change: the P = 4
# and P = 16 engines run it in the default tests, `-m slow` each engine.
SHARDS = 3
SHARD = {"p128-phi3-mini-lora-b4": 1, "p128-phi3-vision-auto": 2, "p128-vision-lora-b4": 3}
OUT_OF_SHARDS = "sections/id/distinct-pages-birthday"
MIN_JUDGED_IN_SHARD = {"p128-phi3-mini-lora-b4": 28, "p128-phi3-vision-auto": 31, "p128-vision-lora-b4": 36}
# Sections with a PASS in each shard (measured; shard 3 has 7 on every one of the three engines)
MIN_SECTIONS_IN_SHARD = {"p128-phi3-mini-lora-b4": 8, "p128-phi3-vision-auto": 8, "p128-vision-lora-b4": 7}


def _conformance_params():
    for name in ENGINES:
        if name in SHARD:
            yield pytest.param(name, SHARD[name], id=f"{name}-shard-{SHARD[name]}-of-{SHARDS}")
            yield pytest.param(name, None, id=name, marks=pytest.mark.slow)
        else:
            yield pytest.param(name, None, id=name)


@pytest.fixture(scope="module")
def engines():
    """Each engine built by `gpu_backend build` with its flags, as a deployment builds it, into the
    kit's engine cache (conformance/adapters/engines.py: keyed by the flags and the backend's source), so
    the pytest workers and later runs share one build instead of one per worker and module."""
    from gpu_backend.cli import main as gpu_backend_cli
    salt = "gpu_backend build " + source_digest(ROOT / "gpu_backend")
    out = {}
    for name, args in ENGINES.items():
        def build(folder: Path, args=args) -> None:
            assert gpu_backend_cli(["build", "--engineDir", str(folder), "--maxKVPoolPages", "0", *args]) == 0
        out[name] = str(build_cached({"flags": args}, salt, build))
    return out


def wrapper(tmp_path: Path, name: str, body: str) -> str:
    """An executable file standing for a vendor's llm_inference."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


PY = shlex.quote(sys.executable)
CORRECT = f'exec {PY} -m gpu_backend infer "$@"'
# reuses more than it may: every page of a full hit (attention), a checkpoint of another prefix
# that differs only in its partial page (hybrid)
TOO_MUCH = {"attention": f'exec {PY} -m faulty_backends full-hit-replays-last-token infer "$@"',
            "hybrid": f'exec {PY} -m faulty_backends checkpoint-partial-page-ignored infer "$@"'}
# runs correctly, then reports one more hit than it had
MISCOUNT = (f'{PY} -m gpu_backend infer "$@"; rc=$?\n'
            'while [ $# -gt 0 ]; do [ "$1" = --profileOutputFile ] && prof=$2; shift; done\n'
            f'{PY} -c "import json,sys; p=sys.argv[1]; d=json.load(open(p)); c=d.get(\'context_cache\')\n'
            'if c: c[\'hit_sequences\'] += 1\njson.dump(d, open(p, \'w\'))" "$prof"\nexit $rc')


def report(folder: Path) -> dict:
    return json.loads((folder / "report.json").read_text())


@pytest.mark.parametrize("name, shard", list(_conformance_params()))
def test_the_bundled_backend_is_conformant_on_each_fixed_engine(name, shard, engines, tmp_path, capsys):
    code = kvconform(["run", "--no-progress", "--engine-dir", engines[name], "--no-generated",
                      *(["--shard", f"{shard}/{SHARDS}", "--exclude", OUT_OF_SHARDS] if shard else []),
                      "--report", str(tmp_path / "r")])
    doc = report(tmp_path / "r")
    assert code == 0 and doc["summary"]["headline"] == "CONFORMANT", capsys.readouterr().out[-3000:]
    assert doc["summary"]["judged"] >= (MIN_JUDGED_IN_SHARD[name] if shard else MIN_JUDGED[name])
    if shard:                                   # exactly the shard's cases, passing in 7 or 8 sections or more
        mine = [c for k, c in enumerate(c for c in discover() if c.id != OUT_OF_SHARDS) if in_shard(k, (shard, SHARDS))]
        assert [c["id"] for c in doc["cases"]] == [c.id for c in mine]
        assert len({c["section"] for c in doc["cases"] if c["verdict"] == "PASS"}) >= MIN_SECTIONS_IN_SHARD[name]
    unsupported = [c for c in doc["cases"] if c["verdict"] == "NOT_SUPPORTED"]
    assert all(c["reason"].startswith(("cannot be expressed on this engine: ", "the backend does not declare"))
               for c in unsupported)
    materialized = [c for c in doc["cases"] if (c.get("details") or {}).get("materialized", {}).get("file")]
    assert len(materialized) == doc["summary"]["judged"]
    for c in materialized[:5]:                                   # every materialized file is kept, and replays
        assert (tmp_path / "r" / c["details"]["materialized"]["file"]).is_file()


def _command(engine: str, exe: str, caps: str) -> list[str]:
    return ["--executable", exe, "--engine-dir", engine, "--capabilities", caps]


def kind(name: str) -> str:
    return "hybrid" if "hybrid" in name else "attention"


# One case that each wrapper of TOO_MUCH breaks, on every engine of its kind (materialized onto
# the engine: a full hit rewinds its last page at any page size; a checkpoint is taken at a page
# boundary whatever the engine's page size)
CATCHING = {"attention": ["-k", "golden/plan-full-input-rewind-128"],
            "hybrid": ["-k", "sections/hyb/partial-page-identity"]}


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    """What `python -m gpu_backend capabilities > caps.json` writes (in process: no second torch start)."""
    from gpu_backend.cli import main as gpu_backend_cli
    path = tmp_path_factory.mktemp("caps") / "caps.json"
    with open(path, "w") as f, contextlib.redirect_stdout(f):
        assert gpu_backend_cli(["capabilities"]) == 0
    return str(path)


# The reproducer is re-run on one engine of each kind by default (two more process starts per
# engine), on every engine under `-m slow`
RERUN = {"p128-vision-lora-b4", "p16-hybrid-lora"}


@pytest.mark.parametrize("name, rerun", [pytest.param(n, n in RERUN, id=n) for n in ENGINES]
                         + [pytest.param(n, True, id=f"{n}-rerun", marks=pytest.mark.slow) for n in ENGINES
                            if n not in RERUN])
def test_a_wrapper_that_reuses_too_much_is_caught(name, rerun, engines, manifest, tmp_path):
    exe = wrapper(tmp_path, "llm_inference", TOO_MUCH[kind(name)])
    assert kvconform(["run", "--no-progress", "--no-generated", "--jobs", "2", *CATCHING[kind(name)],
                      *_command(engines[name], exe, manifest), "--report", str(tmp_path / "r")]) == 1
    failed = [c for c in report(tmp_path / "r")["cases"] if c["verdict"] == "FAIL"]
    assert failed and any(f["rule"] in ("CR-PLAN-2", "CR-PLAN-4", "CR-HYB-5") for c in failed for f in c["failures"])
    first = failed[0]
    assert (tmp_path / "r" / first["reproducer"]).is_file() and (tmp_path / "r" / first["evidence"]).is_dir()
    if rerun:
        argv = shlex.split(first["rerun"].split("&&", 1)[1])[1:]
        assert kvconform(argv + ["--no-progress"]) == 1, "the reproducer fails again against the same wrapper"


# A counter is read from the profile file whatever the engine: the default run checks it on the
# smallest engine and on the real-tokenizer one with vision, `-m slow` on each
MISCOUNT_ENGINES = [pytest.param(n, marks=() if n in ("p4-text-b1", "p128-phi3-vision-auto") else pytest.mark.slow)
                    for n in ENGINES]


@pytest.mark.parametrize("name", MISCOUNT_ENGINES)
def test_a_wrapper_that_misreports_one_counter_is_caught(name, engines, manifest, tmp_path):
    exe = wrapper(tmp_path, "llm_inference", MISCOUNT)
    assert kvconform(["run", "--no-progress", "--no-generated", "--jobs", "2", "-k", "golden/plan-kinds-p4",
                      *_command(engines[name], exe, manifest), "--report", str(tmp_path / "r")]) == 1
    failures = [f for c in report(tmp_path / "r")["cases"] for f in c["failures"]]
    assert any(f["rule"] == "CR-MET-2" and f["what"] == "profile.context_cache.hit_sequences" for f in failures)


@pytest.mark.parametrize("name", ["p128-vision-lora-b4", "p16-hybrid-lora"])
def test_a_correct_wrapper_passes_the_same_selection(name, engines, manifest, tmp_path):
    exe = wrapper(tmp_path, "llm_inference", CORRECT)
    assert kvconform(["run", "--no-progress", "--no-generated", "--jobs", "2", *CATCHING[kind(name)],
                      *_command(engines[name], exe, manifest), "--report", str(tmp_path / "r")]) == 0
    assert [c["verdict"] for c in report(tmp_path / "r")["cases"]] == ["PASS"]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ENGINES))
def test_the_whole_suite_through_the_command_adapter_on_each_fixed_engine(name, engines, manifest, tmp_path):
    """The fixed-engine numbers of docs/running-a-backend.md: a wrapper around `python -m gpu_backend infer`, one
    fixed engine, every curated case and the generated families, under 10 minutes on 2 cores."""
    exe = wrapper(tmp_path, "llm_inference", CORRECT)
    started = time.monotonic()
    code = kvconform(["run", "--no-progress", "--jobs", "2", *_command(engines[name], exe, manifest),
                      "--report", str(tmp_path / "r")])
    wall = time.monotonic() - started
    doc = report(tmp_path / "r")
    counts = doc["summary"]["verdicts"]
    print(f"{name}: {doc['summary']['headline']}, {doc['summary']['judged']} judged of {len(doc['cases'])}, "
          f"{counts}, {wall:.0f} s")
    assert code == 0 and doc["summary"]["headline"] == "CONFORMANT"
    assert doc["summary"]["judged"] >= MIN_JUDGED[name] + 1
    families = [c for c in doc["cases"] if c["id"].startswith("generated/") and c["verdict"] == "PASS"]
    assert families and all(c["details"]["batches_checked"] >= 25 for c in families)
    assert wall < 600


@pytest.mark.slow
def test_selftest_through_fixed_engines_kills_every_variant(tmp_path):
    p = subprocess.run([sys.executable, "-m", "conformance.cli", "selftest", "--fixed-engines", "--no-progress",
                        "--report", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=1800,
                       env=dict(os.environ))
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    doc = json.loads((tmp_path / "selftest.json").read_text())
    assert doc["kill_rate"]["percent"] == 100.0 and all(b["ok"] for b in doc["baselines"].values())
