"""Model building blocks: RMSNorm, RoPE, LoRA linear, SwiGLU, attention over gathered pages
(the gather path of kv_pool.KVPool.attend), and the gated linear recurrence (a Mamba-2-like SSD
mixer with a short causal convolution).

Shapes: B sequences, T new positions per sequence (right-padded), S key positions, H query
heads, G kv heads, D head dim, C = conv_dim = H_r * hd channels of the recurrence, N state size.
Everything computes in float32 (the KV pool stores FP16 or FP8; see kv_pool.py), except
attention on CUDA, which runs in FP16 (`ATTENTION_DTYPE`): in float32 with grouped KV heads
PyTorch's SDPA falls back to its math kernel, which materialises the whole [H, T, S] score matrix
(8.7 GB per buffer at 8k tokens on the Llama-3.1-8B shape), while in FP16 the flash and
memory-efficient kernels apply. Keys and values are FP16 values already (the pool's dtype), so
only queries and the softmax output are rounded, the size of one more KV rounding (the
tolerance of spec/RUNNING.md section 5 allows for it). On CPU attention stays float32.
"""
import math

import torch
import torch.nn.functional as F


# attention compute dtype per device type (module docstring); a device type not listed: float32
ATTENTION_DTYPE = {"cuda": torch.float16}


def pin_tf32_off() -> None:
    """float32 matmuls and convolutions on CUDA in true float32: TF32 (10 mantissa bits) would
    move logits by far more than FP16 KV rounding, and the outputs are judged against a float64
    reference with a tolerance calibrated from that rounding (spec/RUNNING.md section 5)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def rms_norm(x, weight, eps: float = 1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def lora_linear(x, weight, lora=None):
    """x @ W^T, plus the adapter's low-rank delta (x @ A^T) @ B^T when one is active.
    (F.linear without bias is matmul(x, W.t()) inside ATen: the same values, one call.)"""
    y = F.linear(x, weight)
    if lora is not None:
        a, b = lora
        y = y + F.linear(F.linear(x, a), b)
    return y


MLP_CHUNK = 1024   # rows (tokens) per SwiGLU chunk of a long prefill


def _swiglu(x, gate, up, down):
    # silu and the product in place: the same values as (silu(x Wg^T) * x Wu^T) Wd^T, with one
    # [tokens, intermediate] buffer fewer alive
    h = F.silu(F.linear(x, gate), inplace=True)
    h.mul_(F.linear(x, up))
    return F.linear(h, down)


def swiglu(x, gate, up, down):
    """SwiGLU MLP. Every output row depends only on its input row, so a long prefill runs in
    about MLP_CHUNK-row chunks: the [tokens, intermediate] activations (the peak of a long
    prefill's memory) stay bounded by the chunk, not the prompt. The chunks are balanced (at
    least 2/3 of MLP_CHUNK rows each), never a few-row remainder that a BLAS would route to
    another kernel: the result equals the unchunked one (checked bit for bit on CPU)."""
    rows = x.reshape(-1, x.shape[-1])
    n = rows.shape[0]
    if n <= 2 * MLP_CHUNK:
        return _swiglu(x, gate, up, down)
    k = -(-n // MLP_CHUNK)
    bounds = [i * n // k for i in range(k + 1)]
    out = torch.empty(n, down.shape[0], dtype=x.dtype, device=x.device)
    for a, b in zip(bounds, bounds[1:]):
        out[a:b] = _swiglu(rows[a:b], gate, up, down)
    return out.view(*x.shape[:-1], down.shape[0])


def rope_tables(positions, head_dim: int, theta: float):
    """RoPE tables for apply_rope, of shape [B, T, 1, 2 * (D // 2)] for absolute positions [B, T]:
    cos = (c, c) and sin = (-s, s), with c, s the cos and sin of position * theta^(-2i/D). Built
    once per forward and shared by every layer, q and k."""
    rot = head_dim - head_dim % 2
    inv_freq = theta ** (-torch.arange(0, rot, 2, device=positions.device, dtype=torch.float32) / head_dim)
    angles = positions.to(torch.float32)[..., None] * inv_freq      # [B, T, D/2]
    c, s = torch.cos(angles), torch.sin(angles)
    return torch.cat([c, c], dim=-1)[:, :, None, :], torch.cat([-s, s], dim=-1)[:, :, None, :]


def apply_rope(x, cos, sin):
    """Rotate-half RoPE on x [B, T, heads, D]; with an odd D the last channel is not rotated.

    x * (c, c) + (x2, x1) * (-s, s) is (x1 c - x2 s, x2 c + x1 s) bit for bit (a + (-b) is
    a - b in IEEE arithmetic), in four tensor ops instead of nine."""
    rot = cos.shape[-1]
    half = rot // 2
    if rot == x.shape[-1]:
        return x * cos + torch.cat([x[..., half:], x[..., :half]], dim=-1) * sin
    xr = x[..., :rot]
    return torch.cat([xr * cos + torch.cat([xr[..., half:], xr[..., :half]], dim=-1) * sin, x[..., rot:]], dim=-1)


def causal_mask(q_pos, S: int):
    """[B, 1, T, S] visibility: key j is visible to a query at absolute position p iff j <= p.
    Padding keys (j >= length > p) are therefore never weighted; padding queries use p = 0."""
    return torch.arange(S, device=q_pos.device)[None, None, None, :] <= q_pos[:, None, :, None]


def gathered_attention(q, k_all, v_all, mask):
    """Causal attention of new queries over keys read through a page table.

    q: [B, T, H, D]; k_all, v_all: [B, S, G, D] (positions 0..S-1 of each sequence, padding
    beyond a sequence's length points at an all-zero scratch page); mask: causal_mask(), or None
    when every row computes exactly positions 0..T-1 with T == S (a whole prompt from position
    0, no padding): then the mask is the plain lower triangle and SDPA's is_causal applies it
    without materialising a [T, S] mask (and skips the blocks above the diagonal).
    """
    dtype = ATTENTION_DTYPE.get(q.device.type, q.dtype)
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2).to(dtype), k_all.transpose(1, 2).to(dtype), v_all.transpose(1, 2).to(dtype),
        attn_mask=mask, is_causal=mask is None, enable_gqa=q.shape[2] != k_all.shape[2])
    return out.transpose(1, 2).to(q.dtype)                             # [B, T, H, D]


def plain_causal(positions, S: int, all_valid: bool) -> bool:
    """Whether causal_mask() would be the plain lower triangle: no padding (the caller says so),
    T == S and every row at positions 0..T-1 (only then are the positions compared)."""
    T = positions.shape[1]
    if not all_valid or T != S or T == 1:
        return False
    return bool((positions == torch.arange(T, device=positions.device)).all())


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
