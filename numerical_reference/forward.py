"""The float64 NumPy forward of the reference layout (spec/engine.md section 5).

    x = embed(ids), media placeholders replaced by their encoder rows
    per layer i:  x += mixer_i(rmsnorm(x, norm1))     attention (GQA, RoPE) | gated recurrence
                  x += swiglu(rmsnorm(x, norm2))
    logits = rmsnorm(x, final_norm) @ lm_head^T       (lm_head = embed when tied)

Every position of a sequence is computed at once from position 0 (teacher forcing): full causal
attention, and the recurrence in its closed form y_t = sum_{s<=t} exp(cum_t - cum_s) dt_s
(C_t . B_s) x_s + D x_t, evaluated in blocks of rows. Keys and values are rounded to the
engine's KV dtype before attention (`kv_dtype`: "fp16", "fp8", or None for exact float64),
because that rounding is part of the engine's numerics: a runtime stores them so. The exact run
measures how much that rounding moves the answer (the calibration of spec/RUNNING.md section 5).

The scorer reads only the positions from the input's last on (`hidden(..., first=)`), so the
last layer computes its mixer and MLP at those positions alone. Their keys, values and
recurrence inputs still come from every position before them, and the rows are those the whole
forward gives (tests/conformance/test_numerics.py checks it). On an engine of two layers that
halves the work of a long prompt.

It shares no code with gpu_backend: the two are written from the spec independently, and the
kit's tests compare them.
"""
from __future__ import annotations

import math

import numpy as np

ROW_BLOCK = 256          # query rows per block of attention and recurrence (bounds the n x n buffers)


def rmsnorm(x, w, eps: float = 1e-6):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def softplus(x):
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


FP8_MAX = 448.0


def round_fp8_e4m3(x: np.ndarray) -> np.ndarray:
    """Round to the nearest float8 e4m3fn value (ties to even), saturating at +-448 (what a
    clamp then a cast gives): 3 mantissa bits, normal exponents from -6, subnormals spaced 2^-9."""
    x = np.clip(x, -FP8_MAX, FP8_MAX)
    mag = np.abs(x)
    exp = np.floor(np.log2(np.where(mag > 0, mag, 1.0)))
    step = np.exp2(np.maximum(exp, -6.0) - 3.0)
    return np.round(x / step) * step           # np.round rounds half to even


def round_kv(x: np.ndarray, kv_dtype: str | None) -> np.ndarray:
    if kv_dtype == "fp16":
        return x.astype(np.float16).astype(np.float64)
    if kv_dtype == "fp8":
        return round_fp8_e4m3(x)
    return x


class Forward:
    """The model of one engine (`layout.Weights`) with an optional LoRA adapter."""

    def __init__(self, weights, lora: dict | None = None):
        self.w, self.cfg, self.lora = weights.tensors, weights.cfg, lora or {}

    def proj(self, name: str, x):
        y = x @ self.w[name].T
        if name in self.lora:
            a, b = self.lora[name]
            y = y + (x @ a.T) @ b.T
        return y

    def hidden(self, ids, media=(), kv_dtype: str | None = "fp16", first: int = 0):
        """Final-normed hidden states [n - first, d] of positions first..n-1 (default every
        position). `media`: [(start, rows [k, d])]."""
        cfg, w = self.cfg, self.w
        x = w["embed"][np.asarray(ids, dtype=np.int64)].copy()                      # [n, d]
        for start, rows in media:
            x[start:start + len(rows)] = rows
        last = len(cfg["layer_kinds"]) - 1
        for i, kind in enumerate(cfg["layer_kinds"]):
            at = first if i == last else 0           # the first position this layer's output is needed at
            h = rmsnorm(x, w[f"layers.{i}.norm1"])
            mixed = self.attention(i, h, kv_dtype, at) if kind == "attention" else self.recurrence(i, h, at)
            x = x[at:] + mixed
            h = rmsnorm(x, w[f"layers.{i}.norm2"])
            gate, up = h @ w[f"layers.{i}.mlp.gate"].T, h @ w[f"layers.{i}.mlp.up"].T
            x = x + (silu(gate) * up) @ w[f"layers.{i}.mlp.down"].T
        return rmsnorm(x, w["final_norm"])

    def logits(self, hidden_rows):
        head = self.w["embed"] if self.cfg.get("tie_embeddings", True) else self.w["lm_head"]
        return hidden_rows @ head.T

    def attention(self, i: int, h, kv_dtype, at: int = 0):
        """The attention output [n - at, d] at positions at..n-1 of `h` [n, d]."""
        cfg = self.cfg
        n, H, G, D = len(h), cfg["num_attention_heads"], cfg["num_kv_heads"], cfg["head_dim"]
        R, theta, p = H // G, cfg.get("rope_theta", 10000.0), f"layers.{i}.attn"
        q = rope(self.proj(f"{p}.wq", h[at:]).reshape(n - at, H, D), theta, at) / math.sqrt(D)
        k = round_kv(rope(self.proj(f"{p}.wk", h).reshape(n, G, D), theta), kv_dtype)
        v = round_kv(self.proj(f"{p}.wv", h).reshape(n, G, D), kv_dtype)
        # GQA: query head g * R + r reads KV group g, so the query heads are grouped by their group
        q = q.reshape(n - at, G, R, D).transpose(1, 2, 0, 3)                          # [G, R, rows, D]
        k = k.transpose(1, 2, 0)[:, None]                                           # [G, 1, D, n]
        v = v.transpose(1, 0, 2)[:, None]                                           # [G, 1, n, D]
        out = np.empty((G, R, n - at, D))
        for lo in range(at, n, ROW_BLOCK):
            hi = min(n, lo + ROW_BLOCK)
            s = q[:, :, lo - at:hi - at] @ k[..., :hi]                               # [G, R, rows, hi]
            s[..., lo:] += _above_diagonal(hi - lo)                                  # causal: keys after the row
            s -= s.max(-1, keepdims=True)
            np.exp(s, out=s)
            out[:, :, lo - at:hi - at] = (s @ v[:, :, :hi]) / s.sum(-1, keepdims=True)
        return self.proj(f"{p}.wo", out.transpose(2, 0, 1, 3).reshape(n - at, H * D))

    def recurrence(self, i: int, h, at: int = 0):
        """The recurrent mixer's output [n - at, d] at positions at..n-1 of `h` [n, d]."""
        r, w = self.cfg["recurrent"], self.w
        C, N, K, rH = r["conv_dim"], r["state_size"], r["conv_kernel"], r["num_heads"]
        hd = C // rH
        p = f"layers.{i}.rec"
        n = len(h)
        proj = self.proj(f"{p}.in_proj", h)
        z, xr, Bm, Cm, dt = np.split(proj, np.cumsum([C, C, N, N]), axis=-1)
        # causal depthwise convolution over the last K inputs, oldest first, zeros before position 0
        padded = np.concatenate([np.zeros((K - 1, C)), xr], axis=0)
        conv = sum(padded[j:j + n] * w[f"{p}.conv_w"][:, j] for j in range(K)) + w[f"{p}.conv_b"]
        xc = silu(conv).reshape(n, rH, hd)
        dt = softplus(dt + w[f"{p}.dt_bias"])                                       # [n, rH]
        A = -np.exp(w[f"{p}.A_log"])
        cum = np.cumsum(dt * A, axis=0)                                             # [n, rH], decreasing
        xdt = xc * dt[:, :, None]                                                   # [n, rH, hd]
        y = np.empty((n - at, rH, hd))
        for lo in range(at, n, ROW_BLOCK):
            hi = min(n, lo + ROW_BLOCK)
            seg = cum[lo:hi, None, :] - cum[None, :hi, :]                           # [rows, hi, rH] <= 0 below
            causal = (np.arange(hi)[None, :] <= np.arange(lo, hi)[:, None])[:, :, None]
            decay = np.where(causal, np.exp(np.minimum(seg, 0.0)), 0.0)
            scores = Cm[lo:hi] @ Bm[:hi].T                                          # [rows, hi]
            weight = scores[None] * decay.transpose(2, 0, 1)                         # [rH, rows, hi]
            y[lo - at:hi - at] = (weight @ xdt[:hi].transpose(1, 0, 2)).transpose(1, 0, 2)
        y = y + w[f"{p}.D"][None, :, None] * xc[at:]
        return self.proj(f"{p}.out_proj", y.reshape(n - at, C) * silu(z[at:]))


