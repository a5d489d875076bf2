"""Start-up refusals with context reuse (CR-SUP, CR-HYB-2), their order, and what runs without."""
import json
import shutil

import pytest

from tests.helpers.backend import run, runtime, texts
from gpu_backend import BackendInputError, DeploymentRejected, Runtime

MSG = {
    "CR-SUP-1": "Block Diffusion context reuse is outside the current context-reuse support boundary.",
    "CR-SUP-2": "(FP16 KV only).",
    "CR-SUP-3": "KV page pool",
    "CR-SUP-4": "uses vision-bidirectional attention, which is not managed by the context cache.",
    "CR-SUP-5": "Context reuse does not support MTP, DFlash, DSpark, or Gemma4 MTP deployments.",
    "CR-SUP-6": "Hybrid EAGLE context reuse is outside the current context-reuse support boundary.",
    "CR-SUP-7": "Context reuse cannot be enabled with action runners.",
    "CR-SUP-9": "Tensor-parallel context reuse is not supported yet; omit --enableContextReuse or run with --tpSize 1.",
}


def rejected(engine_dir, **kw):
    with pytest.raises(DeploymentRejected) as e:
        runtime(engine_dir, **kw)
    return e.value


@pytest.mark.parametrize("switches, rule", [
    (dict(blockDiffusion=True, kvCacheDtype="fp8", visionBidirectional=True, specDecode="mtp", actionRunner=True),
     "CR-SUP-1"),
    (dict(kvCacheDtype="fp8", visionBidirectional=True), "CR-SUP-2"),
    (dict(visionBidirectional=True, specDecode="dflash"), "CR-SUP-4"),
    (dict(specDecode="gemma4-mtp", actionRunner=True), "CR-SUP-5"),
    (dict(specDecode="dspark"), "CR-SUP-5"),
    (dict(specDecode="eagle", model="hybrid", actionRunner=True), "CR-SUP-6"),
    (dict(actionRunner=True), "CR-SUP-7"),
])
def test_support_matrix_order_and_messages(engine, switches, rule):
    e = rejected(engine(**switches), tp_size=2)
    assert (e.rule, MSG[rule] in e.message) == (rule, True)


def test_tensor_parallel_then_snapshot_pools(engine):
    e = rejected(engine(model="hybrid"), tp_size=2, recurrent_snapshot_bytes=0)
    assert e.message == MSG["CR-SUP-9"]
    e = rejected(engine(model="hybrid"), recurrent_snapshot_bytes=100)      # < one 5120-byte slot
    assert e.message == "Hybrid context reuse requires at least one recurrent snapshot slot"
    e = rejected(engine(model="recurrent"), recurrent_snapshot_bytes=0)
    assert e.message == "Hybrid context reuse requires at least one recurrent snapshot slot"
    e = rejected(engine(model="hybrid"), partial_kv_snapshot_bytes=511)     # < one 512-byte slot
    assert e.message == "Hybrid attention context reuse requires at least one partial-KV snapshot slot"
    runtime(engine(model="recurrent"), partial_kv_snapshot_bytes=0)         # no partial pool needed


def test_pool_geometry(engine, tmp_path):
    d = tmp_path / "e"
    shutil.copytree(engine(), d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["kv_pool_pages"] = 23                                               # minimum is 2 * 12
    (d / "config.json").write_text(json.dumps(cfg))
    assert rejected(d).rule == "CR-SUP-3"
    Runtime(d)                                                              # without reuse it runs


@pytest.mark.parametrize("switches", [
    dict(blockDiffusion=True), dict(kvCacheDtype="fp8"), dict(visionBidirectional=True), dict(specDecode="mtp"),
    dict(specDecode="eagle", model="hybrid"), dict(actionRunner=True)])
def test_rejected_switches_run_without_reuse(engine, switches):
    rt = runtime(engine(**switches), enable_context_reuse=False)
    res = run(rt, texts("abcdefgh", gen=2))
    assert res["failed_batches"] == 0 and res["responses"][0]["finish_reason"] != "error"


@pytest.mark.parametrize("switches, kw", [
    (dict(specDecode="eagle"), {}),                          # attention-only EAGLE is accepted (0.10)
    (dict(model="recurrent", kvCacheDtype="fp8"), {}),       # no attention layer keeps KV
    (dict(model="hybrid"), dict(tp_size=1)),
])
def test_accepted_deployments_run_with_reuse(engine, switches, kw):
    rt = runtime(engine(**switches), **kw)
    res = run(rt, texts("abcdefgh", "abcdefghij", gen=2))
    assert res["failed_batches"] == 0 and all(r["finish_reason"] != "error" for r in res["responses"])
    cc = rt.profile()["context_cache"]
    assert cc["admitted_sequences"] == 2 and cc["hit_sequences"] == 1    # reuse is on and works


def test_tensor_parallel_without_reuse_is_a_usage_error(engine):
    with pytest.raises(BackendInputError) as e:
        Runtime(engine(), tp_size=2)
    assert e.value.path == "--tpSize"
