"""Smoke tests of the benchmark code: every section runs end to end on tiny shapes and
writes its JSON, table and plot. No timing is asserted anywhere: these only check that the code
paths work and that the figures are internally consistent."""
import json

import pytest

from benchmarks import report
from benchmarks.trace import TraceModel, write_trace


def test_trace_is_seeded_and_counts_tokens_exactly(tmp_path):
    import reference
    a = write_trace(tmp_path / "a.json", 40, seed=3)
    b = write_trace(tmp_path / "b.json", 40, seed=3)
    assert a == b and (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    doc = json.loads((tmp_path / "a.json").read_text())
    parsed = reference.parse_request_file(doc, str(tmp_path))
    assert sum(r.n for r in parsed.requests) == a["prompt_tokens"]
    assert max(r.n for r in parsed.requests) <= TraceModel(3).max_tokens


def test_trace_mean_is_near_2048():
    m = TraceModel(0)
    lengths = [m.tokens_of(*r) for r in m.requests(3000)]
    assert 1900 < sum(lengths) / len(lengths) < 2200


def test_quick_run_writes_json_table_and_plot(tmp_path):
    """The plot needs matplotlib (the `bench` extra, which tools/setup_env.sh installs); the
    test runs with it and must not skip without it."""
    from benchmarks.__main__ import main
    assert main(["--quick", "--only", "oracle,reuse,paged,memory", "--name", "t", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "t.json").read_text())
    assert set(res["sections"]) == {"oracle", "reuse", "paged", "memory"}
    assert (tmp_path / "t.png").stat().st_size > 0
    table = (tmp_path / "t.md").read_text()
    assert "| item | measure | target | measured | status |" in table and "![benchmarks](t.png)" in table
    o = res["sections"]["oracle"]["rows"]
    assert all(r["trace"]["prompt_tokens"] > 0 and r["cli_tokens_per_s"] > 0 for r in o)
    for row in res["sections"]["reuse"]["shapes"]["tiny"]["rows"]:
        assert row["ttft_ms"]["warm"] > 0 and sum(row["warm_breakdown_share"].values()) == pytest.approx(1.0)
    for row in res["sections"]["paged"]["shapes"]["tiny"]["rows"]:
        assert row["tokens_per_s"]["paged"] > 0 and row["tokens_per_s"]["contiguous"] > 0
    pool = res["sections"]["reuse"]["shapes"]["tiny"]["pool"]
    assert pool["usable_bytes_equal_formula"]
    assert {r["item"] for r in report.targets(res)} >= {"1", "2", "3", "5", "6"}


def test_results_are_written_without_matplotlib(tmp_path, monkeypatch):
    """The runner copes without the plot library: JSON and table, no image, no failure."""
    import sys
    from benchmarks import runner
    monkeypatch.setitem(sys.modules, "matplotlib", None)          # `import matplotlib` raises
    res = {"format": "kvconform-bench-v1", "name": "t", "quick": True, "device": "cpu", "machine": {},
           "threads": 1, "sections": {}, "load": {}, "skipped": {}, "started": "2026-12-01T00:00:00+0000",
           "total_seconds": 1.0}
    runner.write(res, str(tmp_path), "t", final=True)
    assert json.loads((tmp_path / "t.json").read_text())["name"] == "t"
    assert not (tmp_path / "t.png").exists() and "![benchmarks]" not in (tmp_path / "t.md").read_text()


def test_gpu_script_refuses_without_cuda_and_smokes_on_cpu(tmp_path):
    import torch
    from benchmarks.gpu import main
    if not torch.cuda.is_available():
        assert main(["--out", str(tmp_path)]) == 2
    assert main(["--smoke", "--device", "cpu", "--only", "reuse,paged", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "gpu-smoke.json").read_text())
    assert set(res["sections"]) == {"reuse", "paged"}


def test_a_failing_gpu_section_is_reported_and_the_next_one_runs(tmp_path, monkeypatch, capsys):
    from benchmarks import runner
    from benchmarks.gpu import main

    def out_of_memory(*a, **k):
        raise RuntimeError("CUDA out of memory (simulated)")
    monkeypatch.setattr(runner.memory, "run", out_of_memory)
    assert main(["--smoke", "--device", "cpu", "--only", "memory,reuse", "--out", str(tmp_path)]) == 1
    res = json.loads((tmp_path / "gpu-smoke.json").read_text())
    assert set(res["sections"]) == {"reuse"} and "out of memory" in res["failed"]["memory"]["error"]
    assert "section memory FAILED: RuntimeError: CUDA out of memory (simulated)" in capsys.readouterr().out


def test_contiguous_baseline_decodes_like_the_paged_pool(tmp_path):
    """The item-3 baseline is the same model: both stores give the same greedy tokens."""
    import torch
    from benchmarks import paged
    from benchmarks.backend_util import TINY, ensure_engine
    import gpu_backend
    d = ensure_engine(str(tmp_path), "tiny", TINY, layers=2, max_input=200, capacity=256, pages=32, batch=2)
    rt = gpu_backend.Runtime(d, device="cpu")
    torch.manual_seed(0)
    out = paged.model_level(rt, batch=2, n0=40, steps=6, reps=1)
    assert out["tokens_per_s"]["paged"] > 0 and out["tokens_per_s"]["contiguous"] > 0
    assert out["greedy_tokens_equal"]


def test_side_by_side_times_two_trees_and_refuses_outputs_that_differ(tmp_path):
    """benchmarks/simulate_side_by_side.py: the same tree twice gives two rows and a ratio; a tree
    whose `kvconform simulate` writes other predictions is refused, naming the first difference."""
    from pathlib import Path
    from benchmarks import simulate_side_by_side as sbs
    root = Path(__file__).resolve().parents[2]
    r = sbs.run(root, root, requests=20, reps=1)
    assert r["prompt_tokens"] > 0 and len(r["old"]["seconds"]) == len(r["new"]["seconds"]) == 1
    assert r["speedup"] > 0 and "| old |" in sbs.table(r) and "| new |" in sbs.table(r)
    assert len(r["new"]["cpu_seconds"]) == 1 and 0 < r["new"]["median_cpu_s"] and r["cpu_speedup"] > 0
    fake = tmp_path / "fake"
    (fake / "conformance").mkdir(parents=True)
    (fake / "conformance" / "__init__.py").write_text("")
    (fake / "conformance" / "cli.py").write_text(
        "import json, sys\n"
        "a = sys.argv[1:]\n"
        "json.dump({'responses': []}, open(a[a.index('--outputFile') + 1], 'w'))\n"
        "json.dump({}, open(a[a.index('--profileOutputFile') + 1], 'w'))\n")
    with pytest.raises(SystemExit, match=r"predictions.json differs between the two trees.*\$\["):
        sbs.run(root, fake, requests=20, reps=1)


def test_reference_side_by_side_times_two_trees_and_refuses_other_scores(tmp_path, monkeypatch):
    """benchmarks/reference_side_by_side.py: the same tree twice gives a row per shape and a ratio;
    a tree whose reference scores a step otherwise is refused, naming the request and the step."""
    from pathlib import Path
    from benchmarks import reference_side_by_side as rsb
    root = Path(__file__).resolve().parents[2]
    monkeypatch.setattr(rsb, "SHAPES", {"300+2": (300, 2, 2)})
    r = rsb.run(root, root, reps=1)
    row = r["shapes"]["300+2"]
    assert row["requests"] == 2 and row["old_s_per_request"] > 0 and row["cpu_speedup"] > 0
    assert "| 300 + 2 | 2 |" in rsb.table(r)
    fake = tmp_path / "fake" / "numerical_reference"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "layout.py").write_text(
        "class Weights:\n    cfg = {'vocab_size': 320, 'eos_token_id': 257}\n"
        "def load_weights(folder):\n    return Weights()\n")
    (fake / "scoring.py").write_text(
        "from types import SimpleNamespace as N\n"
        "def Inputs(tokens, media, adapter, bias, forced):\n    return N(forced=forced)\n"
        "def score(weights, inputs, mask):\n"
        "    return N(steps=[N(token=t, logprob=-1.0, top=[(t, -1.0)], kv_shift=0.0) for t in inputs.forced])\n")
    with pytest.raises(SystemExit, match=r"300\+2 is scored differently by the two trees.*request 0 step 0"):
        rsb.run(root, fake.parent, reps=1)


