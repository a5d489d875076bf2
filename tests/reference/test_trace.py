"""The decision trace (reference/trace.py): optional, never changes a count, and its deciding
step of each predicted per-request fact says the value the oracle predicted."""
from pathlib import Path

import pytest

import reference
from reference.trace import deciding

from .test_golden import load, parse_generated

ROOT = Path(__file__).resolve().parents[2] / "cases"
CASES = sorted((ROOT / "golden").glob("*.json")) + sorted((ROOT / "sections").rglob("*.json"))
TRACED_FACTS = ("plan", "matched_tokens", "reused_tokens", "lookup_bypass", "media_aware", "hybrid_restore")


def run(path, trace: bool):
    """(simulator, what it predicted): responses, batches and profile, or how it refused."""
    doc, meta = load(path)
    args = dict(meta["engine"])
    if isinstance(args.get("tokenizer"), str):              # a tokenizer folder named from the case file
        args["tokenizer"] = str((path.parent / args["tokenizer"]).resolve())
    try:
        engine = reference.engine_from_build_args(args)
    except reference.InputError as e:                       # a refused build: nothing to trace
        return None, ("refused", str(e))
    flags = reference.RuntimeFlags.from_case_runtime(meta.get("runtime"))
    generated = meta.get("generated")
    if generated is not None:
        generated = [parse_generated(g) for g in generated]
    sim = reference.Simulator(engine, flags, trace=trace)
    if sim.rejection is not None:
        return sim, ("rejected", sim.rejection.rule)
    try:
        responses = sim.run(doc, str(path.parent), generated, last_accepted=meta.get("last_accepted"))
    except Exception as e:           # the same refusal either way (input errors, missing transcripts)
        return sim, ("raised", type(e).__name__, str(e))
    return sim, (responses, list(sim.batches), sim.profile())


def test_tracing_is_off_by_default():
    engine = reference.engine_from_build_args({"maxInputLen": 32, "maxKVCacheCapacity": 64, "maxKVPoolPages": 0, "tokensPerPage": 4})
    assert reference.Simulator(engine, reference.RuntimeFlags()).trace is None


@pytest.mark.parametrize("path", CASES, ids=lambda p: str(p.relative_to(ROOT).with_suffix("")))
def test_tracing_changes_no_count_and_each_fact_has_its_deciding_step(path):
    plain, untraced = run(path, False)
    sim, traced = run(path, True)
    assert traced == untraced, f"{path.name}: the trace changed a prediction"
    if not isinstance(traced[0], list):
        return
    for i, response in enumerate(traced[0]):
        facts = response.get("context_cache") or {}
        for key in TRACED_FACTS:
            if key not in facts or response["status"] != "ok":
                continue
            if key == "hybrid_restore" and sim.engine.kind == "vanilla":
                continue                 # a vanilla engine restores no state: nothing is decided
            step = deciding(sim.trace.steps_of(i, key))
            assert step is not None, f"{path.name}: request {i} {key} has no step"
            assert step.to == facts[key], f"{path.name}: request {i} {key}: step says {step.to}, oracle {facts[key]}"
            assert step.rule and step.why


def _traced(*texts, batch_size=None):
    from .test_simulator_api import ON, doc, engine
    sim = reference.Simulator(engine(), ON, trace=True)
    sim.run(doc(*texts, **({"batch_size": batch_size} if batch_size else {})), ".")
    return sim


def test_a_miss_names_why_the_page_is_not_in_the_index():
    """CR-ID-2: positions an earlier request held only in its partial last page; CR-ID-1: no page
    of that identity was ever published; each as the deciding step of matched_tokens."""
    sim = _traced("abcdef", "abcdefgh", "abcdxyzw")
    partial = deciding(sim.trace.steps_of(1, "matched_tokens"))
    assert (partial.rule, partial.to) == ("CR-ID-2", 4)
    assert "request 0 holds positions 4-5 of the same prefix only in its partial last page" in partial.why
    fresh = deciding(sim.trace.steps_of(2, "matched_tokens"))
    assert (fresh.rule, fresh.to) == ("CR-ID-1", 4) and "is that of no page an earlier request published" in fresh.why
    hit = deciding(sim.trace.steps_of(1, "plan"))
    assert hit.causes and hit.causes[0].value == "publications[0]" and hit.causes[0].owner == 0


def test_tracing_off_keeps_no_explanation_state():
    """The explanation state the cache keeps for the trace (reference/capacity.py) stays empty
    while not tracing: untraced runs pay for none of it."""
    from .test_simulator_api import doc, engine
    sim = reference.Simulator(engine(maxKVPoolPages=24), reference.RuntimeFlags(enable_context_reuse=True,
                                                                              max_records=1))
    sim.run(doc("abcdefgh", "abcdefgh", "abcdxyzw", "qrstuvwx", batch_size=1), ".")
    cache = sim.cache
    assert cache.evicted > 0 and cache.records
    assert not (cache.origin or cache.unindexed or cache.gone or cache.by_ids or cache.tails or cache.hits)
    assert all(r.step is None for r in cache.records.values())


def test_a_miss_on_a_page_its_own_batch_publishes_names_the_batch_and_the_rewind_names_its_plan():
    """CR-BATCH-2, decided by the batch (every sequence admitted before any publication); CR-PLAN-2,
    decided where planning gives the page back: each the deciding step of its value."""
    from .test_simulator_api import ON, doc, engine
    sim = reference.Simulator(engine(maxBatchSize=2), ON, trace=True)
    sim.run(doc("abcdefgh", "abcdefgh", "abcdefgh", batch_size=2), ".")
    mate = deciding(sim.trace.steps_of(1, "matched_tokens"))
    assert (mate.rule, mate.to) == ("CR-BATCH-2", 0) and "request 0 of the same batch publishes" in mate.why
    rewind = deciding(sim.trace.steps_of(2, "reused_tokens"))
    assert (rewind.rule, rewind.before, rewind.to) == ("CR-PLAN-2", 8, 4)
    assert "all 2 pages match: the last page is given back" in rewind.why


def test_without_reuse_the_lookup_step_names_cr_pol_6():
    from .test_simulator_api import doc, engine
    sim = reference.Simulator(engine(), reference.RuntimeFlags(), trace=True)
    sim.run(doc("abcdefgh"), ".")
    step = deciding(sim.trace.steps_of(0, "lookup_bypass"))
    assert (step.rule, step.to) == ("CR-POL-6", True) and "not enabled" in step.why
