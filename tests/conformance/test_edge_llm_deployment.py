"""A real Edge-LLM-style deployment, judged fairly: `kvconform describe` of an engine folder as
TensorRT Edge-LLM 0.10.0's builder writes it, then `kvconform run --backend command` of a
text-only `llm_inference` (output_text, no ids, no logprobs, no manifest) on it.

The folder is written by hand after what Edge-LLM writes (release commit 0ce6ce258b35):
`config.json` is the export's runtime config (tensorrt_edgellm/checkpoint/checkpoint_utils.py
build_runtime_llm_config_dict, here for Phi-3-mini-4k-instruct's sizes) with `builder_config`
added by `llm_build` (cpp/builder/llmBuilder.cpp copyConfig, llmBuilder.h toJson), beside the
model's tokenizer.json / tokenizer_config.json and processed_chat_template.json
(llmBuilder.cpp copyTokenizerFiles; the vendored Phi-3-mini files of spec/tokenizers/).

The stand-in behaves as the oracle on a description its author wrote by hand (below), so the
run is CONFORMANT exactly when `describe` derived the same facts and the kit judged the
text-only outputs fairly: every count that can be predicted without the generated ids is judged,
the rest is NOT_SUPPORTED with its reason. Kept to about ten cases and a few generated examples.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from conformance.cli import main as kvconform
from conformance.report.document import check_report
from tests.helpers import HELPERS

ROOT = Path(__file__).resolve().parents[2]
STAND_IN = HELPERS / "edge_llm_stand_in.py"
PHI3 = ROOT / "spec" / "tokenizers" / "phi-3-mini"

BUILDER = {"max_input_len": 1024, "spec_draft": False, "spec_base": False, "max_batch_size": 1, "max_lora_rank": 0,
           "max_kv_cache_capacity": 2048, "max_kv_pool_pages": 16}
EXPORT = {"model": "phi3", "spec_decode_type": "none", "engine_role": "llm", "edgellm_version": "0.10.0",
          "vocab_size": 32064, "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
          "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 96, "max_position_embeddings": 4096,
          "rope_theta": 10000.0, "rope_scaling": None, "partial_rotary_factor": 1.0, "num_deepstack_features": 0,
          "use_vision_bidirectional_attention": False, "rms_norm_eps": 1e-05, "ple_enabled": False,
          "num_ple_inputs": 0, "ple_hidden_size": 0, "kv_cache_dtype": "fp16"}
PROCESSED_TEMPLATE = {"model_path": "phi3", "roles": {
    "system": {"prefix": "<|system|>\n", "suffix": "<|end|>\n"}, "user": {"prefix": "<|user|>\n", "suffix": "<|end|>\n"},
    "assistant": {"prefix": "<|assistant|>\n", "suffix": "<|end|>\n"}},
    "generation_prompt": "<|assistant|>\n", "default_system_prompt": ""}

# What the stand-in's author knows of the engine, derived by hand from the folder (spec/engine.md
# section 4): the page size is Edge-LLM's constant 128; the pool is builder_config's resolved 16
# pages (1 * ceil(2048 / 128)); the tokenizer is the folder's own, 32011 ids (32000 + 11 added),
# <|endoftext|> = 32000 its end-of-sequence token.
BY_HAND = {"format": "kvconform-engine-v1", "model": "attention", "layer_kinds": ["attention"] * 32,
           "tokenizer": {"profile": "hf", "files": ".", "loader": "tokenizers-raw"}, "vocab_size": 32011,
           "eos_token_id": 32000, "image_token_id": None, "num_kv_heads": 32, "head_dim": 96,
           "tokens_per_page": 128, "max_input_len": 1024, "max_kv_cache_capacity": 2048, "max_batch_size": 1,
           "kv_pool_pages": 16, "kv_cache_dtype": "fp16", "recurrent": None, "vision": None, "audio": None,
           "lora_adapters": {}}

CASES = ["golden/pub-decode-end-p4", "golden/pub-decode-end-255", "sections/pub/multi-turn-including",
         "sections/pub/decode-end-boundaries", "sections/plan/exact-replays", "sections/plan/boundary-p4-k2-minus1",
         "llm_context_reuse"]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    root = tmp_path_factory.mktemp("edge-llm")
    engine = root / "phi3-engine"
    engine.mkdir()
    (engine / "config.json").write_text(json.dumps({**EXPORT, "builder_config": BUILDER}, indent=2))
    (engine / "llm.engine").write_bytes(b"")                      # the serialized TensorRT engine: never read
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(PHI3 / name, engine / name)
    (engine / "processed_chat_template.json").write_text(json.dumps(PROCESSED_TEMPLATE))
    (engine / "stand-in-engine.json").write_text(json.dumps(BY_HAND))
    return root, engine


def run(deployment, capsys, name: str, cases=None, family=True) -> tuple[int, str, dict]:
    root, engine = deployment
    if name in RUNS:
        return RUNS[name]
    described = root / "described.json"
    if not described.exists():
        assert kvconform(["describe", "--engine-dir", str(engine), "--output", str(described)]) == 0
    argv = ["run", "--backend", "command", "--executable", f"{sys.executable} {STAND_IN}", "--engine-dir", str(engine),
            "--engine-config", str(described), "--families", "text", "--examples", "3", "--min-batches", "2",
            "--budget-seconds", "30", "--no-progress", "--jobs", "2", "--report", str(root / name)]
    for case in (cases or CASES) + (["generated/text"] if family else []):
        argv += ["-k", case]
    code = kvconform(argv)
    out = capsys.readouterr().out
    doc = json.loads((root / name / "report.json").read_text())
    assert not check_report(doc), check_report(doc)
    RUNS[name] = code, out, doc
    return RUNS[name]


RUNS: dict = {}


def test_describe_then_run_a_text_only_llm_inference_is_conformant(deployment, capsys):
    code, out, doc = run(deployment, capsys, "report")
    assert code == 0 and "\nCONFORMANT" in out, out
    cases = {c["id"]: c for c in doc["cases"]}
    assert set(cases) == set(CASES) | {"generated/text"}
    assert {c["verdict"] for c in cases.values()} <= {"PASS", "NOT_SUPPORTED"}, \
        {k: (c["verdict"], c["reason"]) for k, c in cases.items()}
    for case_id, c in cases.items():
        if c["verdict"] == "NOT_SUPPORTED":
            assert c["reason"], case_id
            continue
        if case_id == "generated/text":
            continue
        judged = c["details"]["judged"]
        assert judged["outputs_compared_on"] == {"output_text": list(range(judged["requests"]))}, case_id
        assert judged["counts"] > 0, case_id
        for entry in judged.get("not_judged", []):
            assert entry["reason"] and entry["what"], case_id
    partly = [c for c in cases.values() if c["verdict"] == "PASS" and c["details"].get("judged", {}).get("not_judged")]
    whole = [c for c in cases.values() if c["verdict"] == "PASS" and "judged" in c["details"]
             and not c["details"]["judged"].get("not_judged")]
    assert partly and whole, "some cases judged in part, others in full"
    assert doc["summary"]["partly_judged"]["cases"] == len(partly)
    assert "judged in part" in out and "a selection" in out


def test_every_count_that_can_be_predicted_is_judged(deployment, capsys, monkeypatch):
    """The same deployment printing its ids judges every count; printing text only, each case
    judges exactly those counts again where its prediction is whole, and a part elsewhere."""
    _, _, text_only = run(deployment, capsys, "report")   # the first test's run, if it ran
    monkeypatch.setenv("KVCONFORM_STAND_IN_IDS", "1")
    judged = [c for c in text_only["cases"] if "judged" in c.get("details", {})]
    some = [c["id"] for c in judged if c["details"]["judged"].get("not_judged")][:2] + \
        [c["id"] for c in judged if not c["details"]["judged"].get("not_judged")][:1]
    code, _, with_ids = run(deployment, capsys, "with-ids", cases=some, family=False)
    assert code == 0
    ids = {c["id"]: c for c in with_ids["cases"]}
    assert sorted(ids) == sorted(some) and len(some) == 3
    for c in (c for c in text_only["cases"] if c["id"] in ids):
        judged = c.get("details", {}).get("judged")
        full = ids[c["id"]].get("details", {}).get("judged")
        if judged is None or full is None:
            continue
        assert not full.get("not_judged"), c["id"]
        if judged.get("not_judged"):
            assert judged["counts"] < full["counts"], c["id"]
        else:
            assert judged["counts"] == full["counts"], c["id"]
