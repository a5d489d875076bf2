"""`kvconform describe`: engine descriptions of real engine folders.

The Edge-LLM folders below are written by hand after what TensorRT Edge-LLM 0.10.0 writes and
reads (release commit 0ce6ce258b35): `llm_build` copies the export's runtime config
(tensorrt_edgellm/checkpoint/checkpoint_utils.py, build_runtime_llm_config_dict) to
`config.json` and adds `builder_config` (cpp/builder/llmBuilder.cpp copyConfig,
cpp/builder/llmBuilder.h LLMBuilderConfig::toJson); the runtime reads it in
cpp/runtime/config/llmEngineConfig.cpp. Encoders live in the multimodal folder as
visual/visual.engine, audio/audio_encoder.engine and action/action.engine, each beside a
config.json (cpp/builder/builderUtils.cpp saveConfigWithBuilderInfo).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import reference
from conformance.cases import schemas
from conformance.cli import main
from reference.hybrid import slot_sizes

ROOT = Path(__file__).resolve().parents[2]


def kv(capsys, *argv):
    """Run the CLI in-process: (exit code, stdout, stderr lines)."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, [line for line in err.splitlines() if line]


def described(capsys, *argv):
    """A description that the schema and the oracle accept, with its stderr lines."""
    code, out, err = kv(capsys, "describe", *argv)
    assert code == 0, err
    doc = json.loads(out)
    assert schemas.schema_errors(doc, "engine") == []
    return doc, reference.engine_from_config(doc), err


def write_json(path: Path, doc) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2))
    return path


def builder_config(**over):
    """llmBuilder.h LLMBuilderConfig::toJson as 0.10 writes it (max_kv_pool_pages resolved)."""
    return {"max_input_len": 1024, "spec_draft": False, "spec_base": False, "max_batch_size": 2,
            "max_lora_rank": 0, "max_kv_cache_capacity": 4096, "max_kv_pool_pages": 96,
            "ragged_backend": "entry_padded_compatibility", "tp_size": 1, **over}


def qwen3_config(**over):
    """A Qwen3-0.6B export's runtime config (checkpoint_utils.py build_runtime_llm_config_dict)."""
    return {"model": "qwen3", "spec_decode_type": "none", "engine_role": "llm", "edgellm_version": "0.10.0",
            "vocab_size": 151936, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
            "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
            "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rope_scaling": None,
            "partial_rotary_factor": 1.0, "num_deepstack_features": 0,
            "use_vision_bidirectional_attention": False, "rms_norm_eps": 1e-06, "ple_enabled": False,
            "num_ple_inputs": 0, "ple_hidden_size": 0, "kv_cache_dtype": "fp16", "eos_token_id": [151645],
            "builder_config": builder_config(), **over}


def hybrid_config():
    """A Nemotron-H-like Mamba hybrid: the canonical layer_types/kv_layer_configs table and the
    recurrent-state keys (checkpoint_utils.py: the `config.is_hybrid and mc` block)."""
    return qwen3_config(model="nemotron_h", num_hidden_layers=4, num_key_value_heads=2, head_dim=64,
                        layer_types=["mamba", "attention", "mamba", "mamba"],
                        kv_layer_configs=[None, {"num_kv_heads": 2, "head_dim": 64}, None, None],
                        num_linear_attn_layers=3, num_attention_layers=1, recurrent_state_num_heads=8,
                        recurrent_state_head_dim=32, recurrent_state_size=16, recurrent_state_num_groups=1,
                        recurrent_spec_verify_mode="replay", conv_dim=512, conv_kernel=4, use_rope=False,
                        recurrent_state_dtype="fp32", conv_state_dtype="fp16")


