"""A small EAGLE3-style draft head: it proposes tokens that the base model then verifies.

The head reads the base model's final hidden state at position t and the embedding of the token
at t + 1, fuses them (`fc`), runs one attention layer over its own KV (the *draft KV*, kept in
draft pages of a separate pool, spec/context-reuse.md CR-SPEC-5) and turns the result into
logits with the base model's output head. Because the draft KV of position t needs the token at
t + 1, a sequence whose base KV covers `c` tokens has committed draft KV for `c - 1` positions
(CR-SPEC-4); the draft entry of the last position is computed on the fly when proposing.

Proposals never change what is generated: the runtime accepts the longest prefix of proposals
equal to the base model's own greedy choice (runtime.py), so a greedy EAGLE run says exactly
what vanilla greedy decoding says (CR-SPEC-7, CR-OUT-1). Weights are random, drawn at build time
from the engine's seed like the base model's (engine_build.draft_weights); the head has no
positional encoding, which is enough for a proposer whose quality only sets the acceptance rate.
"""
import math
import os

import torch
from safetensors.torch import load_file

WEIGHTS = "draft_head.safetensors"
CONFIG = "draft_config.json"
PROPOSALS = 3          # tokens proposed per decode step (the verify window is one more)


def draft_shapes(cfg: dict) -> dict:
    d, H, G, D = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_kv_heads"], cfg["head_dim"]
    return {"draft.fc": (d, 2 * d), "draft.wq": (H * D, d), "draft.wk": (G * D, d), "draft.wv": (G * D, d),
            "draft.wo": (d, H * D), "draft.norm": (d,)}


def draft_config(cfg: dict) -> dict:
    """What `draft_config.json` says about the head (written beside the weights at build time)."""
    return {"format": "kvconform-draft-v1", "method": "eagle3", "weights": WEIGHTS,
            "hidden_size": cfg["hidden_size"], "num_attention_heads": cfg["num_attention_heads"],
            "num_kv_heads": cfg["num_kv_heads"], "head_dim": cfg["head_dim"], "proposals": PROPOSALS,
            "draft_kv_pool_pages": cfg["draft_kv_pool_pages"]}


class DraftHead:
    def __init__(self, cfg: dict, engine_dir: str, base, device: torch.device):
        w = load_file(os.path.join(engine_dir, WEIGHTS), device=str(device))
        for name, shape in draft_shapes(cfg).items():
            if name not in w or tuple(w[name].shape) != shape:
                raise ValueError(f"draft tensor {name} is missing or not of shape {shape}")
        self.w = {k: v.to(torch.float32) for k, v in w.items()}
        self.base, self.device = base, device
        self.H, self.G, self.D = cfg["num_attention_heads"], cfg["num_kv_heads"], cfg["head_dim"]

    def _fuse(self, hidden, tokens):
        """[T, d] base hidden states and [T] next tokens -> [T, d] fused inputs."""
        emb = self.base.w["embed"][tokens]
        return torch.cat([hidden, emb], dim=-1) @ self.w["draft.fc"].T

    def _qkv(self, x):
        T = x.shape[0]
        q = (x @ self.w["draft.wq"].T).view(T, self.H, self.D)
        k = (x @ self.w["draft.wk"].T).view(T, self.G, self.D)
        v = (x @ self.w["draft.wv"].T).view(T, self.G, self.D)
        return q, k, v

    def _attend(self, x, q, keys, values, first: int):
        """Queries at draft positions first.. over keys/values [S, G, D] of positions 0..S-1, causal."""
        T, S = q.shape[0], keys.shape[0]
        rep = self.H // self.G
        k = keys.repeat_interleave(rep, dim=1).transpose(0, 1)          # [H, S, D]
        v = values.repeat_interleave(rep, dim=1).transpose(0, 1)
        scores = q.transpose(0, 1) @ k.transpose(1, 2) / math.sqrt(self.D)  # [H, T, S]
        allowed = torch.arange(S, device=self.device)[None, :] <= (first + torch.arange(T, device=self.device))[:, None]
        scores = scores.masked_fill(~allowed, float("-inf"))
        out = (scores.softmax(-1) @ v).transpose(0, 1).reshape(T, self.H * self.D)
        return x + out @ self.w["draft.wo"].T

    def _read(self, pool, slots):
        if not len(slots):
            empty = torch.zeros(0, self.G, self.D, device=self.device)
            return empty, empty
        k, v = pool.gather(0, torch.as_tensor(slots, device=self.device)[None])
        return k[0].clone(), v[0].clone()

    @torch.inference_mode()
    def commit(self, pool, slots_of, first: int, hidden, tokens) -> None:
        """Compute and store the draft KV of positions first..first+T-1 from the base hidden states
        at those positions [T, d] and the tokens that follow each [T]. `slots_of(positions)` maps
        positions to the sequence's draft page slots; positions 0..first-1 are already stored."""
        T = hidden.shape[0]
        if T == 0:
            return
        x = self._fuse(hidden, tokens)
        q, k, v = self._qkv(x)
        pool.write(0, torch.as_tensor(slots_of(list(range(first, first + T))), device=self.device), k, v)

    @torch.inference_mode()
    def propose(self, pool, slots_of, committed: int, hidden, token, count: int) -> list:
        """Up to `count` proposed tokens after `token`, the last sampled one: the draft runs from
        position `committed` (base hidden state `hidden` [d] there) over its committed KV
        (positions 0..committed-1) and its own speculative entries, which are never stored."""
        keys, values = self._read(pool, slots_of(list(range(committed))))
        out, h, tok = [], hidden[None], torch.as_tensor([token], device=self.device)
        for i in range(count):
            x = self._fuse(h, tok)
            q, k, v = self._qkv(x)
            keys, values = torch.cat([keys, k]), torch.cat([values, v])
            h = self._attend(x, q, keys, values, committed + i)
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w["draft.norm"]
            tok = self.base.logits(h).argmax(-1)
            out.append(int(tok[0]))
        return out
