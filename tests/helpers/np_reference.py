"""An independent float64 NumPy forward of the bundled model, for tests only.

It reads the same safetensors weights and computes every position sequentially the plainest
way: full causal attention with GQA (keys and values rounded to FP16, as the runtime stores
them), and the recurrence one token at a time (convolution window, h = a h + dt x B^T,
y = h C + D x). Sharing no code with gpu_backend.model/layers is the point.
"""
import math

import numpy as np
from safetensors.numpy import load_file


def silu(x):
    return x / (1.0 + np.exp(-x))


def softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


def rmsnorm(x, w, eps=1e-6):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


class NumpyModel:
    def __init__(self, cfg, weights_path, lora_path=None):
        self.cfg = cfg
        self.w = {k: v.astype(np.float64) for k, v in load_file(weights_path).items()}
        self.lora = {} if lora_path is None else {k: v.astype(np.float64) for k, v in load_file(lora_path).items()}

    def proj(self, name, x):
        y = x @ self.w[name].T
        if f"{name}.lora_A" in self.lora:
            y = y + x @ self.lora[f"{name}.lora_A"].T @ self.lora[f"{name}.lora_B"].T
        return y

    def media_rows(self, modality, data):
        if modality == "image":
            img = data.astype(np.float64) / 255.0 - 0.5
            H, W, _ = img.shape
            gh, gw = math.ceil(H / 16), math.ceil(W / 16)
            pad = np.zeros((gh * 16, gw * 16, 3))
            pad[:H, :W] = img
            rows = [pad[i * 16:(i + 1) * 16, j * 16:(j + 1) * 16].reshape(-1) for i in range(gh) for j in range(gw)]
            return np.stack(rows) @ self.w["vision.proj"].T + self.w["vision.bias"]
        s = data.astype(np.float64)
        count = math.ceil(len(s) / 320)
        frames = np.zeros(count * 320)
        frames[:len(s)] = s
        return frames.reshape(count, 320) @ self.w["audio.proj"].T + self.w["audio.bias"]

    def logits(self, ids, media=()):
        """ids: list of token ids; media: [(start, modality, decoded data)]. Returns [n, V]."""
        cfg, w = self.cfg, self.w
        x = w["embed"][np.asarray(ids)]
        for start, modality, data in media:
            rows = self.media_rows(modality, data)
            x[start:start + len(rows)] = rows
        for i, kind in enumerate(cfg["layer_kinds"]):
            h = rmsnorm(x, w[f"layers.{i}.norm1"])
            x = x + (self.attention(i, h) if kind == "attention" else self.recurrence(i, h))
            h = rmsnorm(x, w[f"layers.{i}.norm2"])
            g, u = h @ w[f"layers.{i}.mlp.gate"].T, h @ w[f"layers.{i}.mlp.up"].T
            x = x + (silu(g) * u) @ w[f"layers.{i}.mlp.down"].T
        head = w["embed"] if cfg["tie_embeddings"] else w["lm_head"]
        return rmsnorm(x, w["final_norm"]) @ head.T

    def attention(self, i, h):
        cfg = self.cfg
        n, H, G, D = len(h), cfg["num_attention_heads"], cfg["num_kv_heads"], cfg["head_dim"]
        p = f"layers.{i}.attn"
        q = self.proj(f"{p}.wq", h).reshape(n, H, D)
        k = self.proj(f"{p}.wk", h).reshape(n, G, D)
        v = self.proj(f"{p}.wv", h).reshape(n, G, D)
        half = D // 2
        inv = cfg["rope_theta"] ** (-np.arange(0, 2 * half, 2) / D)
        ang = np.arange(n)[:, None] * inv[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

        def rope(t):                       # rotate-half over the first 2 * (D // 2) channels
            a, b = t[..., :half], t[..., half:2 * half]
            return np.concatenate([a * cos - b * sin, b * cos + a * sin, t[..., 2 * half:]], axis=-1)
        q, k = rope(q), rope(k)
        k = k.astype(np.float16).astype(np.float64)      # the pool stores FP16 K and V
        v = v.astype(np.float16).astype(np.float64)
        out = np.zeros((n, H, D))
        for head in range(H):
            g = head // (H // G)
            s = q[:, head] @ k[:, g].T / math.sqrt(D)
            s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
            s = np.exp(s - s.max(-1, keepdims=True))
            out[:, head] = (s / s.sum(-1, keepdims=True)) @ v[:, g]
        return self.proj(f"{p}.wo", out.reshape(n, H * D))

    def recurrence(self, i, h):
        r, w = self.cfg["recurrent"], self.w
        C, N, K, Hr, hd = r["conv_dim"], r["state_size"], r["conv_kernel"], r["num_heads"], r["head_dim"]
        p = f"layers.{i}.rec"
        proj = self.proj(f"{p}.in_proj", h)
        z, xr, Bm, Cm, dt = np.split(proj, np.cumsum([C, C, N, N]), axis=-1)
        A = -np.exp(w[f"{p}.A_log"])
        window = np.zeros((K, C))
        state = np.zeros((Hr, hd, N))
        ys = []
        for t in range(len(h)):
            window = np.concatenate([window[1:], xr[t][None]], axis=0)            # last K inputs
            xc = silu((window * w[f"{p}.conv_w"].T).sum(0) + w[f"{p}.conv_b"])
            d = softplus(dt[t] + w[f"{p}.dt_bias"])                               # [Hr]
            xh = xc.reshape(Hr, hd)
            state = np.exp(d * A)[:, None, None] * state + (d[:, None] * xh)[:, :, None] * Bm[t][None, None, :]
            y = state @ Cm[t] + w[f"{p}.D"][:, None] * xh
            ys.append(y.reshape(C) * silu(z[t]))
        return self.proj(f"{p}.out_proj", np.stack(ys))
