"""Engine descriptions (spec/engine.md), runtime flags and the support matrix (CR-SUP)."""
import json

import pytest

import reference
from conformance.cases import schemas
from reference.hybrid import slot_sizes, snapshot_slots

BASE = {"maxInputLen": 24, "maxKVCacheCapacity": 32, "maxKVPoolPages": 0, "tokensPerPage": 4}


def build(**extra):
    return reference.engine_from_build_args({**BASE, **extra})


@pytest.mark.parametrize("model", ["attention", "recurrent", "hybrid"])
def test_built_descriptions_follow_the_engine_schema(model):
    config = build(model=model, vision=True, audio=True, loraAdapters=["a"]).to_config()
    assert schemas.schema_errors(config, "engine") == []


def test_defaults_and_derived_keys():
    c = build().to_config()
    assert (c["max_batch_size"], c["tokens_per_page"], c["layer_kinds"], c["num_kv_heads"], c["head_dim"],
            c["kv_cache_dtype"], c["vision"], c["recurrent"], c["lora_adapters"]) == \
        (1, 4, ["attention", "attention"], 2, 16, "fp16", None, None, {})
    assert reference.engine_from_build_args({**BASE, "tokensPerPage": 128}).tokens_per_page == 128
    assert build(model="hybrid", numLayers=4).layer_kinds == ["recurrent", "attention", "recurrent", "attention"]
    r = build(model="recurrent").to_config()["recurrent"]
    assert r == {"num_heads": 4, "head_dim": 16, "state_size": 16, "conv_kernel": 4, "conv_dim": 64, "state_dtype": "fp32"}
    assert build(loraAdapters=["a", "b"], loraRank=8).lora_adapters == {
        "a": {"rank": 8, "path": "lora/a.safetensors"}, "b": {"rank": 8, "path": "lora/b.safetensors"}}


def test_pool_zero_resolves_to_the_minimum():
    """The CR-CAP-1 example: max_batch_size 2, capacity 10, P=4 -> 6 pages."""
    e = reference.engine_from_build_args({"maxInputLen": 9, "maxKVCacheCapacity": 10, "maxKVPoolPages": 0,
                                          "maxBatchSize": 2, "tokensPerPage": 4})
    assert e.kv_pool_pages == 6
    assert build(model="recurrent").kv_pool_pages == 0


@pytest.mark.parametrize("args, path", [
    ({"maxKVPoolPages": 7}, "$._conformance.engine.maxKVPoolPages"),
    ({"maxKVPoolPages": 2 ** 30}, "$._conformance.engine.maxKVPoolPages"),
    ({"model": "recurrent", "maxKVPoolPages": 8}, "$._conformance.engine.maxKVPoolPages"),
    ({"maxInputLen": 32}, "$._conformance.engine.maxInputLen"),
    ({"numKVHeads": 3}, "$._conformance.engine.numKVHeads"),
    ({"model": "hybrid", "numLayers": 1}, "$._conformance.engine.numLayers"),
    ({"tokensPerPage": 0}, "$._conformance.engine.tokensPerPage"),
    ({"kvCacheDtype": "int4"}, "$._conformance.engine.kvCacheDtype"),
    ({"colour": "red"}, "$._conformance.engine.colour"),
])
def test_build_errors(args, path):
    with pytest.raises(reference.InputError) as e:
        build(**args)
    assert e.value.path == path


def test_missing_required_build_argument():
    with pytest.raises(reference.InputError, match="maxKVPoolPages"):
        reference.engine_from_build_args({"maxInputLen": 4, "maxKVCacheCapacity": 8})


def test_load_engine_reads_a_directory_or_a_file(tmp_path):
    config = build().to_config()
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert reference.load_engine(str(tmp_path)).kv_pool_pages == 8
    assert reference.load_engine(str(tmp_path / "config.json")).tokens_per_page == 4
    with pytest.raises(reference.InputError, match="no engine description"):
        reference.load_engine(str(tmp_path / "missing"))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(reference.InputError, match="cannot read"):
        reference.load_engine(str(tmp_path / "bad.json"))
    (tmp_path / "odd.json").write_text(json.dumps({**config, "layer_kinds": ["mamba"]}))
    with pytest.raises(reference.InputError) as e:
        reference.load_engine(str(tmp_path / "odd.json"))
    assert e.value.path == "$.layer_kinds"