TINY_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>")
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def tiny_tokenizer(folder: Path) -> None:
    """A byte-level tokenizer of 256 bytes and Qwen's special tokens (no merges), written as
    tokenizer.json / tokenizer_config.json the way `llm_build` leaves them in the engine folder
    (cpp/builder/llmBuilder.cpp copyTokenizerFiles)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    vocab = {c: i for i, c in enumerate(pre_tokenizers.ByteLevel.alphabet())}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True) for t in TINY_SPECIALS])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    write_json(folder / "tokenizer_config.json", {"eos_token": "<|im_end|>", "chat_template": CHATML,
                                                  "tokenizer_class": "Qwen2Tokenizer"})
    write_json(folder / "processed_chat_template.json", {"roles": {}})


def engine_folder(tmp_path: Path, config: dict, name="config.json", tokenizer=True) -> Path:
    folder = tmp_path / "engine"
    write_json(folder / name, config)
    (folder / "llm.engine").write_bytes(b"")          # the serialized engine: never read
    if tokenizer:
        tiny_tokenizer(folder)
    return folder


def one_error(err, *words):
    assert len(err) == 1, err
    assert err[0].startswith("kvconform: error: "), err[0]
    for word in words:
        assert word in err[0], f"{word!r} not in {err[0]!r}"
    return err[0]


# -- Edge-LLM folders ------------------------------------------------------------------------------

def test_text_engine_exact_values(capsys, tmp_path):
    folder = engine_folder(tmp_path, qwen3_config())
    doc, engine, err = described(capsys, "--engine-dir", folder)
    assert (engine.tokens_per_page, engine.max_input_len, engine.max_kv_cache_capacity, engine.max_batch_size,
            engine.kv_pool_pages, engine.kv_cache_dtype) == (128, 1024, 4096, 2, 96, "fp16")
    assert engine.layer_kinds == ["attention"] * 28 and doc["model"] == "attention"
    assert (engine.num_kv_heads, engine.head_dim, engine.recurrent) == (8, 128, None)
    assert (engine.vision, engine.audio, engine.lora_adapters, engine.snapshot_slot_bytes) == (None, None, {}, None)
    assert engine.deployment == {"spec_decode": None, "action_runner": False, "block_diffusion": False,
                                 "vision_bidirectional": False}
    assert any("tokens_per_page = 128" in line and "kTOKENS_PER_PAGE" in line for line in err)
    assert doc["described_from"]["files"] == [str(folder / "config.json")]


def test_hybrid_engine_layers_and_snapshot_slots(capsys, tmp_path):
    doc, engine, err = described(capsys, "--engine-dir", engine_folder(tmp_path, hybrid_config()))
    assert engine.layer_kinds == ["recurrent", "attention", "recurrent", "recurrent"] and engine.kind == "hybrid"
    assert engine.kv_pool_pages == 96
    assert engine.recurrent == {"num_heads": 8, "head_dim": 32, "state_size": 16, "conv_dim": 512,
                                "conv_kernel": 4, "state_dtype": "fp32"}
    # hybridSnapshotStorage.cpp: per recurrent layer heads*dim*size*4 (fp32) + conv_dim*kernel*2 (fp16)
    recurrent = 3 * (8 * 32 * 16 * 4 + 512 * 4 * 2)
    partial = 2 * 64 * 2 * 128 * 2
    assert engine.snapshot_slot_bytes == {"recurrent": recurrent, "partial_kv": partial}
    assert slot_sizes(engine) == (recurrent, partial)
    assert any("conv_state_dtype is fp16" in line for line in err)


def test_hybrid_without_layer_table_uses_the_runtime_fallback(capsys, tmp_path):
    config = hybrid_config()
    del config["layer_types"], config["kv_layer_configs"]
    _, engine, err = described(capsys, "--engine-dir", engine_folder(tmp_path, config))
    assert engine.layer_kinds == ["attention", "recurrent", "recurrent", "recurrent"]
    assert any("attention-first fallback" in line for line in err)


def test_pure_recurrent_has_no_pool(capsys, tmp_path):
    config = hybrid_config()
    config.update(layer_types=["mamba"] * 4, kv_layer_configs=[None] * 4, num_linear_attn_layers=4,
                  num_attention_layers=0)
    _, engine, err = described(capsys, "--engine-dir", engine_folder(tmp_path, config))
    assert engine.kind == "recurrent" and engine.kv_pool_pages == 0
    assert engine.snapshot_slot_bytes == {"recurrent": 4 * (8 * 32 * 16 * 4 + 512 * 4 * 2)}
    assert any(line.startswith("kvconform: note: describe: kv_pool_pages = 0") for line in err)


def test_recorded_build_flag_zero_is_resolved_and_said(capsys, tmp_path):
    folder = engine_folder(tmp_path, qwen3_config(builder_config=builder_config(max_kv_pool_pages=0)))
    doc, engine, err = described(capsys, "--engine-dir", folder)
    assert engine.kv_pool_pages == 2 * 32
    assert any("kv_pool_pages = 64: derived" in line for line in err)
    assert any("kv_pool_pages = 64: derived" in note for note in doc["described_from"]["notes"])


def test_vlm_with_multimodal_folder(capsys, tmp_path):
    llm = qwen3_config(model="qwen2_5_vl", image_token_id=151655, use_vision_bidirectional_attention=True)
    mm = visual_folder(tmp_path)
    doc, engine, err = described(capsys, "--engine-dir", engine_folder(tmp_path, llm),
                                 "--multimodal-engine-dir", mm)
    # qwenViTRunner.cpp validateAndFillConfig: bounds from builder_config (the per-image maximum),
    # patch and merge from preprocessor_config.json
    assert engine.vision == {"counter": "edge-llm/qwen-vl", "edge_llm_model_type": "qwen2_5_vl",
                             "settings": {"patch": 14, "merge": 2, "min_image_tokens": 4, "max_image_tokens": 512}}
    assert engine.image_token_id == TINY_SPECIALS.index("<|image_pad|>") + 256
    assert any("vision.counter = edge-llm/qwen-vl" in line for line in err)
    assert engine.audio is None
    assert engine.deployment["vision_bidirectional"] is True and engine.deployment["action_runner"] is False
    assert str(mm / "visual" / "config.json") in doc["described_from"]["files"]


def visual_folder(tmp_path: Path, model_type="qwen2_5_vl", preprocessor=True) -> Path:
    mm = tmp_path / "multimodal"
    write_json(mm / "visual" / "config.json", {        # visual_build: <engineDir>/visual, config + builder_config
        "model_type": model_type, "vision_config": {"model_type": model_type, "patch_size": 14},
        "builder_config": {"min_image_tokens": 4, "max_image_tokens": 1024, "max_image_tokens_per_image": 512,
                           "max_cu_seqlen_groups": 2, "use_trt_native_vit_attn": False}})
    if preprocessor:
        write_json(mm / "visual" / "preprocessor_config.json", {"patch_size": 14, "merge_size": 2,
                                                                "temporal_patch_size": 2})
    (mm / "visual" / "visual.engine").write_bytes(b"")
    return mm


def test_audio_encoder_and_action_runner(capsys, tmp_path):
    mm = tmp_path / "multimodal"
    write_json(mm / "audio" / "config.json", {"model_type": "qwen3_omni_audio_encoder", "audio_config": {},
                                              "builder_config": {"min_time_steps": 100, "max_time_steps": 3000}})
    (mm / "audio" / "audio_encoder.engine").write_bytes(b"")
    (mm / "action").mkdir()
    (mm / "action" / "action.engine").write_bytes(b"")
    _, engine, err = described(capsys, "--engine-dir", engine_folder(tmp_path, qwen3_config()),
                               "--multimodal-engine-dir", mm)
    assert engine.vision is None
    assert engine.audio is None, "audio input is defined for bytes-v1 only: said, not described"
    assert any(line.startswith("kvconform: note: describe: audio: null") for line in err)
    assert engine.deployment["action_runner"] is True


@pytest.mark.parametrize("spec, role, name, key, expected", [
    ("eagle3", "base", "base_config.json", "spec_decode", "eagle"),
    ("mtp", "base", "base_config.json", "spec_decode", "mtp"),
    ("gemma4_mtp", "base", "base_config.json", "spec_decode", "gemma4-mtp"),
    ("dspark", "base", "base_config.json", "spec_decode", "dspark"),
    ("none", "dllm", "config.json", "block_diffusion", True),
])
def test_deployment_switches(capsys, tmp_path, spec, role, name, key, expected):
    folder = engine_folder(tmp_path, qwen3_config(spec_decode_type=spec, engine_role=role), name)
    _, engine, err = described(capsys, "--engine-dir", folder)
    assert engine.deployment[key] == expected
    if name == "base_config.json":
        assert any("speculative deployment" in line for line in err)


def test_lora_rank_is_noted_not_invented(capsys, tmp_path):
    folder = engine_folder(tmp_path, qwen3_config(builder_config=builder_config(max_lora_rank=64)))
    _, engine, err = described(capsys, "--engine-dir", folder)
    assert engine.lora_adapters == {}
    assert any("rank <= 64" in line for line in err)


# -- missing and unusable facts --------------------------------------------------------------------

def pre_pool_folder(tmp_path):
    """A folder built by llm_build 0.9.1, whose builder_config has no max_kv_pool_pages."""
    bc = builder_config()
    del bc["max_kv_pool_pages"]
    return engine_folder(tmp_path, qwen3_config(edgellm_version="0.9.1", builder_config=bc))


def test_missing_fact_is_one_line_and_exit_2(capsys, tmp_path):
    folder = pre_pool_folder(tmp_path)
    code, out, err = kv(capsys, "describe", "--engine-dir", folder)
    assert code == 2 and out == ""
    one_error(err, "missing kv_pool_pages", str(folder / "config.json"), "builder_config.max_kv_pool_pages",
              "--allow-defaults")


def test_allow_defaults_writes_the_default_and_says_so(capsys, tmp_path):
    doc, engine, err = described(capsys, "--engine-dir", pre_pool_folder(tmp_path), "--allow-defaults")
    assert engine.kv_pool_pages == 2 * 32
    warnings = [line for line in err if line.startswith("kvconform: warning: ")]
    assert len(warnings) == 1 and "missing kv_pool_pages" in warnings[0] and "64" in warnings[0]
    assert any("written by Edge-LLM 0.9.1" in line for line in err)


def test_each_missing_fact_gets_its_line(capsys, tmp_path):
    config = qwen3_config(builder_config={"max_kv_pool_pages": 96})
    del config["kv_cache_dtype"]
    code, _, err = kv(capsys, "describe", "--engine-dir", engine_folder(tmp_path, config))
    assert code == 2
    facts = ("max_input_len", "max_kv_cache_capacity", "max_batch_size", "kv_cache_dtype")
    assert sorted(err) == sorted(line for line in err if any(f"missing {f}:" in line for f in facts))
    assert len(err) == 4


def test_fact_without_default_fails_even_with_allow_defaults(capsys, tmp_path):
    config = qwen3_config()
    del config["num_key_value_heads"]
    code, _, err = kv(capsys, "describe", "--engine-dir", engine_folder(tmp_path, config), "--allow-defaults")
    assert code == 2
    one_error(err, "missing num_kv_heads", "num_key_value_heads", "no documented default")


def test_unrepresentable_kv_dtype(capsys, tmp_path):
    code, _, err = kv(capsys, "describe", "--engine-dir", engine_folder(tmp_path, qwen3_config(kv_cache_dtype="bf16")))
    assert code == 2
    one_error(err, "kv_cache_dtype", '"bf16"', "fp16, fp8")


@pytest.mark.parametrize("content", [None, {"foo": 1}, []])
def test_unknown_or_empty_folder(capsys, tmp_path, content):
    folder = tmp_path / "engine"
    folder.mkdir()
    if content is not None:
        write_json(folder / "config.json", content)
    code, out, err = kv(capsys, "describe", "--engine-dir", folder)
    assert code == 2 and out == ""
    one_error(err, str(folder))


def test_multimodal_folder_without_encoders(capsys, tmp_path):
    (tmp_path / "mm").mkdir()
    code, _, err = kv(capsys, "describe", "--engine-dir", engine_folder(tmp_path, qwen3_config()),
                      "--multimodal-engine-dir", tmp_path / "mm")
    assert code == 2
    one_error(err, "visual/visual.engine", "audio/audio_encoder.engine")


# -- output ----------------------------------------------------------------------------------------

def test_output_file_never_replaced_without_force(capsys, tmp_path):
    folder = engine_folder(tmp_path, qwen3_config())
    target = tmp_path / "described.json"
    target.write_text("keep me")
    code, out, err = kv(capsys, "describe", "--engine-dir", folder, "--output", target)
    assert code == 2 and out == ""
    one_error(err, "--output", str(target), "--force")
    assert target.read_text() == "keep me"
    code, _, err = kv(capsys, "describe", "--engine-dir", folder, "--output", target, "--force")
    assert code == 0, err
    assert reference.load_engine(str(target)).kv_pool_pages == 96


def test_output_never_replaces_its_input(capsys, tmp_path):
    folder = engine_folder(tmp_path, qwen3_config())
    before = (folder / "config.json").read_text()
    code, _, err = kv(capsys, "describe", "--engine-dir", folder, "--output", folder / "config.json", "--force")
    assert code == 2
    one_error(err, "--output", "input")
    assert (folder / "config.json").read_text() == before


# -- our own format --------------------------------------------------------------------------------

def test_bundled_backend_folder_is_read_as_it_is(capsys, tmp_path):
    folder = tmp_path / "bundled"
    built = subprocess.run([sys.executable, "-m", "gpu_backend", "build", "--engineDir", str(folder),
                            "--maxInputLen", "40", "--maxKVCacheCapacity", "48", "--maxKVPoolPages", "0",
                            "--model", "hybrid", "--vision", "--loraAdapters", "a"],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    code, out, err = kv(capsys, "describe", "--engine-dir", folder, "--output", tmp_path / "d.json")
    assert code == 0 and out == "", err
    doc = json.loads((tmp_path / "d.json").read_text())
    assert doc == json.loads((folder / "config.json").read_text())
    assert schemas.schema_errors(doc, "engine") == []
    engine = reference.engine_from_config(doc)
    assert engine.kind == "hybrid" and engine.vision == {"patch_size": 16} and "a" in engine.lora_adapters
    assert err == [f"kvconform: note: describe: {folder / 'config.json'} is already a kvconform-engine-v1 "
                   "description; written unchanged"]


def test_a_relative_tokenizer_folder_is_written_absolute(capsys, tmp_path, monkeypatch):
    """The documented `--engine-config my-engine.json` recipe on a bundled-built hf engine: its
    config.json names the tokenizer folder beside it (`"files": "tokenizer"`); the copy written
    elsewhere must still name that folder, so describe writes it absolute."""
    monkeypatch.chdir(tmp_path)
    built = subprocess.run([sys.executable, "-m", "gpu_backend", "build", "--engineDir", "eng",
                            "--maxInputLen", "40", "--maxKVCacheCapacity", "48", "--maxKVPoolPages", "0",
                            "--tokenizer", str(ROOT / "spec" / "tokenizers" / "phi-3-vision")],
                           cwd=tmp_path, capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert built.returncode == 0, built.stderr
    assert json.loads((tmp_path / "eng" / "config.json").read_text())["tokenizer"]["files"] == "tokenizer"
    (tmp_path / "out").mkdir()
    code, out, err = kv(capsys, "describe", "--engine-dir", "eng", "--output", "out/my-engine.json")
    assert code == 0, err
    doc = json.loads((tmp_path / "out" / "my-engine.json").read_text())
    assert doc["tokenizer"]["files"] == str((tmp_path / "eng" / "tokenizer").resolve())
    assert any("made absolute" in line for line in err)
    code, out, err = kv(capsys, "validate", "out/my-engine.json")
    assert code == 0, err
    assert reference.load_engine("out/my-engine.json").vocab_size == 32045


# -- the folder's own tokenizer --------------------------------------------------------------------

def test_the_folders_tokenizer_is_described_as_an_hf_profile(capsys, tmp_path):
    """llm_build copies tokenizer.json and tokenizer_config.json into the engine folder, and the
    runtime tokenizes with them: the description names that folder, not bytes-v1."""
    folder = engine_folder(tmp_path, qwen3_config())
    doc, engine, err = described(capsys, "--engine-dir", folder)
    assert doc["tokenizer"] == {"profile": "hf", "files": str(folder), "loader": "tokenizers-raw"}
    assert engine.hf and engine.vocab_size == 256 + len(TINY_SPECIALS)
    assert engine.eos_token_id == 256 + TINY_SPECIALS.index("<|im_end|>")
    notes = [line for line in err if "note: describe: " in line]
    assert any("tokenizer: the folder's own" in line and "TOK-HF-2" in line for line in notes)
    assert any("vocab_size = 262" in line and "151936" in line for line in notes)
    assert any("chat template:" in line and "processed_chat_template.json" in line for line in notes)
    # the description runs: the oracle tokenizes a chat request with the folder's files
    parsed = reference.requests.parse_request_file(
        {"requests": [{"messages": [{"role": "user", "content": "hi"}]}]}, ".", engine, 1)
    # <|im_start|> "user\nhi" <|im_end|> "\n" <|im_start|> "assistant\n": 3 special tokens and 18 bytes
    assert len(parsed.requests[0].tokens) == 3 + 18


def test_phi3_tokenizer_notes_every_way_edge_llms_reader_may_differ(capsys, tmp_path):
    folder = engine_folder(tmp_path, qwen3_config(), tokenizer=False)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((ROOT / "spec" / "tokenizers" / "phi-3-mini" / name).read_bytes())
    doc, engine, err = described(capsys, "--engine-dir", folder)
    assert engine.vocab_size == 32011 and engine.eos_token_id == 32000
    assert any("normalizer steps Prepend" in line for line in err)
    assert any("strip flags" in line and "<|assistant|>" in line for line in err)
    assert any("processed_chat_template.json is missing" in line for line in err)


def test_a_folder_without_its_tokenizer_is_refused(capsys, tmp_path):
    code, out, err = kv(capsys, "describe", "--engine-dir", engine_folder(tmp_path, qwen3_config(), tokenizer=False))
    assert code == 2 and out == ""
    one_error(err, "missing tokenizer", "tokenizer.json", "tokenizer.cpp")


def test_a_broken_tokenizer_is_one_line(capsys, tmp_path):
    folder = engine_folder(tmp_path, qwen3_config())
    (folder / "tokenizer.json").write_text('{"model": 3}')
    code, out, err = kv(capsys, "describe", "--engine-dir", folder)
    assert code == 2 and out == ""
    one_error(err, "cannot read the tokenizer", str(folder / "tokenizer.json"))


def test_a_visual_engine_without_a_counter_is_refused(capsys, tmp_path):
    llm = qwen3_config(image_token_id=151655)
    code, _, err = kv(capsys, "describe", "--engine-dir", engine_folder(tmp_path, llm), "--multimodal-engine-dir",
                      visual_folder(tmp_path, model_type="phi4mm"))
    assert code == 2
    one_error(err, "vision.counter", "phi4mm", "without --multimodal-engine-dir")
    code, _, err = kv(capsys, "describe", "--engine-dir", tmp_path / "engine", "--multimodal-engine-dir",
                      visual_folder(tmp_path / "b", preprocessor=False))
    assert code == 2
    one_error(err, "preprocessor_config.json", "qwenViTRunner.cpp")


@pytest.mark.parametrize("over, words", [
    ({"layer_types": ["full_attention"] * 3}, ("layer_types", "3 entries for num_hidden_layers 28")),
    ({"num_key_value_heads": 64, "num_attention_heads": 32}, ("num_key_value_heads", "64 does not divide", "32")),
])
def test_a_contradictory_config_is_refused(capsys, tmp_path, over, words):
    code, out, err = kv(capsys, "describe", "--engine-dir", engine_folder(tmp_path, qwen3_config(**over)))
    assert code == 2 and out == ""
    one_error(err, *words)
