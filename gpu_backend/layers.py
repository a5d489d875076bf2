"""Model building blocks: RMSNorm, RoPE, LoRA linear, SwiGLU, paged attention, and the
gated linear recurrence (a Mamba-2-like SSD mixer with a short causal convolution).

Shapes: B sequences, T new positions per sequence (right-padded), S key positions, H query
heads, G kv heads, D head dim, C = conv_dim = H_r * hd channels of the recurrence, N state size.
Everything computes in float32 (the KV pool stores FP16 or FP8; see kv_pool.py).
"""
import math

import torch
import torch.nn.functional as F


def rms_norm(x, weight, eps: float = 1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def lora_linear(x, weight, lora=None):
    """x @ W^T, plus the adapter's low-rank delta (x @ A^T) @ B^T when one is active."""
    y = x @ weight.T
    if lora is not None:
        a, b = lora
        y = y + (x @ a.T) @ b.T
    return y


def swiglu(x, gate, up, down):
    return (F.silu(x @ gate.T) * (x @ up.T)) @ down.T


def rope_tables(positions, head_dim: int, theta: float):
    """cos, sin of shape [B, T, D//2] for absolute positions [B, T]."""
    rot = head_dim - head_dim % 2
    inv_freq = theta ** (-torch.arange(0, rot, 2, device=positions.device, dtype=torch.float32) / head_dim)
    angles = positions.to(torch.float32)[..., None] * inv_freq      # [B, T, D/2]
    return torch.cos(angles), torch.sin(angles)


def apply_rope(x, cos, sin):
    """Rotate-half RoPE on x [B, T, heads, D]; with an odd D the last channel is not rotated."""
    half = cos.shape[-1]
    x1, x2, rest = x[..., :half], x[..., half:2 * half], x[..., 2 * half:]
    c, s = cos[:, :, None, :], sin[:, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s, rest], dim=-1)


def causal_mask(q_pos, S: int):
    """[B, 1, T, S] visibility: key j is visible to a query at absolute position p iff j <= p.
    Padding keys (j >= length > p) are therefore never weighted; padding queries use p = 0."""
    return torch.arange(S, device=q_pos.device)[None, None, None, :] <= q_pos[:, None, :, None]


def paged_attention(q, k_all, v_all, mask):
    """Causal attention of new queries over keys read through a page table.

    q: [B, T, H, D]; k_all, v_all: [B, S, G, D] (positions 0..S-1 of each sequence, padding
    beyond a sequence's length points at an all-zero scratch page); mask: causal_mask().
    """
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), k_all.transpose(1, 2), v_all.transpose(1, 2),
        attn_mask=mask, enable_gqa=q.shape[2] != k_all.shape[2])
    return out.transpose(1, 2)                                         # [B, T, H, D]


def causal_conv(x, state, weight, bias, lengths):
    """Depthwise causal convolution continuing from `state`.

    x: [B, T, C]; state: [B, C, K], the last K inputs before x (oldest first); weight: [C, K];
    lengths: [B] valid positions per row. Returns y [B, T, C] and the new state: the last K
    inputs up to each row's last valid position.
    """
    B, T, C = x.shape
    K = weight.shape[1]
    full = torch.cat([state, x.transpose(1, 2)], dim=2)               # [B, C, K + T]
    windows = full[:, :, 1:].unfold(2, K, 1)                          # [B, C, T, K]
    y = (windows * weight[None, :, None, :]).sum(-1) + bias[None, :, None]
    idx = (lengths[:, None] + torch.arange(K, device=x.device))[:, None, :].expand(B, C, K)
    return y.transpose(1, 2), full.gather(2, idx)


def ssd_scan(x, dt, A, Bm, Cm, h0, chunk: int = 64):
    """Diagonal gated linear recurrence, chunked (the SSD form of Mamba-2).

    h_t = exp(dt_t * A) h_{t-1} + dt_t x_t (outer) B_t,   y_t = h_t C_t
    x: [B, T, H, hd]; dt: [B, T, H] (0 on padding, which leaves h unchanged); A: [H] (< 0);
    Bm, Cm: [B, T, N]; h0: [B, H, hd, N]. Returns y [B, T, H, hd] and h after the last position.
    Within a chunk the recurrence is a masked matrix product; chunks are chained by a short
    loop over T/chunk, never over tokens.
    """
    Bsz, T, H, hd = x.shape
    if T == 1:                                                        # decode step
        a = torch.exp(dt[:, 0] * A)                                   # [B, H]
        h = a[:, :, None, None] * h0 + (dt[:, 0, :, None] * x[:, 0])[..., None] * Bm[:, 0, None, None, :]
        return torch.einsum("bhdn,bn->bhd", h, Cm[:, 0])[:, None], h
    c = min(chunk, T)
    nc = math.ceil(T / c)
    pad = nc * c - T
    if pad:
        x, dt = F.pad(x, (0, 0, 0, 0, 0, pad)), F.pad(dt, (0, 0, 0, pad))
        Bm, Cm = F.pad(Bm, (0, 0, 0, pad)), F.pad(Cm, (0, 0, 0, pad))
    x = x.view(Bsz, nc, c, H, hd)
    dt = dt.view(Bsz, nc, c, H)
    Bm, Cm = Bm.view(Bsz, nc, c, -1), Cm.view(Bsz, nc, c, -1)
    cum = torch.cumsum(dt * A, dim=2)                                 # [B, nc, c, H] log-decay so far
    seg = cum[:, :, :, None, :] - cum[:, :, None, :, :]               # [B, nc, t, s, H]
    causal = torch.ones(c, c, dtype=torch.bool, device=x.device).tril()
    decay = torch.exp(seg.masked_fill(~causal[None, None, :, :, None], float("-inf")))
    xdt = x * dt[..., None]                                           # [B, nc, c, H, hd]
    scores = torch.einsum("bktn,bksn->bkts", Cm, Bm)                  # [B, nc, t, s]
    y = torch.einsum("bkts,bktsh,bkshd->bkthd", scores, decay, xdt)   # within-chunk part
    to_end = torch.exp(cum[:, :, -1:, :] - cum)                       # [B, nc, c, H]
    states = torch.einsum("bksh,bkshd,bksn->bkhdn", to_end, xdt, Bm)  # chunk contributions
    chunk_decay = torch.exp(cum[:, :, -1, :])                         # [B, nc, H]
    h, entering = h0, []
    for k in range(nc):
        entering.append(h)
        h = chunk_decay[:, k, :, None, None] * h + states[:, k]
    entering = torch.stack(entering, dim=1)                           # [B, nc, H, hd, N]
    y = y + torch.einsum("bktn,bkhdn,bkth->bkthd", Cm, entering, torch.exp(cum))
    return y.reshape(Bsz, nc * c, H, hd)[:, :T], h
