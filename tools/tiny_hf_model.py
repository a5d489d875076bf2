#!/usr/bin/env python3
"""Write a tiny random-weight Hugging Face model (Qwen2, or Gemma-3 with a sliding window) around a real tokenizer.

    python tools/tiny_hf_model.py TOKENIZER_DIR OUT_DIR [--seed 0] [--arch qwen2|gemma3] [--sliding-window W]

The sibling of tools/tiny_gguf.py, for vLLM (tools/real-vllm.sh): OUT_DIR/model is a
`Qwen2ForCausalLM` folder (config.json, model.safetensors, the tokenizer files of TOKENIZER_DIR)
and OUT_DIR/lora-alpha, OUT_DIR/lora-beta are two PEFT-format LoRA adapters (rank 8 on q_proj
and v_proj). The weights are drawn at random with a fixed seed: the model exists only so that a
server can run; the vocabulary and chat template are the real ones, so the server tokenizes
exactly what the kit's `--tokenizer TOKENIZER_DIR` does (PEER-TOK-1 checks that).

Shapes follow what vLLM's CPU build needs: head size 32 (its CPU attention refuses smaller), an
output matrix not tied to the embeddings. 2 layers, hidden 64, 2 heads, feed-forward 128,
float32: about 20 M parameters, almost all of them the two vocabulary matrices. No weights are
downloaded. Needs torch and safetensors (the vLLM venv has both).

`--arch gemma3` writes a `Gemma3ForCausalLM` (model type `gemma3_text`) instead: the same sizes,
layer 0 a sliding-window layer of `--sliding-window` tokens (default 64) and layer 1 full
attention (`layer_types`), as Gemma 3 interleaves them (five local layers to one global there);
vLLM then keeps one KV-cache group per layer kind (a sliding-window group and a full-attention
group). Its embeddings are tied to the output, as Gemma's are; the adapters are the same.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil

LAYERS, HIDDEN, HEADS, FF, CONTEXT, RANK = 2, 64, 2, 128, 4096, 8
VOCAB = 151936
"""Qwen2.5's embedding rows (its tokenizer uses the first 151665)."""
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json")
ADAPTERS = ("alpha", "beta")


def special_id(folder: str, name: str):
    with open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
        spec = json.load(f)
    value = config.get(name)
    value = value.get("content") if isinstance(value, dict) else value
    ids = {t["content"]: t["id"] for t in spec.get("added_tokens", [])}
    return ids.get(value, spec["model"]["vocab"].get(value)) if value else None


def config(folder: str) -> dict:
    eos = special_id(folder, "eos_token")
    return {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": VOCAB,
            "hidden_size": HIDDEN, "intermediate_size": FF, "num_hidden_layers": LAYERS,
            "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "head_dim": HIDDEN // HEADS,
            "max_position_embeddings": CONTEXT, "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
            "hidden_act": "silu", "tie_word_embeddings": False, "use_sliding_window": False,
            "sliding_window": None, "max_window_layers": LAYERS, "attention_dropout": 0.0,
            "initializer_range": 0.02, "torch_dtype": "float32", "bos_token_id": special_id(folder, "bos_token"),
            "eos_token_id": eos, "use_cache": True}


