"""The tokenizer and image counter of an Edge-LLM engine folder, as `hf` profile facts.

What TensorRT Edge-LLM 0.10.0 does (release commit 0ce6ce258b35, file:line in that tree):

- `llm_build` copies `tokenizer_config.json`, `tokenizer.json` and `processed_chat_template.json`
  from the export folder into the engine folder (cpp/builder/llmBuilder.cpp:1700-1735,
  `copyTokenizerFiles`); the export copies them from the model (tensorrt_edgellm/checkpoint/
  checkpoint_utils.py:45-52, `RUNTIME_TOKENIZER_FILENAMES`) and writes
  `processed_chat_template.json` from the model's Jinja template (tensorrt_edgellm/chat_template.py,
  `process_chat_template`).
- The runtime loads the tokenizer from the engine folder (cpp/runtime/llmInferenceRuntime.cpp:452-455,
  `Tokenizer::loadFromHF(engineDir)`); without tokenizer.json it refuses to start
  (cpp/tokenizer/tokenizer.cpp:109-113). Its reader is its own (tokenizer.cpp:171-260): the
  normalizer's `Replace` steps only, the pre-tokenizer's `Split` regexes and byte-level mapping,
  added tokens matched literally. The end-of-sequence id is tokenizer_config.json's `eos_token`
  (tokenizer.cpp:467-468); a list `eos_token_id` in config.json adds more (llmInferenceRuntime.cpp:457-463,
  llmEngineConfig.cpp:730-736).
- A Qwen-VL visual engine reads its model type and `builder_config.min_image_tokens` /
  `max_image_tokens_per_image` from `visual/config.json`, and `patch_size` / `merge_size` from
  `visual/preprocessor_config.json` (cpp/multimodal/qwenViTRunner.cpp:66-175,
  `validateAndFillConfig`); InternVL reads the same bounds and `vision_config.image_size`
  (cpp/multimodal/internViTRunner.cpp:76-99).

The description names the folder itself as an `hf` profile read by `tokenizers-raw` (the file as
written, the loader closest to Edge-LLM's reader), and every way the two may differ for this
tokenizer is one note.
"""
from __future__ import annotations

import json
import os

from .. import KvconformError
from ..cases import schemas

LOADER = "tokenizers-raw"
QWEN_VL = ("qwen2_vl", "qwen2_vl_vision", "qwen2_5_vl", "qwen2_5_vl_vision", "qwen3_vl", "qwen3_vl_vision",
           "qwen3_5", "qwen3_5_vision")                       # cpp/multimodal/modelTypes.h:56-63
INTERNVL = ("internvl", "internvl_vision")                   # modelTypes.h:74


def tokenizer_facts(engine_dir: str, cfg, findings) -> dict | None:
    """{tokenizer, vocab_size, eos_token_id, image token} of the folder's own tokenizer files, or
    None (with an error line) when the runtime could not load them."""
    folder = os.path.abspath(engine_dir)
    files = [os.path.join(folder, n) for n in ("tokenizer.json", "tokenizer_config.json")]
    if not os.path.isfile(files[0]):
        findings.errors.append(f"missing tokenizer: {folder} has no tokenizer.json, which Edge-LLM's runtime loads "
                               "from the engine folder and cannot start without (cpp/tokenizer/tokenizer.cpp:109-113); "
                               "llm_build copies it there (cpp/builder/llmBuilder.cpp:1716-1717)")
        return None
    if not os.path.isfile(files[1]):
        findings.errors.append(f"missing tokenizer: {folder} has no tokenizer_config.json, where the kit and Edge-LLM "
                               "read the end-of-sequence token (cpp/tokenizer/tokenizer.cpp:123-133, 467-468)")
        return None
    from ..judge.oracle import load_hf_tokenizer
    try:
        tok = load_hf_tokenizer(folder, LOADER)
    except Exception as e:        # `tokenizers` raises its own exception types for a malformed file
        raise KvconformError(f"cannot read the tokenizer: {type(e).__name__}: {_one_line(e)}", files[0]) from None
    if tok.eos_token_id is None:
        findings.errors.append(f"missing eos_token_id: {files[1]} names no eos_token the tokenizer knows "
                               "(Edge-LLM reads it there, tokenizer.cpp:467-468)")
        return None
    spec = schemas.read_json(files[0])
    findings.note(f"tokenizer: the folder's own {files[0]} and {files[1]} as an hf profile read by {LOADER}, the "
                  "file as written; Edge-LLM reads them with its own reader (cpp/tokenizer/tokenizer.cpp, "
                  "Tokenizer::loadFromHF), which no kit loader is (spec/hf-tokenizer.md TOK-HF-2)")
    for line in reader_differences(spec if isinstance(spec, dict) else {}):
        findings.note(f"tokenizer: {line}")
    _note_template(folder, tok, findings)
    facts = {"tokenizer": {"profile": "hf", "files": folder, "loader": LOADER}, "vocab_size": tok.vocab_size,
             "eos_token_id": tok.eos_token_id, "image_token_id": None, "audio_token_id": None}
    rows = cfg.get("vocab_size")
    if type(rows) is int and rows != tok.vocab_size:
        findings.note(f"vocab_size = {tok.vocab_size}: the tokenizer's ids (base vocabulary and added tokens, "
                      f"TOK-HF-9); {cfg.path} says {rows}, the model's embedding rows")
    extra = cfg.get("eos_token_id")
    if isinstance(extra, list) and [t for t in extra if t != tok.eos_token_id]:
        findings.note(f"eos_token_id = {tok.eos_token_id} ({tok.decode([tok.eos_token_id])!r}, tokenizer_config.json's "
                      f"eos_token); {cfg.path} lists {extra}, which Edge-LLM also stops at (llmInferenceRuntime.cpp:457-463): "
                      "the oracle ends a generation at this one id only, so a response that stops at another "
                      "of them before max_generate_length is judged a transcript that ends early (CR-BATCH-7)")
    if tok.image_token_id is not None:
        facts["image_token_id"] = tok.image_token_id
    return facts


