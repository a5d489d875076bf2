"""Item 3: decode throughput with the paged KV pool against one contiguous KV tensor per sequence.

Both sides run the same `gpu_backend.model.Model` (same weights, same layers, same float32
compute, same FP16 KV storage) through the same greedy decode loop; only the KV store differs:

    paged       gpu_backend.kv_pool.KVPool: one pool tensor; each sequence owns scattered pages
                (a shuffled page list, as after eviction churn) and every step gathers its keys
                through the page table (index_select) before FP16 -> float32.
    contiguous  ContiguousKV below: kv[layer] is [2, B, capacity, G, D], sequence b's positions
                0..S-1 are the slice [:, b, :S]: no index, just FP16 -> float32 of the slice
                (into a reused buffer, as the pool's gather does).

The context is filled by one real prefill of an n0-token prompt (batch 1, paged), whose KV is
copied into every sequence of both stores, so both decode from identical state. Then, interleaved,
each repetition decodes `steps` tokens from position n0 on each side (overwriting the same
positions every repetition). A second figure runs the whole runtime (`Runtime.infer`: sampler,
page bookkeeping, publication, responses) on the same shape for the same number of steps.
"""
from __future__ import annotations

import math
import random

import torch

from gpu_backend.kv_pool import KVPool
from gpu_backend.layers import gathered_attention
from gpu_backend.model import ForwardBatch

from .backend_util import Clock, request, text
from .common import log, median


class ContiguousKV:
    """The baseline: one contiguous [capacity, G, D] K and V tensor per sequence and layer."""

    def __init__(self, *, layers: int, batch: int, capacity: int, kv_heads: int, head_dim: int, device,
                 dtype=torch.float16):
        self.cap = capacity
        self.kv = torch.zeros(layers, 2, batch, capacity, kv_heads, head_dim, dtype=dtype, device=device)
        # the float32 read buffer is reused, as KVPool.gather reuses its workspace
        self._ws = torch.empty(2 * batch * capacity * kv_heads * head_dim, dtype=torch.float32, device=device)

    @property
    def nbytes(self) -> int:
        return self.kv.numel() * self.kv.element_size()

    def write(self, layer: int, slots, k, v) -> None:
        """slots: flat b * capacity + position."""
        G, D = k.shape[-2:]
        self.kv[layer, 0].view(-1, G, D).index_copy_(0, slots, k.to(self.kv.dtype))
        self.kv[layer, 1].view(-1, G, D).index_copy_(0, slots, v.to(self.kv.dtype))

    def gather(self, layer: int, slots):
        """Positions 0..S-1 of each sequence (slots only gives B and S): a slice, no index."""
        B, S = slots.shape
        G, D = self.kv.shape[-2:]
        out = self._ws[:2 * B * S * G * D].view(2, B, S, G, D)
        out.copy_(self.kv[layer, :, :B, :S])
        return out[0], out[1]

    def attend(self, layer: int, q, read):
        """What KVPool.attend does on its gather path, over the slice instead of the page table."""
        k_all, v_all = self.gather(layer, read.slots)
        return gathered_attention(q, k_all, v_all, read.mask())


class _Side:
    """One KV store plus what the decode loop needs to address it."""

    def __init__(self, name, kv, write_slot, read_slots):
        self.name, self.kv = name, kv
        self.write_slot, self.read_slots = write_slot, read_slots   # (pos) -> [B]; (S) -> [B, S]


def _decode(model, side: _Side, first_ids, n0: int, steps: int, device, tokens: list | None = None) -> float:
    """Greedy decode of `steps` tokens from position n0; returns seconds (and fills `tokens`)."""
    B = first_ids.shape[0]
    ids = first_ids
    ones = torch.ones(B, dtype=torch.long, device=device)
    valid = torch.ones(B, 1, dtype=torch.bool, device=device)
    clock = Clock(device)
    clock.start()
    with torch.inference_mode():
        for t in range(steps):
            pos = n0 + t
            fb = ForwardBatch(ids=ids, positions=torch.full((B, 1), pos, dtype=torch.long, device=device),
                              lengths=ones, valid=valid, write_slots=side.write_slot(pos),
                              read_slots=side.read_slots(pos + 1), rec_state=[], all_valid=True)
            ids = model.logits(model.forward(fb, side.kv)[:, 0]).argmax(-1, keepdim=True)
            if tokens is not None:
                tokens.append(ids)
    return clock.stop()


