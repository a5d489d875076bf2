#!/usr/bin/env python3
"""Write a tiny random-weight llama-architecture GGUF around a real Hugging Face tokenizer.

    python tools/tiny_gguf.py TOKENIZER_DIR OUT.gguf [--seed 0]

The model (2 layers, hidden 64, 4 heads, feed-forward 128, weights drawn at random with a fixed
seed) is there only so that llama-server can run; the vocabulary is the real one: every token,
token type and merge of TOKENIZER_DIR/tokenizer.json, the special token ids and the chat
template of tokenizer_config.json, written as llama.cpp's own converter writes a Qwen2-family
BPE vocabulary (`tokenizer.ggml.model` gpt2, pre-tokenizer `qwen2`). So the server tokenizes
and renders exactly what the kit's `--tokenizer TOKENIZER_DIR` does, and the kit checks that
(PEER-TOK-1) before it judges a count. No weights are downloaded.

Needs the `gguf` and `numpy` packages (tools/real-llama-server.sh runs it in its own venv).
"""
from __future__ import annotations

import argparse
import json
import os
import re

LAYERS, HIDDEN, HEADS, FF, CONTEXT = 2, 64, 4, 128, 4096
CONTROL_LOOKING = re.compile(r"^<\|.*\|>$")


def vocabulary(folder: str) -> dict:
    """tokens, token types, merges and special ids of a BPE tokenizer folder."""
    import gguf
    with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
        spec = json.load(f)
    with open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    model = spec["model"]
    if model.get("type") != "BPE":
        raise SystemExit(f"{folder}: a BPE tokenizer is needed, found {model.get('type')!r}")
    by_id = {i: (t, gguf.TokenType.NORMAL) for t, i in model["vocab"].items()}
    for added in spec.get("added_tokens", []):
        special = added["special"] or CONTROL_LOOKING.match(added["content"])
        by_id[added["id"]] = (added["content"], gguf.TokenType.CONTROL if special else gguf.TokenType.USER_DEFINED)
    size = max(by_id) + 1
    if len(by_id) != size:
        raise SystemExit(f"{folder}: token ids are not contiguous ({len(by_id)} tokens, largest id {size - 1})")
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    ids = {t: i for i, (t, _) in by_id.items()}

    def special(name):
        value = config.get(name)
        value = value.get("content") if isinstance(value, dict) else value
        return ids.get(value) if value else None
    return {"tokens": [by_id[i][0] for i in range(size)], "types": [int(by_id[i][1]) for i in range(size)],
            "merges": merges, "eos": special("eos_token"), "pad": special("pad_token"), "bos": special("bos_token"),
            "add_bos": bool(config.get("add_bos_token", False)), "template": config.get("chat_template")}


def write(folder: str, out: str, seed: int) -> None:
    import gguf
    import numpy as np
    v = vocabulary(folder)
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(out, "llama")
    w.add_name("kvconform tiny random llama")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(HEADS)
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(v["tokens"]))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(v["tokens"])
    w.add_token_types(v["types"])
    w.add_token_merges(v["merges"])
    if v["eos"] is not None:
        w.add_eos_token_id(v["eos"])
    if v["pad"] is not None:
        w.add_pad_token_id(v["pad"])
    if v["bos"] is not None:
        w.add_bos_token_id(v["bos"])
    w.add_add_bos_token(v["add_bos"])
    if v["template"]:
        w.add_chat_template(v["template"])

    def matrix(rows, cols):
        return (rng.standard_normal((rows, cols)) * 0.02).astype(np.float16)
    w.add_tensor("token_embd.weight", matrix(len(v["tokens"]), HIDDEN))
    w.add_tensor("output_norm.weight", np.ones(HIDDEN, dtype=np.float32))
    # An output matrix of its own: tied to the embeddings, a random model this small echoes its
    # last input token ("\n" after a chat prompt), and the answers it feeds back are newlines
    # that merge with the template's; untied, it samples varied tokens.
    w.add_tensor("output.weight", matrix(len(v["tokens"]), HIDDEN))
    for i in range(LAYERS):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(HIDDEN, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(f"blk.{i}.{name}.weight", matrix(HIDDEN, HIDDEN))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(HIDDEN, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", matrix(FF, HIDDEN))
        w.add_tensor(f"blk.{i}.ffn_up.weight", matrix(FF, HIDDEN))
        w.add_tensor(f"blk.{i}.ffn_down.weight", matrix(HIDDEN, FF))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("tokenizer", help="folder with tokenizer.json and tokenizer_config.json")
    p.add_argument("out", help="the .gguf file to write")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    write(a.tokenizer, a.out, a.seed)
    print(a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