def reader_differences(spec: dict) -> list[str]:
    """Where Edge-LLM's reader and `tokenizers-raw` may tokenize this tokenizer.json differently."""
    out = []
    norm = spec.get("normalizer") or {}
    steps = norm.get("normalizers", []) if norm.get("type") == "Sequence" else [norm] if norm else []
    skipped = sorted({s.get("type", "?") for s in steps if isinstance(s, dict) and s.get("type") != "Replace"})
    if skipped:
        out.append(f"its normalizer steps {', '.join(skipped)} are applied by {LOADER} and skipped by Edge-LLM's "
                   "reader (it applies Replace steps only, tokenizer.cpp:201-240): text they change may count "
                   "differently there")
    stripping = [t.get("content") for t in spec.get("added_tokens", [])
                 if isinstance(t, dict) and (t.get("lstrip") or t.get("rstrip"))]
    if stripping:
        shown = ", ".join(map(str, stripping[:4])) + (f" and {len(stripping) - 4} more" if len(stripping) > 4 else "")
        out.append(f"added tokens with strip flags ({shown}) eat the whitespace beside them under {LOADER}; "
                   "Edge-LLM's reader matches added tokens literally, so that whitespace may count there")
    return out


def _note_template(folder: str, tok, findings) -> None:
    processed = os.path.join(folder, "processed_chat_template.json")
    if tok.chat_template is None:
        findings.note("chat template: none in tokenizer_config.json or chat_template.jinja; files with "
                      "apply_chat_template true are refused by the kit (Edge-LLM applies "
                      + ("processed_chat_template.json" if os.path.isfile(processed) else "no template") + ")")
    elif os.path.isfile(processed):
        findings.note("chat template: the kit renders tokenizer_config.json's Jinja template; Edge-LLM applies "
                      f"{processed}, which its export derives from that template (tensorrt_edgellm/chat_template.py, "
                      "process_chat_template): taken to give the same text")
    else:
        findings.note(f"chat template: {processed} is missing, which Edge-LLM's runtime requires "
                      "(tokenizer.cpp:151-164); the kit renders tokenizer_config.json's Jinja template")


def image_counter(visual_dir: str, visual_cfg: dict, findings) -> dict | None:
    """{"counter", "settings", ...} of the visual engine, as its runner reads them, or None (with
    an error line) for a model type the kit has no Edge-LLM counter for."""
    config_path = os.path.join(visual_dir, "config.json")
    model_type = (visual_cfg.get("vision_config") or {}).get("model_type") or visual_cfg.get("model_type")
    bc = visual_cfg.get("builder_config") or {}
    bounds = {}
    for ours, key in (("min_image_tokens", "min_image_tokens"), ("max_image_tokens", "max_image_tokens_per_image")):
        value = bc.get(key)
        if type(value) is not int or value < 1:
            findings.errors.append(f"missing vision.settings.{ours}: {config_path} has no positive "
                                   f"builder_config.{key}, which Edge-LLM's vision runner requires "
                                   "(qwenViTRunner.cpp:134-145; spec/media-tokens.md TOK-MEDIA-7)")
            return None
        bounds[ours] = value
    if model_type in QWEN_VL:
        pre_path = os.path.join(visual_dir, "preprocessor_config.json")
        pre = schemas.read_json(pre_path) if os.path.isfile(pre_path) else None
        if not isinstance(pre, dict):
            findings.errors.append(f"missing vision.settings.patch: no {pre_path}, from which Edge-LLM's Qwen-VL "
                                   "runner reads patch_size and merge_size (qwenViTRunner.cpp:147-175)")
            return None
        proc = pre.get("image_processor") if isinstance(pre.get("image_processor"), dict) else pre
        patch, merge = proc.get("patch_size"), proc.get("merge_size")
        if type(patch) is not int or type(merge) is not int or patch < 1 or merge < 1:
            findings.errors.append(f"vision.settings: {pre_path}: patch_size and merge_size must be positive "
                                   f"integers, got {json.dumps(patch)} and {json.dumps(merge)}")
            return None
        findings.note(f"vision.counter = edge-llm/qwen-vl: {config_path} model_type {model_type}; patch {patch} and "
                      f"merge {merge} from {pre_path}, bounds from builder_config.min_image_tokens and "
                      "max_image_tokens_per_image (qwenViTRunner.cpp:66-175)")
        return {"counter": "edge-llm/qwen-vl", "settings": {"patch": patch, "merge": merge, **bounds}}
    if model_type in INTERNVL:
        size = (visual_cfg.get("vision_config") or {}).get("image_size")
        tile = size[0] if isinstance(size, list) and size and type(size[0]) is int else size
        if type(tile) is not int or tile < 1:
            findings.errors.append(f"missing vision.settings.tile: {config_path} has no vision_config.image_size "
                                   "(internViTRunner.cpp:90-95)")
            return None
        findings.note(f"vision.counter = edge-llm/internvl: {config_path} model_type {model_type}; tile {tile}, "
                      "bounds from builder_config (internViTRunner.cpp:76-99)")
        return {"counter": "edge-llm/internvl", "settings": {**bounds, "tile": tile}}
    findings.errors.append(f"vision.counter: {config_path}: model_type {json.dumps(model_type)} has no Edge-LLM image "
                           "counter in the kit (edge-llm/qwen-vl for the Qwen-VL family, edge-llm/internvl; "
                           "spec/media-tokens.md); describe without --multimodal-engine-dir to judge text only")
    return None


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())[:300]