def gemma3_config(folder: str, window: int) -> dict:
    """A Gemma 3 text model of the same sizes: layer 0 slides over `window` tokens, layer 1 sees all."""
    eos = special_id(folder, "eos_token")
    return {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": VOCAB,
            "hidden_size": HIDDEN, "intermediate_size": FF, "num_hidden_layers": LAYERS,
            "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "head_dim": HIDDEN // HEADS,
            "max_position_embeddings": CONTEXT, "query_pre_attn_scalar": HIDDEN // HEADS, "rms_norm_eps": 1e-6,
            "hidden_activation": "gelu_pytorch_tanh", "sliding_window": window,
            "layer_types": ["sliding_attention", "full_attention"],
            "rope_parameters": {"full_attention": {"rope_theta": 1000000.0, "rope_type": "default"},
                                "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}},
            "attention_bias": False, "attention_dropout": 0.0, "attn_logit_softcapping": None,
            "final_logit_softcapping": None, "tie_word_embeddings": True, "initializer_range": 0.02,
            "torch_dtype": "float32", "bos_token_id": special_id(folder, "bos_token"), "eos_token_id": eos,
            "pad_token_id": eos, "use_cache": True}


def gemma3_weights(seed: int) -> dict:
    """Gemma 3's tensors: no biases, q/k norms, four norms per layer (Gemma's RMSNorm scales by
    1 + weight, so zeros are the identity), embeddings tied to the output."""
    import torch
    g = torch.Generator().manual_seed(seed)

    def rand(*shape, std=0.02):
        return torch.randn(*shape, generator=g) * std
    head = HIDDEN // HEADS
    out = {"model.embed_tokens.weight": rand(VOCAB, HIDDEN), "model.norm.weight": torch.zeros(HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            out[p + f"self_attn.{name}.weight"] = rand(HIDDEN, HIDDEN)
        out[p + "self_attn.q_norm.weight"] = torch.zeros(head)
        out[p + "self_attn.k_norm.weight"] = torch.zeros(head)
        out[p + "mlp.gate_proj.weight"] = rand(FF, HIDDEN)
        out[p + "mlp.up_proj.weight"] = rand(FF, HIDDEN)
        out[p + "mlp.down_proj.weight"] = rand(HIDDEN, FF)
        for norm in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                     "post_feedforward_layernorm"):
            out[p + f"{norm}.weight"] = torch.zeros(HIDDEN)
    return {k: v.contiguous() for k, v in out.items()}


def weights(seed: int) -> dict:
    import torch
    g = torch.Generator().manual_seed(seed)

    def rand(*shape, std=0.02):
        return torch.randn(*shape, generator=g) * std
    out = {"model.embed_tokens.weight": rand(VOCAB, HIDDEN), "lm_head.weight": rand(VOCAB, HIDDEN),
           "model.norm.weight": torch.ones(HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        for name in ("q_proj", "k_proj", "v_proj"):
            out[p + f"self_attn.{name}.weight"] = rand(HIDDEN, HIDDEN)
            out[p + f"self_attn.{name}.bias"] = rand(HIDDEN)
        out[p + "self_attn.o_proj.weight"] = rand(HIDDEN, HIDDEN)
        out[p + "mlp.gate_proj.weight"] = rand(FF, HIDDEN)
        out[p + "mlp.up_proj.weight"] = rand(FF, HIDDEN)
        out[p + "mlp.down_proj.weight"] = rand(HIDDEN, FF)
        out[p + "input_layernorm.weight"] = torch.ones(HIDDEN)
        out[p + "post_attention_layernorm.weight"] = torch.ones(HIDDEN)
    return {k: v.contiguous() for k, v in out.items()}


def adapter(seed: int) -> dict:
    """A PEFT LoRA state dict: rank RANK on q_proj and v_proj, B not zero (so it changes outputs)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    out = {}
    for i in range(LAYERS):
        for name in ("q_proj", "v_proj"):
            p = f"base_model.model.model.layers.{i}.self_attn.{name}."
            out[p + "lora_A.weight"] = (torch.randn(RANK, HIDDEN, generator=g) * 0.1).contiguous()
            out[p + "lora_B.weight"] = (torch.randn(HIDDEN, RANK, generator=g) * 0.1).contiguous()
    return out


def write(tokenizer: str, out: str, seed: int, arch: str = "qwen2", window: int = 64) -> None:
    from safetensors.torch import save_file
    model = os.path.join(out, "model")
    os.makedirs(model, exist_ok=True)
    with open(os.path.join(model, "config.json"), "w", encoding="utf-8") as f:
        json.dump(gemma3_config(tokenizer, window) if arch == "gemma3" else config(tokenizer), f, indent=1)
    eos = special_id(tokenizer, "eos_token")
    with open(os.path.join(model, "generation_config.json"), "w", encoding="utf-8") as f:
        json.dump({"eos_token_id": eos, "do_sample": False}, f, indent=1)
    for name in TOKENIZER_FILES:
        if os.path.exists(os.path.join(tokenizer, name)):
            shutil.copyfile(os.path.join(tokenizer, name), os.path.join(model, name))
    tensors = gemma3_weights(seed) if arch == "gemma3" else weights(seed)
    save_file(tensors, os.path.join(model, "model.safetensors"), metadata={"format": "pt"})
    for k, name in enumerate(ADAPTERS):
        folder = os.path.join(out, f"lora-{name}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "adapter_config.json"), "w", encoding="utf-8") as f:
            json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": RANK, "lora_alpha": 2 * RANK,
                       "lora_dropout": 0.0, "bias": "none", "target_modules": ["q_proj", "v_proj"],
                       "fan_in_fan_out": False, "base_model_name_or_path": model, "modules_to_save": None}, f,
                      indent=1)
        save_file(adapter(seed + 1 + k), os.path.join(folder, "adapter_model.safetensors"),
                  metadata={"format": "pt"})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tokenizer", help="a Hugging Face tokenizer folder (tokenizer.json, tokenizer_config.json)")
    ap.add_argument("out", help="the folder to write model/, lora-alpha/ and lora-beta/ into")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arch", choices=("qwen2", "gemma3"), default="qwen2",
                    help="qwen2 (full attention) or gemma3 (a sliding-window layer and a full-attention layer)")
    ap.add_argument("--sliding-window", type=int, default=64, help="gemma3: the sliding-window layer's window")
    args = ap.parse_args()
    if args.sliding_window < 2:
        raise SystemExit(f"--sliding-window {args.sliding_window}: expected at least 2 tokens")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if not os.path.isfile(os.path.join(args.tokenizer, name)):
            raise SystemExit(f"{args.tokenizer}: no {name}")
    write(args.tokenizer, args.out, args.seed, args.arch, args.sliding_window)
    print(os.path.join(args.out, "model"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
