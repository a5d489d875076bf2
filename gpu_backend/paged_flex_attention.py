"""Attention that reads the KV pool's pages inside the attention call: torch's flex_attention
over the whole pool, told by a block mask which pages each sequence may read.

The gather path (kv_pool.KVPool.gather) first copies every key a sequence reads into a
[B, S, G, D] buffer; a paged kernel instead takes the pool as it lies and the page tables, as
vLLM's and Edge-LLM's paged kernels do. Here the pool's slots are flex_attention's key axis
(N = (pages + 1) * P), a key block is whole pages (at least 16 slots, the compiled kernel's
smallest), and for sequence b:

    block mask  the key blocks holding the pages of b's table its queries can see (one query
                block of Q_BLOCK rows at a time, up to the page of the block's last position):
                the compiled kernel (CUDA) visits only those blocks
    mask_mod    slot j is visible to a query at position p iff j's page is the k-th page of b's
                table and k * P + j % P <= p: the exact causal mask over logical positions
                (the eager form on CPU evaluates it over every slot)

Keys are read in the pool's dtype (FP16): on CPU the queries stay float32 and flex_attention
computes in float32, as the gather path does after its FP16 -> float32 copy; on CUDA both are
FP16, as layers.ATTENTION_DTYPE has it. The sum runs over the keys in pool order instead of
position order, so the two paths differ by float32 rounding only (about 1e-7 relative).
"""
import math
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from .layers import ATTENTION_DTYPE

Q_BLOCK = 128          # query rows per block-mask row (flex_attention's default block size)
MIN_KV_BLOCK = 16      # the compiled kernel's smallest key block (a multiple of its BLOCK_N)
_compiled = {}         # device type -> torch.compile(flex_attention), made on first use


def _flex(device_type: str):
    """flex_attention compiled into one fused kernel on CUDA; its eager form elsewhere (an
    unfused reference that scores every slot: the CPU default is the gather path, kv_pool.py)."""
    if device_type != "cuda":
        return flex_attention
    if device_type not in _compiled:
        _compiled[device_type] = torch.compile(flex_attention, dynamic=True)
    return _compiled[device_type]


def kv_block(P: int) -> int:
    """Slots per key block: whole pages, at least MIN_KV_BLOCK and a multiple of it (the least
    common multiple of P and 16), so a page never straddles two blocks."""
    return P * (MIN_KV_BLOCK // math.gcd(P, MIN_KV_BLOCK))


def block_mask(read, P: int, n_slots: int) -> BlockMask:
    """The block mask of a forward (kv_pool.KVRead): page tables `read.pages` [B, n], readable
    key positions `read.lengths` [B], query positions `read.positions` [B, T]."""
    pages, lengths = read.pages, read.lengths
    B, n = pages.shape
    T, dev = read.positions.shape[1], pages.device
    q_pos = torch.where(read.valid, read.positions, 0)                         # [B, T]
    needed = (lengths + P - 1) // P                                             # [B] pages read
    column = torch.arange(n, device=dev)
    held = column.expand(B, n) < needed[:, None]
    logical = torch.full((B, n_slots // P), -1, dtype=torch.long, device=dev)   # [B, pool pages]
    rows = torch.arange(B, device=dev)[:, None].expand(B, n)
    logical[rows[held], pages[held]] = column.expand(B, n)[held]

    def visible(b, h, q_idx, kv_idx):
        k = logical[b, kv_idx // P]
        return (k >= 0) & (k * P + kv_idx % P <= q_pos[b, q_idx])

    # the key blocks each query block reads: those of the pages up to its last position
    block = kv_block(P)
    q_blocks, n_blocks = -(-T // Q_BLOCK), -(-n_slots // block)
    last = F.pad(q_pos, (0, q_blocks * Q_BLOCK - T)).view(B, q_blocks, Q_BLOCK).amax(-1)
    count = torch.minimum(needed[:, None], last // P + 1)                      # [B, q_blocks] pages
    blocks = (pages // (block // P))[:, None, :].expand(B, q_blocks, n)
    blocks = torch.where(column < count[..., None], blocks, n_blocks).sort(-1).values
    first = torch.ones_like(blocks, dtype=torch.bool)
    first[..., 1:] = blocks[..., 1:] != blocks[..., :-1]
    keep = first & (blocks < n_blocks)                                          # each block once
    order = (~keep).to(torch.int8).sort(dim=-1, stable=True).indices            # kept blocks first
    indices = torch.where(keep, blocks, 0).gather(-1, order).to(torch.int32)
    indices = F.pad(indices, (0, max(0, n_blocks - n)))[..., :n_blocks]         # one column per key block
    return BlockMask.from_kv_blocks(keep.sum(-1).to(torch.int32)[:, None], indices[:, None], BLOCK_SIZE=(Q_BLOCK, block),
                                    mask_mod=visible, seq_lengths=(T, n_slots), compute_q_blocks=False)


def attend(q, keys, values, read, P: int):
    """q [B, T, H, D] over the pool's keys and values of one layer, [N, G, D] each, through
    `read`'s page tables: [B, T, H, D]. The block mask is built once per forward (`read` keeps it)."""
    memo = read._memo
    if "block_mask" not in memo:
        memo["block_mask"] = block_mask(read, P, keys.shape[0])
    dtype = ATTENTION_DTYPE.get(q.device.type, q.dtype)
    k = keys.permute(1, 0, 2)[None]                                             # [1, G, N, D]
    v = values.permute(1, 0, 2)[None]
    with warnings.catch_warnings():         # the eager form on CPU is chosen knowingly (module docstring)
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        out = _flex(q.device.type)(q.transpose(1, 2).to(dtype), k, v, block_mask=memo["block_mask"],
                                   enable_gqa=q.shape[2] != k.shape[1])
    return out.transpose(1, 2).to(q.dtype)                                      # [B, T, H, D]