def test_snapshot_slot_sizes():
    """The CR-HYB-1 example: one recurrent layer 4x16x16 fp32 + conv 64x4 -> 5120 bytes;
    one attention layer, 2 KV heads x 16, P=4 -> 512 bytes; a 1 MiB budget gives 204 slots."""
    hybrid = build(model="hybrid")
    assert slot_sizes(hybrid) == (5120, 512)
    flags = reference.RuntimeFlags(enable_context_reuse=True, recurrent_snapshot_bytes=2 ** 20,
                                   partial_kv_snapshot_bytes=1000)
    assert snapshot_slots(hybrid, flags) == (204, 1)
    assert snapshot_slots(build(model="recurrent"), flags) == (102, 0)
    assert snapshot_slots(build(), flags) == (0, 0)
    stated = reference.engine_from_config({**hybrid.to_config(), "snapshot_slot_bytes": {"recurrent": 1000, "partial_kv": 10}})
    assert snapshot_slots(stated, flags) == (1048, 100)


def test_runtime_flags_from_a_case():
    f = reference.RuntimeFlags.from_case_runtime({"enableContextReuse": True, "contextCacheMaxRecords": 2, "warmup": 1,
                                                  "batchSize": 2, "outputHiddenStates": True, "poisonFreshPages": True})
    assert (f.enable_context_reuse, f.max_records, f.warmup, f.batch_size, f.output_hidden_states) == (True, 2, 1, 2, True)
    with pytest.raises(reference.InputError, match="unknown runtime flag"):
        reference.RuntimeFlags.from_case_runtime({"turbo": True})
    with pytest.raises(reference.InputError) as e:
        reference.RuntimeFlags.from_case_runtime({"batchSize": 0})
    assert e.value.path == "$._conformance.runtime.batchSize"


def rejection(engine, **flags):
    r = reference.validate_deployment(engine, reference.RuntimeFlags(enable_context_reuse=True, **flags))
    return r.rule if r else None


def test_support_matrix():
    assert rejection(build()) is None
    assert rejection(build(blockDiffusion=True)) == "CR-SUP-1"
    assert rejection(build(kvCacheDtype="fp8")) == "CR-SUP-2"
    assert rejection(build(visionBidirectional=True)) == "CR-SUP-4"
    for method in ("mtp", "dflash", "dspark", "gemma4-mtp"):
        assert rejection(build(specDecode=method)) == "CR-SUP-5"
    assert rejection(build(specDecode="eagle")) is None, "attention-only EAGLE is accepted"
    assert rejection(build(model="hybrid", specDecode="eagle"), recurrent_snapshot_bytes=10 ** 6,
                     partial_kv_snapshot_bytes=10 ** 6) == "CR-SUP-6"
    assert rejection(build(actionRunner=True)) == "CR-SUP-7"
    assert rejection(build(), tp_size=2) == "CR-SUP-9"
    assert rejection(build(model="hybrid")) == "CR-HYB-2"
    assert rejection(build(model="hybrid"), recurrent_snapshot_bytes=5120) == "CR-HYB-2"
    assert rejection(build(model="hybrid"), recurrent_snapshot_bytes=5120, partial_kv_snapshot_bytes=512) is None
    assert rejection(build(model="recurrent", kvCacheDtype="fp8"), recurrent_snapshot_bytes=10240) is None
    assert rejection(build(blockDiffusion=True, kvCacheDtype="fp8", actionRunner=True), tp_size=4) == "CR-SUP-1"
    off = reference.validate_deployment(build(kvCacheDtype="fp8", blockDiffusion=True), reference.RuntimeFlags())
    assert off is None, "without context reuse nothing is refused"


def test_pool_geometry_of_hand_written_descriptions():
    """CR-SUP-3 can only be reached by a description the build would refuse."""
    config = build().to_config()
    for pages, rule in ((7, "CR-SUP-3"), (8, None), (2 ** 30 - 1, None)):
        assert rejection(reference.engine_from_config({**config, "kv_pool_pages": pages})) == rule, pages
    recurrent = build(model="recurrent").to_config()
    assert rejection(reference.engine_from_config({**recurrent, "kv_pool_pages": 4}),
                     recurrent_snapshot_bytes=10 ** 6) == "CR-SUP-3"


def test_rejection_messages_name_the_reason():
    messages = {rule: reference.validate_deployment(engine, reference.RuntimeFlags(enable_context_reuse=True, **f)).message
                for rule, engine, f in (("1", build(blockDiffusion=True), {}), ("2", build(kvCacheDtype="fp8"), {}),
                                        ("9", build(), {"tp_size": 2}))}
    assert "Block Diffusion context reuse" in messages["1"]
    assert "(FP16 KV only)" in messages["2"]
    assert messages["9"].startswith("Tensor-parallel context reuse is not supported yet")