_CAUSAL: dict = {}


def _above_diagonal(size: int) -> np.ndarray:
    """[size, size]: -inf where the column is after the row, 0 elsewhere (one per block size)."""
    if size not in _CAUSAL:
        _CAUSAL[size] = np.triu(np.full((size, size), -np.inf), 1)
    return _CAUSAL[size]


def rope(t, theta: float, start: int = 0):
    """Rotate-half RoPE at positions start..start+n-1 over the first 2 * (D // 2) channels; with an
    odd D the last channel is not rotated. Frequencies theta^(-2i/D)."""
    n, _, D = t.shape
    half = D // 2
    inv = theta ** (-np.arange(0, 2 * half, 2) / D)
    ang = np.arange(start, start + n)[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = t[..., :half], t[..., half:2 * half]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin, t[..., 2 * half:]], axis=-1)


def image_rows(weights, rgb: np.ndarray, count: int | None = None):
    """Encoder rows of an image (RGB uint8 [H, W, 3]). Without a counter: one row per 16x16 patch,
    row-major, the image zero-padded (after centring) to whole patches. With a counter (an engine
    whose `vision.counter` counts its images, spec/media-tokens.md): `count` rows from the image's
    row-major samples linearly resampled (half-pixel centres, edges clamped) to `count` patches."""
    w = weights.tensors
    img = rgb.astype(np.float64) / 255.0 - 0.5
    if count is not None and (weights.cfg.get("vision") or {}).get("counter"):
        flat = img.reshape(-1)
        feats = _resample_linear(flat, count * 768).reshape(count, 768)
        return feats @ w["vision.proj"].T + w["vision.bias"]
    H, W, _ = img.shape
    gh, gw = -(-H // 16), -(-W // 16)
    pad = np.zeros((gh * 16, gw * 16, 3))
    pad[:H, :W] = img
    patches = pad.reshape(gh, 16, gw, 16, 3).transpose(0, 2, 1, 3, 4).reshape(gh * gw, -1)
    return patches @ w["vision.proj"].T + w["vision.bias"]


def _resample_linear(src: np.ndarray, size: int) -> np.ndarray:
    """Linear resampling with half-pixel centres: output i reads source (i + 0.5) * L / size - 0.5,
    clamped below at 0, between its two neighbours (the last one repeated at the end)."""
    L = len(src)
    pos = np.maximum((np.arange(size) + 0.5) * (L / size) - 0.5, 0.0)
    left = np.minimum(np.floor(pos).astype(np.int64), L - 1)
    right = np.minimum(left + 1, L - 1)
    frac = pos - left
    return src[left] * (1.0 - frac) + src[right] * frac


def audio_rows(weights, samples: np.ndarray):
    """One row per 320-sample frame, the last frame zero-padded."""
    w = weights.tensors
    s = samples.astype(np.float64)
    count = -(-len(s) // 320)
    frames = np.zeros(count * 320)
    frames[:len(s)] = s
    return frames.reshape(count, 320) @ w["audio.proj"].T + w["audio.bias"]