def test_the_conversation_model_is_seeded_and_a_valid_trace(tmp_path):
    """benchmarks/replay.py's model of Mooncake's conversation trace: the same bytes for a seed,
    read back by the command's own reader, its statistics counted exactly."""
    from benchmarks.replay import write_conversation_trace
    from conformance.traffic.formats import read_trace
    a = write_conversation_trace(str(tmp_path / "a.jsonl"), 300, seed=1)
    b = write_conversation_trace(str(tmp_path / "b.jsonl"), 300, seed=1)
    assert a == b and (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    trace = read_trace(str(tmp_path / "a.jsonl"))
    assert len(trace.entries) == 300 and sum(e.n for e in trace.entries) == a["prompt_tokens"]
    assert sum(e.output for e in trace.entries) == a["sampled_tokens"]


def test_replay_section_measures_and_reports(tmp_path):
    """Item 8 end to end on a tiny trace: a replay worker per profile (one core) and a whole
    `kvconform simulate --trace` sweep, then its rows of the targets table and its Markdown."""
    from benchmarks import replay
    trace = str(tmp_path / "t.jsonl")
    replay.write_conversation_trace(trace, 40)
    side = replay.side_by_side(trace, 20, 1, profiles=("kvconform-1", "vllm-apc:block_size=512"))
    assert [r["profile"] for r in side] == ["kvconform-1", "vllm-apc:block_size=512"]
    assert side[0]["prompt_tokens"] == side[1]["prompt_tokens"] > 0 and side[0]["cpu_tokens_per_s"] > 0
    sweep = replay.sweep(trace, "kvconform-1", "1e5,inf", str(tmp_path))
    assert sweep["capacities"] == 2 and sweep["requests"] == 40 and sweep["cpu_s"] > 0
    result = {"trace": {"source": "model"}, "side_by_side": side, "sweeps": [sweep]}
    rows = replay.target_rows(result)
    assert [r[0] for r in rows] == ["8"] * 3 and all(r[4] in (True, False) for r in rows)
    assert any("| kvconform-1 | 1e7 |" in line for line in replay.markdown(result))


def test_replay_side_by_side_runs_both_trees(tmp_path):
    """benchmarks/replay_side_by_side.py on one tree against itself: a replay worker per tree,
    the summaries compared, the ratio and table written."""
    from pathlib import Path
    from benchmarks import replay, replay_side_by_side
    trace = str(tmp_path / "t.jsonl")
    replay.write_conversation_trace(trace, 30)
    root = Path(__file__).resolve().parents[2]
    r = replay_side_by_side.run(root, root, reps=1, requests=20, trace=trace, runs=(("vllm-apc", "1e4"),))
    row, = r["rows"]
    assert row["profile"] == "vllm-apc" and row["requests"] == 20 and row["prompt_tokens"] > 0
    assert row["old"]["cpu_tokens_per_s"] > 0 and row["cpu_speedup"] > 0
    assert "| vllm-apc | 1e4 |" in replay_side_by_side.table(r)


def test_replay_side_by_side_sweeps_both_trees(tmp_path):
    """`--sweep`: each tree's `kvconform simulate --trace` over the whole trace at every capacity,
    the summaries compared capacity by capacity, the trace named by where it is published."""
    import json
    from pathlib import Path
    from benchmarks import replay, replay_side_by_side
    trace = tmp_path / "conversation_trace.jsonl"
    replay.write_conversation_trace(str(trace), 30)
    root = Path(__file__).resolve().parents[2]
    r = replay_side_by_side.run_sweep(root, root, reps=1, profile="vllm-apc", capacities="1e4,inf", trace=str(trace))
    s = r["sweep"]
    assert s["runs"] == 2 and s["requests"] == 30 and s["old"]["cpu_seconds"][0] > 0 and s["cpu_speedup"] > 0
    assert [x["capacity"] for x in s["summaries"]] == [10000, None]
    assert r["trace"] == "kvcache-ai/Mooncake FAST25-release/traces/conversation_trace.jsonl"
    assert str(tmp_path) not in json.dumps(r)
    assert "| new (" in replay_side_by_side.sweep_table(r)


def test_a_recorded_command_holds_no_path_of_the_machine():
    from benchmarks.common import recorded_command
    argv = ["--old", "/tmp/kit-before", "--trace", "/data/x/conversation_trace.jsonl", "--trace=/d/mine.jsonl",
            "--old=/tmp/o", "--reps", "2"]
    assert recorded_command("python -m b", argv, {"--old": "<a worktree at abc>"}) == (
        "python -m b --old <a worktree at abc> --trace kvcache-ai/Mooncake FAST25-release/traces/"
        "conversation_trace.jsonl --trace=mine.jsonl --old=<a worktree at abc> --reps 2")
