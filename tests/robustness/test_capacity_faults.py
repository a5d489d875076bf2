"""Capacity faults in the bundled backend.

By CR-CAP-1 and CR-BATCH-5 admission and decode growth never fail on a valid engine with reuse
enabled (spec Appendix A). A pool too small for a batch arises only in two ways, and both are
built here the way a runtime meets them, with no fault switch in the backend:

(a) a hand-written engine description whose pool is below the CR-CAP-1 minimum, run with reuse
    disabled (CR-SUP-3 refuses it only with reuse on; the build tool refuses it always);
(b) device memory held by something else: `MemoryHeldElsewhere` pins free pages of a live
    runtime's pool through the pool's own allocation API, as another tenant would.

Either way the batch that does not fit fails with finish_reason "error" (at admission or at a
decode step's growth), its leases are released, later batches run normally, the cache
invariants hold after every batch (reference counts, free lists, index), and the run exits 1.
"""
from __future__ import annotations

import json

import pytest

from tests.robustness import harness

ENGINE = {"maxInputLen": 16, "maxKVCacheCapacity": 24, "maxKVPoolPages": 0, "tokensPerPage": 4, "maxBatchSize": 2}
# CR-CAP-1 minimum: 2 * ceil(24 / 4) = 12 pages


def user(text):
    return {"messages": [{"role": "user", "content": text}]}


# batch_size 2, max_generate_length 4; with a 5-page pool:
#   batch 0: 1 + 1 pages, growing to 2 + 2: fits
#   batch 1: 3 + 3 pages at admission: the second sequence cannot be admitted
#   batch 2: 4 + 1 pages admitted, then the first decode step needs a 6th page: growth fails
#   batch 3: fits again
FILE = {"apply_chat_template": False, "temperature": 0, "max_generate_length": 4, "batch_size": 2,
        "requests": [user("abcd"), user("efgh"), user("abcdefghijkl"), user("mnopqrstuvwx"),
                     user("abcdefghijklmnop"), user("x"), user("ab"), user("cd")]}


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """A valid engine, and the same weights described with a 5-page pool."""
    import os
    from gpu_backend import build_engine
    root = tmp_path_factory.mktemp("capacity")
    cfg = build_engine(root / "valid", ENGINE)
    small = root / "small"
    small.mkdir()
    os.symlink(root / "valid" / "model.safetensors", small / "model.safetensors")
    (small / "config.json").write_text(json.dumps(dict(cfg, kv_pool_pages=5)))
    (root / "req.json").write_text(json.dumps(FILE))
    return root


def counting_checks(rt) -> list:
    """Count the runtime's own invariant checks (it runs one after every batch)."""
    calls, check = [], rt.cache.check_invariants

    def counted(*a, **k):
        calls.append(1)
        return check(*a, **k)
    rt.cache.check_invariants = counted
    return calls


def outcomes(responses):
    return [(r["batch_idx"], r["finish_reason"]) for r in responses]


def test_pool_below_the_minimum_without_reuse_fails_the_batches_that_do_not_fit(engines):
    from gpu_backend import Runtime
    rt = Runtime(engines / "small", check_invariants=True, device="cpu")
    calls = counting_checks(rt)
    got = rt.infer(FILE, str(engines))
    assert outcomes(got["responses"]) == [(0, "max-length"), (0, "max-length"), (1, "error"), (1, "error"),
                                          (2, "error"), (2, "error"), (3, "max-length"), (3, "max-length")]
    texts = [r["output_text"] for r in got["responses"]]
    assert "cannot hold the batch" in texts[2] and "decode growth" in texts[4]
    assert got["failed_batches"] == 2 and len(calls) == 4, "an invariant check after every batch"
    assert rt.cache.pages.num_free == rt.cache.pages.capacity == 5, "every page came back"
    # the batches that fit run exactly as on an engine with a full pool
    full = Runtime(engines / "valid", device="cpu").infer(FILE, str(engines))["responses"]
    for i in (0, 1, 6, 7):
        assert got["responses"][i]["output_ids"] == full[i]["output_ids"]


def test_the_cli_exits_1_with_every_file_written(engines):
    out = engines / "out.json"
    o = harness.backend(["infer", "--engineDir", str(engines / "small"), "--inputFile", str(engines / "req.json"),
                         "--outputFile", str(out), "--profileOutputFile", str(engines / "prof.json"),
                         "--checkInvariants", "--device", "cpu"])
    assert harness.check_infer(o, str(engines / "req.json"), str(out)) == 1
    assert [r for _, r in outcomes(json.loads(out.read_text())["responses"])].count("error") == 4


def test_with_reuse_the_deployment_is_refused(engines):
    """CR-SUP-3: the same description with reuse enabled is refused before anything runs,
    by the backend and by the oracle."""
    out = engines / "refused.json"
    o = harness.backend(["infer", "--engineDir", str(engines / "small"), "--inputFile", str(engines / "req.json"),
                         "--outputFile", str(out), "--enableContextReuse", "--device", "cpu"])
    assert harness.check_infer(o, str(engines / "req.json"), str(out)) == 3 and "KV page pool of 5 pages" in o.err
    s = harness.kvconform(["simulate", "--engineConfig", str(engines / "small" / "config.json"),
                           "--inputFile", str(engines / "req.json"), "--profileOutputFile", str(engines / "p.json"),
                           "--enableContextReuse"])
    assert harness.check_simulate(s, [str(engines / "req.json")], True) == 3 and "CR-SUP-3" in s.err