def model_level(rt, *, batch: int, n0: int, steps: int, reps: int, seed: int = 0) -> dict:
    """Paged vs contiguous decode tokens/s on the runtime's model (its pool is left untouched)."""
    model, cfg, dev = rt.model, rt.cfg, rt.device
    P, L_att = rt.P, cfg["layer_kinds"].count("attention")
    G, D = cfg["num_kv_heads"], cfg["head_dim"]
    cap = n0 + steps
    per_seq = math.ceil(cap / P)
    pool = KVPool(layers=L_att, pages=batch * per_seq, P=P, kv_heads=G, head_dim=D, dtype=torch.float16,
                  device=dev)
    order = list(range(batch * per_seq))
    random.Random(seed).shuffle(order)                        # scattered pages
    tables = torch.tensor([order[b * per_seq:(b + 1) * per_seq] for b in range(batch)], device=dev)
    positions = torch.arange(per_seq * P, device=dev)
    slot_table = tables[:, positions // P] * P + positions % P          # [B, per_seq * P]
    contiguous = ContiguousKV(layers=L_att, batch=batch, capacity=cap, kv_heads=G, head_dim=D, device=dev)
    flat = torch.arange(batch, device=dev) * cap
    paged_side = _Side("paged", pool, lambda pos: slot_table[:, pos].contiguous(),
                       lambda S: slot_table[:, :S])
    dummy = torch.zeros(1, 1, dtype=torch.long, device=dev)
    contiguous_side = _Side("contiguous", contiguous, lambda pos: flat + pos, lambda S: dummy.expand(batch, S))

    # one real prefill of an n0-token prompt into sequence 0's pages, copied everywhere
    ids = torch.tensor([list(text(random.Random(seed + 1), n0).encode())], device=dev)
    fb = ForwardBatch(ids=ids, positions=torch.arange(n0, device=dev)[None], lengths=torch.tensor([n0], device=dev),
                      valid=torch.ones(1, n0, dtype=torch.bool, device=dev), write_slots=slot_table[0, :n0],
                      read_slots=slot_table[:1, :n0], rec_state=[], all_valid=True)
    with torch.inference_mode():
        first = model.logits(model.forward(fb, pool)[:, -1]).argmax(-1, keepdim=True)
        data = pool.read_positions(slot_table[0, :n0].contiguous())                 # [L, 2, n0, G, D]
        for b in range(batch):
            pool.write_positions(slot_table[b, :n0].contiguous(), data)
            contiguous.kv[:, :, b, :n0] = data
    first_ids = first.expand(batch, 1).contiguous()
    sides = [paged_side, contiguous_side]
    generated = {}
    for side in sides:                                  # untimed first runs: the same greedy tokens?
        generated[side.name] = []
        _decode(model, side, first_ids, n0, steps, dev, generated[side.name])
    same = all(torch.equal(a, b) for a, b in zip(generated["paged"], generated["contiguous"]))
    secs = {s.name: [] for s in sides}
    ratio = []
    for rep in range(reps):
        for side in (sides if rep % 2 == 0 else sides[::-1]):
            secs[side.name].append(_decode(model, side, first_ids, n0, steps, dev))
        ratio.append(secs["paged"][-1] / secs["contiguous"][-1])
    tps = {k: batch * steps / median(v) for k, v in secs.items()}
    return {"batch": batch, "context_tokens": n0, "steps": steps, "tokens_per_s": tps,
            "paged_over_contiguous_time": median(ratio), "ratio_reps": ratio, "greedy_tokens_equal": same,
            "pool_bytes": pool.nbytes, "contiguous_bytes": contiguous.nbytes}


def full_length_suffixes(rt, prefix: str, count: int, steps: int, seed: int, batch: int = 8) -> list:
    """Suffixes whose greedy continuation runs `steps` tokens without <|eos|> (the seeded weights
    end some continuations early, and a shrinking batch would not measure B rows per step)."""
    rng = random.Random(seed)
    found = []
    for _ in range(8):
        cands = [text(rng, 16) for _ in range(batch)]
        doc = request([prefix + c for c in cands], max_generate_length=steps + 1, batch_size=batch)
        for c, r in zip(cands, rt.infer(doc, ".")["responses"]):
            if r["finish_reason"] == "max-length":
                found.append(c)
        if len(found) >= count:
            return found[:count]
    raise RuntimeError(f"found only {len(found)} of {count} suffixes that decode {steps} tokens")


def runtime_level(rt, *, batch: int, n0: int, steps: int, reps: int, seed: int = 0) -> dict:
    """Decode tokens/s of the whole runtime (`Runtime.infer`: sampler, page bookkeeping, growth,
    publication checks, responses) on B requests whose n0 - 16 token prefix is reused from the
    cache, so prefill stays short: decode time = infer time - prefill time (its own profile)."""
    prefix = text(random.Random(seed + 2), n0 - 16)
    rt.infer(request([prefix]), ".")                                    # publish the prefix
    suffixes = full_length_suffixes(rt, prefix, batch, steps, seed + 3, batch=rt.cfg["max_batch_size"])
    doc = request([prefix + s for s in suffixes], max_generate_length=steps + 1, batch_size=batch)
    out = []
    for _ in range(reps):
        before = rt.prefill_stats["seconds"]
        clock = Clock(rt.device)
        clock.start()
        res = rt.infer(doc, ".")
        wall = clock.stop()
        assert all(len(r["output_ids"]) == steps + 1 for r in res["responses"]), "decode stopped early"
        out.append(wall - (rt.prefill_stats["seconds"] - before))
    return {"batch": batch, "context_tokens": n0, "steps": steps, "tokens_per_s": batch * steps / median(out)}


def run(rt, *, batches=(1, 8), n0: int = 1024, steps: int = 32, reps: int = 5) -> dict:
    rows = []
    for B in batches:
        row = model_level(rt, batch=B, n0=n0, steps=steps, reps=reps)
        row["runtime_tokens_per_s"] = runtime_level(rt, batch=B, n0=n0, steps=steps, reps=max(2, reps // 2))["tokens_per_s"]
        row["runtime_over_contiguous_time"] = row["tokens_per_s"]["contiguous"] / row["runtime_tokens_per_s"]
        log(f"paged B={B}: paged {row['tokens_per_s']['paged']:.1f} tok/s, contiguous "
            f"{row['tokens_per_s']['contiguous']:.1f} tok/s (x{row['paged_over_contiguous_time']:.3f}), "
            f"runtime {row['runtime_tokens_per_s']:.1f} tok/s")
        rows.append(row)
    return {"rows": rows}
