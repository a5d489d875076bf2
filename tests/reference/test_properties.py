"""Invariants of the oracle on generated request sets (hypothesis).

Requests are built from small shared pools of text segments and images, so prefixes recur and
the cache is exercised. The bounds below come from the spec, computed by an independent model
of position identities (a byte, or an image and the offset in it), never from the oracle.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

import reference
from reference.tokenizer import EOS

MEDIA = Path(__file__).resolve().parents[2] / "cases" / "media"
SEGMENTS = ["ab", "cd", "abcd", "efgh", "xy", "z", "abcdefgh", "wxyz", "q"]
IMAGES = {"img_a_16x16.png": 1, "img_b_16x16.png": 1, "img_c_16x16.png": 1, "img_a_16x64.png": 4}
ADAPTERS = ["a", "b"]
FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def positions(items) -> list:
    """The identity of every input position (CR-ID-4, CR-MEDIA-1), from the items alone."""
    out = []
    for kind, value in items:
        if kind == "text":
            out += [("t", b) for b in value.encode()]
        else:
            out += [("m", value, k) for k in range(IMAGES[value])]
    return out


def lcp(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


item = st.one_of(st.sampled_from(SEGMENTS).map(lambda s: ("text", s)),
                 st.sampled_from(sorted(IMAGES)).map(lambda s: ("image", s)))


@st.composite
def scenarios(draw, media=True, adapters=True, generate=True, model="attention"):
    """(engine args, runtime, request file, generated, per-request metadata)."""
    P = draw(st.sampled_from([2, 3, 4, 8]))
    batch_size = draw(st.integers(1, 3))
    mgl = draw(st.integers(1, 3)) if generate else 1
    kinds = item if media else st.sampled_from(SEGMENTS).map(lambda s: ("text", s))
    count = draw(st.integers(1, 9))
    requests, meta, generated = [], [], []
    batch_adapter = None
    for i in range(count):
        if i % batch_size == 0:
            batch_adapter = draw(st.sampled_from([None, *ADAPTERS])) if adapters else None
        items = draw(st.lists(kinds, min_size=1, max_size=4))
        gen = draw(st.lists(st.sampled_from(list(b"ABC")), min_size=1, max_size=mgl))
        if len(gen) < mgl and draw(st.booleans()):
            gen[-1] = EOS
        request = {"messages": [{"role": "user", "content": [
            {"type": k, k: v} for k, v in items]}]}
        if batch_adapter:
            request["lora_name"] = batch_adapter
        requests.append(request)
        meta.append({"positions": positions(items), "adapter": batch_adapter, "batch": i // batch_size})
        generated.append(gen)
    capacity = 40 + mgl
    minimum = 3 * -(-capacity // P)
    engine = {"maxInputLen": 40, "maxKVCacheCapacity": capacity, "tokensPerPage": P, "maxBatchSize": 3,
              "maxKVPoolPages": 0 if model == "recurrent" else draw(st.sampled_from([minimum, minimum + 3, 4 * minimum])),
              "vision": True, "loraAdapters": ADAPTERS, "model": model}
    runtime = {"enableContextReuse": True, "contextCacheMaxRecords": draw(st.sampled_from([0, 1, 2, 1024])),
               "contextCacheRecurrentSnapshotPoolBytes": draw(st.sampled_from([10240, 10 ** 6])),
               "contextCachePartialKVSnapshotPoolBytes": draw(st.sampled_from([512 * P // 4, 10 ** 6]))}
    doc = {"apply_chat_template": False, "max_generate_length": mgl, "batch_size": batch_size,
           "available_lora_weights": {a: f"lora/{a}.safetensors" for a in ADAPTERS},
           "context_cache_commit_policy": draw(st.sampled_from(["including_generated_tokens", "prefill_state_only"])),
           "requests": requests}
    return engine, runtime, doc, generated, meta


def run(engine_args, runtime, doc, generated):
    sim = reference.Simulator(reference.engine_from_build_args(engine_args),
                              reference.RuntimeFlags.from_case_runtime(runtime))
    responses = sim.run(doc, str(MEDIA), generated)
    sim.check_invariants()
    return sim, responses


def histories(meta, generated, doc):
    """What each request can have published: its input, then its generated tokens but the last."""
    including = doc["context_cache_commit_policy"] == "including_generated_tokens"
    return [m["positions"] + ([("t", t) for t in g[:-1]] if including else []) for m, g in zip(meta, generated)]


@FAST
@given(scenarios())
def test_reuse_is_a_shared_prefix_page_aligned_and_shorter_than_the_input(s):
    """CR-PLAN-4 (0 <= reused < n, a multiple of P), CR-ID-1/3/4 (no request reuses more than
    it shares with an earlier batch's history under the same adapter), CR-BATCH-2 (nor from
    its own batch)."""
    engine, runtime, doc, generated, meta = s
    sim, responses = run(engine, runtime, doc, generated)
    P = engine["tokensPerPage"]
    hist = histories(meta, generated, doc)
    for i, r in enumerate(responses):
        facts = r["context_cache"]
        n = r["input_tokens"]
        assert n == len(meta[i]["positions"]), f"request {i}: n {n} != {len(meta[i]['positions'])}"
        assert 0 <= facts["reused_tokens"] < n, f"request {i}: reused {facts['reused_tokens']} of n={n}"
        assert facts["reused_tokens"] % P == 0, f"request {i}: vanilla reuse {facts['reused_tokens']} not a multiple of P={P}"
        shared = max([lcp(meta[i]["positions"], hist[j]) for j in range(i)
                      if meta[j]["batch"] < meta[i]["batch"] and meta[j]["adapter"] == meta[i]["adapter"]], default=0)
        assert facts["matched_tokens"] <= shared, (
            f"request {i} (adapter {meta[i]['adapter']}): matched {facts['matched_tokens']} but shares only "
            f"{shared} positions with earlier batches under its adapter")


@FAST
@given(scenarios(media=False, adapters=False, generate=False))
def test_without_eviction_vanilla_reuse_is_exactly_the_longest_shared_page_prefix(s):
    """CR-PLAN-1/2 completeness: with nothing evicted, text only, max_generate_length 1, a request
    reuses the longest run of pages it shares with an earlier batch, less the rewound page."""
    engine, runtime, doc, generated, meta = s
    runtime = {**runtime, "contextCacheMaxRecords": 1024}
    engine = {**engine, "maxKVPoolPages": 0}
    sim, responses = run(engine, runtime, doc, generated)
    if sim.profile()["context_cache"]["records"]["evicted"]:
        return
    P = engine["tokensPerPage"]
    for i, r in enumerate(responses):
        n = r["input_tokens"]
        shared = max([lcp(meta[i]["positions"], meta[j]["positions"]) for j in range(i)
                      if meta[j]["batch"] < meta[i]["batch"]], default=0)
        m = shared // P
        kind = "no_reusable_prefix" if m == 0 else ("full_input_rewind" if m * P == n else "standard")
        expected = (kind, m * P, (m - (kind == "full_input_rewind")) * P)
        facts = r["context_cache"]
        assert (facts["plan"], facts["matched_tokens"], facts["reused_tokens"]) == expected, (
            f"request {i} (n={n}, P={P}, shares {shared}): expected plan/matched/reused {expected}, got "
            f"{(facts['plan'], facts['matched_tokens'], facts['reused_tokens'])}")


@FAST
@given(scenarios(), st.data())
def test_bypass_neither_looks_up_nor_publishes(s, data):
    """CR-POL-2 / CR-PUB-7: under bypass nothing is matched or published; records stay 0."""
    engine, runtime, doc, generated, meta = s
    doc = {**doc, "context_cache_lookup_policy": "bypass"}
    sim, responses = run(engine, runtime, doc, generated)
    for i, r in enumerate(responses):
        facts = r["context_cache"]
        assert (facts["plan"], facts["matched_tokens"], facts["lookup_bypass"], facts["publications"]) == \
            ("no_reusable_prefix", 0, True, []), f"request {i} under bypass: {facts}"
    cc = sim.profile()["context_cache"]
    assert cc["publications"]["attempts"] == 0 and cc["records"]["current"] == 0, cc


@FAST
@given(scenarios(adapters=False, generate=False))
def test_different_adapters_never_share(s):
    """CR-ID-3: give every batch its own adapter: nothing is ever matched."""
    engine, runtime, doc, generated, meta = s
    names = [f"ad{b}" for b in range(len(doc["requests"]))]
    engine = {**engine, "loraAdapters": names}
    doc = {**doc, "available_lora_weights": {a: f"lora/{a}.safetensors" for a in names},
           "requests": [{**r, "lora_name": names[m["batch"]]} for r, m in zip(doc["requests"], meta)]}
    sim, responses = run(engine, runtime, doc, generated)
    assert sim.profile()["context_cache"]["hit_sequences"] == 0
    assert all(r["context_cache"]["matched_tokens"] == 0 for r in responses)


@FAST
@given(st.sampled_from([2, 3, 4, 8]), st.lists(st.sampled_from(SEGMENTS), min_size=0, max_size=3),
       st.lists(st.sampled_from(sorted(IMAGES)), min_size=2, max_size=3, unique=True),
       st.sampled_from(SEGMENTS), st.data())
def test_a_changed_or_swapped_image_never_reuses_past_the_first_affected_page(P, head, images, tail, data):
    """CR-ID-4: replacing an image with another, or swapping two, leaves at most the pages
    before the first affected placeholder reusable."""
    variant = list(images)
    if data.draw(st.booleans(), label="swap"):
        variant[0], variant[-1] = variant[-1], variant[0]
    else:
        k = data.draw(st.integers(0, len(images) - 1), label="replaced")
        variant[k] = data.draw(st.sampled_from(sorted(set(IMAGES) - set(images))), label="with")
    base = [("text", t) for t in head] + [("image", i) for i in images] + [("text", tail)]
    other = [("text", t) for t in head] + [("image", i) for i in variant] + [("text", tail)]
    doc = {"apply_chat_template": False, "max_generate_length": 1, "requests": [
        {"messages": [{"role": "user", "content": [{"type": k, k: v} for k, v in items]}]} for items in (base, other)]}
    engine = {"maxInputLen": 40, "maxKVCacheCapacity": 41, "maxKVPoolPages": 0, "tokensPerPage": P, "vision": True}
    _, responses = run(engine, {"enableContextReuse": True}, doc, None)
    first = lcp(positions(base), positions(other))
    reused = responses[1]["context_cache"]["reused_tokens"]
    assert reused <= first // P * P, (
        f"images {images} -> {variant}: first affected position {first}, P={P}, but reused {reused}")


@FAST
@given(scenarios(model="hybrid"))
def test_hybrid_reuses_exactly_an_earlier_endpoint_shorter_than_the_input(s):
    """CR-HYB-3/5: matched = reused = L < n, and L is an endpoint some earlier batch published
    (an input length, or input + generated - 1)."""
    engine, runtime, doc, generated, meta = s
    engine = {**engine, "numLayers": 2}
    sim, responses = run(engine, runtime, doc, generated)
    hist = histories(meta, generated, doc)
    for i, r in enumerate(responses):
        facts = r["context_cache"]
        L = facts["reused_tokens"]
        assert facts["matched_tokens"] == L < r["input_tokens"] and facts["plan"] != "full_input_rewind", facts
        if L:
            sources = [j for j in range(i) if meta[j]["batch"] < meta[i]["batch"] and meta[j]["adapter"] == meta[i]["adapter"]
                       and L in (len(meta[j]["positions"]), len(hist[j])) and lcp(meta[i]["positions"], hist[j]) >= L]
            assert sources, f"request {i} reused {L}: no earlier batch under its adapter has an endpoint of that length it shares"


@FAST
@given(st.one_of(scenarios(), scenarios(model="hybrid"), scenarios(model="recurrent", media=False)))
def test_counters_agree_with_per_request_predictions(s):
    """CR-MET-13: the profile counters are the sums of the per-request facts (no warmup)."""
    engine, runtime, doc, generated, meta = s
    sim, responses = run(engine, runtime, doc, generated)
    cc = sim.profile()["context_cache"]
    facts = [r["context_cache"] for r in responses if r["status"] == "ok"]
    pubs = [p for f in facts for p in f["publications"]]
    observed = {
        "admitted_sequences": len(facts), "hit_sequences": sum(f["matched_tokens"] > 0 for f in facts),
        "media_aware_sequences": sum(f["media_aware"] for f in facts),
        "lookup_bypass_sequences": sum(f["lookup_bypass"] for f in facts),
        "forced_cold_sequences": sum(f["forced_cold"] for f in facts),
        "matched_tokens": sum(f["matched_tokens"] for f in facts), "reused_tokens": sum(f["reused_tokens"] for f in facts),
        "plans": {k: sum(f["plan"] == k for f in facts) for k in ("standard", "no_reusable_prefix", "full_input_rewind")},
        "publications": {"attempts": len(pubs), "committed": sum(p["status"] == "committed" for p in pubs),
                         "existing": sum(p["status"] == "existing" for p in pubs), "successful_endpoints": len(pubs)},
        "hybrid": {"restores": sum(f["hybrid_restore"] for f in facts),
                   "snapshot_pressure_skips": sum(f["snapshot_pressure_skips"] for f in facts),
                   "capture_synchronizations": cc["hybrid"]["capture_synchronizations"]},
    }
    for key, value in observed.items():
        assert cc[key] == value, f"{key}: profile {cc[key]} != sum of per-request facts {value}"
    held = cc["resource_pools"]["base_kv_pages"]
    assert 0 <= held["free"] <= held["capacity"]


@FAST
@given(scenarios())
def test_simulation_is_deterministic(s):
    engine, runtime, doc, generated, meta = s
    flags = reference.RuntimeFlags.from_case_runtime({**runtime, "dumpProfile": True})
    e = reference.engine_from_build_args(engine)
    first = reference.simulate(e, flags, doc, str(MEDIA), generated)
    second = reference.simulate(e, flags, json.loads(json.dumps(doc)), str(MEDIA), generated)
    assert first == second


def test_simulation_does_not_depend_on_the_hash_seed(tmp_path):
    """CR-ID-6: no process-randomized hash decides anything: two processes with different
    PYTHONHASHSEED predict the same file identically."""
    script = (
        "import json, sys, reference\n"
        "e = reference.engine_from_build_args({'maxInputLen': 40, 'maxKVCacheCapacity': 41, 'maxKVPoolPages': 12,"
        " 'tokensPerPage': 4, 'vision': True})\n"
        "f = reference.RuntimeFlags(enable_context_reuse=True, max_records=3, dump_profile=True)\n"
        "reqs = [{'messages': [{'role': 'user', 'content': [{'type': 'text', 'text': t},"
        " {'type': 'image', 'image': 'img_a_16x16.png'}, {'type': 'text', 'text': 'xyz'}]}]}"
        " for t in ['abc', 'abcdefg', 'abc', 'qrs', 'abcdefg', 'abc', 'qrs']]\n"
        "doc = {'apply_chat_template': False, 'max_generate_length': 1, 'requests': reqs}\n"
        "print(json.dumps(reference.simulate(e, f, doc, sys.argv[1]), sort_keys=True))\n")
    outputs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", script, str(MEDIA)], env=env, capture_output=True, text=True, check=True)
        outputs.add(done.stdout)
    assert len(outputs) == 1