def test_the_oracle_predicts_the_same_failures(engines):
    """CR-POL-6: without reuse the pool still bounds admission and growth, so the oracle predicts
    the same failed batches. Whether growth fails depends on how many tokens each sequence
    generates; the transcript is the run of the same weights on the full-size pool, where every
    batch completes."""
    from gpu_backend import Runtime
    full = Runtime(engines / "valid", device="cpu").infer(FILE, str(engines))
    transcript = engines / "full-pool-output.json"
    transcript.write_text(json.dumps(full))
    predictions = engines / "pred.json"
    s = harness.kvconform(["simulate", "--engineConfig", str(engines / "small" / "config.json"),
                           "--inputFile", str(engines / "req.json"), "--profileOutputFile", str(engines / "p2.json"),
                           "--transcript", str(transcript), "--outputFile", str(predictions)])
    assert harness.check_simulate(s, [str(engines / "req.json")], True) == 1
    batches = json.loads(predictions.read_text())["batches"]
    assert [(b["status"], b["rule"]) for b in batches] == [
        ("ok", None), ("failed", "CR-CAP-8"), ("failed", "CR-CAP-8"), ("ok", None)]
    assert "cannot be admitted" in batches[1]["error"] and "decode growth" in batches[2]["error"]


def test_without_a_transcript_the_oracle_says_growth_depends_on_generated_tokens(engines):
    s = harness.kvconform(["simulate", "--engineConfig", str(engines / "small" / "config.json"),
                           "--inputFile", str(engines / "req.json"), "--profileOutputFile", str(engines / "p3.json")])
    assert harness.check_simulate(s, [str(engines / "req.json")], True) == 2
    assert "give a transcript" in s.err and "$.requests[4]" in s.err


class MemoryHeldElsewhere:
    """Device memory taken by another tenant: pages pinned through the pool's own API, outside
    any sequence or record, until released. Test-only; the runtime has no idea."""

    def __init__(self, rt, pages: int):
        self.rt, self.pages = rt, rt.cache.pages.allocate(pages)

    def release(self):
        self.rt.cache.release(self.pages)
        self.pages = []


def test_memory_held_elsewhere_fails_admission_and_growth_then_recovers(engines):
    from gpu_backend import Runtime
    rt = Runtime(engines / "valid", enable_context_reuse=True, device="cpu")   # 12 pages, valid
    cache = rt.cache

    def run(doc):
        got = rt.infer(doc, str(engines))
        cache.check_invariants(live_tables=[hog.pages])       # the holder's pins are accounted for
        return got

    def one_batch(*texts, gen=4):
        return {"apply_chat_template": False, "temperature": 0, "max_generate_length": gen,
                "batch_size": len(texts), "requests": [user(t) for t in texts]}

    hog = MemoryHeldElsewhere(rt, 10)                                           # 2 pages left
    got = run(one_batch("abcdefgh", "ijklmnop"))                               # 2 + 2 at admission
    assert outcomes(got["responses"]) == [(0, "error"), (0, "error")] and got["failed_batches"] == 1
    assert "cannot hold the batch" in got["responses"][0]["output_text"]
    assert cache.pages.num_free == 2, "the failed batch gave its pages back"

    hog.release()
    hog = MemoryHeldElsewhere(rt, 9)                                            # 3 pages left
    got = run(one_batch("abcdefgh", gen=8))             # admitted with 2, grows to 3, then needs a 4th
    assert outcomes(got["responses"]) == [(0, "error")] and "decode growth" in got["responses"][0]["output_text"]
    held_by_records = {i for i in range(cache.pages.capacity) if cache.pages.cache[i]}
    assert cache.pages.num_free == 3 - len(held_by_records)

    hog.release()                                                               # the tenant leaves
    hog = MemoryHeldElsewhere(rt, 0)
    got = run(one_batch("abcdefgh", "ijklmnop", gen=8))
    assert outcomes(got["responses"]) == [(0, "max-length"), (0, "max-length")] and got["failed_batches"] == 0
    cache.check_invariants()
    held_by_records = {i for i in range(cache.pages.capacity) if cache.pages.cache[i]}
    assert cache.pages.num_free == cache.pages.capacity - len(held_by_records)


def test_length_limits_fail_their_batch_in_backend_and_oracle(engines, tmp_path):
    """CR-BATCH-5 on a valid engine (maxInputLen 16, capacity 24): an input of 17 tokens, and
    n + max_generate_length = 12 + 13 > 24, each fail their batch; the others run; exit 1; the
    oracle predicts the same batches."""
    doc = {"apply_chat_template": False, "temperature": 0, "max_generate_length": 4,
           "requests": [user("abcd"), user("a" * 17), user("efgh")]}
    f = tmp_path / "len.json"
    f.write_text(json.dumps(doc))
    long_gen = dict(doc, max_generate_length=13, requests=[user("a" * 12)])
    g = tmp_path / "gen.json"
    g.write_text(json.dumps(long_gen))
    for file, failed in ((f, [1]), (g, [0])):
        out = tmp_path / f"{file.stem}.out.json"
        o = harness.backend(["infer", "--engineDir", str(engines / "valid"), "--inputFile", str(file),
                             "--outputFile", str(out), "--checkInvariants", "--device", "cpu"])
        assert harness.check_infer(o, str(file), str(out)) == 1
        got = [r["batch_idx"] for r in json.loads(out.read_text())["responses"] if r["finish_reason"] == "error"]
        assert got == failed
        s = harness.kvconform(["simulate", "--engineConfig", str(engines / "valid" / "config.json"),
                               "--inputFile", str(file), "--profileOutputFile", str(tmp_path / "p.json")])
        assert harness.check_simulate(s, [str(file)], True) == 1
        assert [int(line.split()[2]) for line in s.lines()] == failed and "CR-BATCH-5" in s.err
