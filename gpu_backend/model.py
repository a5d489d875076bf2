"""The bundled model: a small decoder whose layers are attention or gated linear recurrence.

    x = embed(tokens)  (media placeholders take their encoder embedding instead)
    for each layer:  x = x + mixer(rms_norm(x))     mixer: attention (GQA, RoPE) | recurrence
                     x = x + swiglu(rms_norm(x))
    logits = rms_norm(x) @ lm_head^T                 (lm_head = embed when tied)

Attention layers read and write KV only through the paged pool (kv_pool.py: `KVPool.attend`
reads it along the gather or the paged path); recurrent layers carry a per-sequence state and
convolution state that checkpoints snapshot (CR-HYB). LoRA adapters add low-rank deltas to the
mixer projections (q, k, v, o; recurrent in/out).
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from .kv_pool import KVRead
from .layers import apply_rope, causal_conv, lora_linear, pin_tf32_off, rms_norm, rope_tables, ssd_scan, swiglu

PATCH, FRAME = 16, 320
ATTN_PROJ = ("wq", "wk", "wv", "wo")
REC_PROJ = ("in_proj", "out_proj")


def resample_linear(src: torch.Tensor, size: int) -> torch.Tensor:
    """`src` [L] linearly resampled to `size` samples with half-pixel centres (spec/engine.md
    section 5): output i reads source position (i + 0.5) * L / size - 0.5, clamped at 0, between
    its two neighbours (the last one repeated). The position is computed exactly in integers,
    as ((2i + 1) L - size) / (2 size): torch's `interpolate` computes it in single precision, which
    beyond 2^19 samples (a 420 x 420 RGB image) puts it up to 1/32 of a sample off, 1/8 beyond
    2^21, and moves every feature of a large image. A runtime that resizes an image computes
    positions per axis (at most 16384 pixels), where single precision is exact to 1e-3 pixel."""
    L = src.numel()
    num = (2 * torch.arange(size, device=src.device, dtype=torch.int64) + 1) * L - size
    num = num.clamp(min=0)
    left = torch.div(num, 2 * size, rounding_mode="floor")
    frac = ((num - left * 2 * size).to(torch.float64) / (2 * size)).to(src.dtype)
    left = left.clamp(max=L - 1)
    right = (left + 1).clamp(max=L - 1)
    return src[left] * (1.0 - frac) + src[right] * frac


@dataclass
class ForwardBatch:
    """One prefill (T = longest suffix) or decode step (T = 1) over B sequences."""
    ids: torch.Tensor            # [B, T] token ids (padding: 0)
    positions: torch.Tensor      # [B, T] absolute positions (padding: 0)
    lengths: torch.Tensor        # [B] valid new positions per row
    valid: torch.Tensor          # [B, T] bool
    write_slots: torch.Tensor    # [sum(lengths)] KV slot of every valid position, row-major
    read_slots: torch.Tensor     # [B, S] KV slots of key positions 0..S-1 (padding: scratch page)
    rec_state: list              # per recurrent layer: [h [B, H, hd, N], conv [B, C, K]], updated in place
    media_index: torch.Tensor | None = None   # [M] flat indices into B*T of media positions
    media_embeds: torch.Tensor | None = None  # [M, hidden]
    lora: dict | None = None
    all_valid: bool = False      # every [B, T] position is valid (no padding): set by the caller
                                 # when it knows, so no boolean indexing (a device sync on CUDA)
    page_table: torch.Tensor | None = None   # [B, n] page ids (padding: scratch page), for the paged
    kv_lengths: torch.Tensor | None = None   # path; [B] key positions each row reads (kv_pool.KVRead)


def weight_shapes(cfg: dict) -> dict:
    """name -> shape of every tensor the model reads (model.safetensors)."""
    d, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg.get("vocab_size", 320)
    H, G, D = cfg["num_attention_heads"], cfg["num_kv_heads"], cfg["head_dim"]
    shapes = {"embed": (V, d), "final_norm": (d,)}
    if not cfg["tie_embeddings"]:
        shapes["lm_head"] = (V, d)
    for i, kind in enumerate(cfg["layer_kinds"]):
        p = f"layers.{i}"
        shapes.update({f"{p}.norm1": (d,), f"{p}.norm2": (d,), f"{p}.mlp.gate": (I, d), f"{p}.mlp.up": (I, d),
                       f"{p}.mlp.down": (d, I)})
        if kind == "attention":
            shapes.update({f"{p}.attn.wq": (H * D, d), f"{p}.attn.wk": (G * D, d), f"{p}.attn.wv": (G * D, d),
                           f"{p}.attn.wo": (d, H * D)})
        else:
            r = cfg["recurrent"]
            C, N, K, rH = r["conv_dim"], r["state_size"], r["conv_kernel"], r["num_heads"]
            shapes.update({f"{p}.rec.in_proj": (2 * C + 2 * N + rH, d), f"{p}.rec.conv_w": (C, K),
                           f"{p}.rec.conv_b": (C,), f"{p}.rec.dt_bias": (rH,), f"{p}.rec.A_log": (rH,),
                           f"{p}.rec.D": (rH,), f"{p}.rec.out_proj": (d, C)})
    if cfg.get("vision"):
        shapes.update({"vision.proj": (d, 3 * PATCH * PATCH), "vision.bias": (d,)})
    if cfg.get("audio"):
        shapes.update({"audio.proj": (d, FRAME), "audio.bias": (d,)})
    return shapes


class Model:
    def __init__(self, cfg: dict, weights_path: str, device: torch.device):
        self.cfg, self.device = cfg, device
        if device.type == "cuda":
            pin_tf32_off()
        w = load_file(weights_path, device=str(device))
        for name, shape in weight_shapes(cfg).items():
            if name not in w or tuple(w[name].shape) != shape:
                raise ValueError(f"tensor {name} is missing or not of shape {shape}")
        self.w = {k: v.to(torch.float32) for k, v in w.items()}
        self.kinds = cfg["layer_kinds"]
        self.H, self.G, self.D = cfg["num_attention_heads"], cfg["num_kv_heads"], cfg["head_dim"]
        self.theta = cfg["rope_theta"]
        rec = cfg.get("recurrent")
        if rec:
            self.rH, self.rD, self.N, self.K = rec["num_heads"], rec["head_dim"], rec["state_size"], rec["conv_kernel"]
            self.C = rec["conv_dim"]
        self.lm_head = self.w["embed"] if cfg["tie_embeddings"] else self.w["lm_head"]
        # ordinal of each layer within its kind: index into the KV pool / recurrent states
        self.ordinal, counts = [], {"attention": 0, "recurrent": 0}
        for kind in self.kinds:
            self.ordinal.append(counts[kind])
            counts[kind] += 1

    # ------------------------------------------------------------------ adapters and media

    def lora_shapes(self) -> dict:
        """name -> (out, in) of every projection an adapter may touch."""
        shapes = {}
        for i, kind in enumerate(self.kinds):
            names = ATTN_PROJ if kind == "attention" else REC_PROJ
            prefix = f"layers.{i}.{'attn' if kind == 'attention' else 'rec'}"
            for n in names:
                shapes[f"{prefix}.{n}"] = tuple(self.w[f"{prefix}.{n}"].shape)
        return shapes

    def encode_media(self, modality: str, data, count: int | None = None) -> torch.Tensor:
        """One embedding per placeholder: [count, hidden]. An engine with a media counter
        (hf tokenizers) gives an image `count` embeddings, whatever its size: see _counted_image."""
        if modality == "image" and count is not None and (self.cfg.get("vision") or {}).get("counter"):
            return self._counted_image(data, count)
        if modality == "image":
            img = torch.as_tensor(data, device=self.device).to(torch.float32) / 255.0 - 0.5  # [H, W, 3]
            H, W, _ = img.shape
            gh, gw = -(-H // PATCH), -(-W // PATCH)
            img = F.pad(img, (0, 0, 0, gw * PATCH - W, 0, gh * PATCH - H))
            patches = img.view(gh, PATCH, gw, PATCH, 3).permute(0, 2, 1, 3, 4).reshape(gh * gw, -1)  # row-major
            return patches @ self.w["vision.proj"].T + self.w["vision.bias"]
        samples = torch.as_tensor(data, device=self.device).to(torch.float32)
        count = -(-samples.numel() // FRAME)
        frames = F.pad(samples, (0, count * FRAME - samples.numel())).view(count, FRAME)
        return frames @ self.w["audio.proj"].T + self.w["audio.bias"]

    def _counted_image(self, data, count: int) -> torch.Tensor:
        """`count` embeddings of an image: its row-major RGB samples, linearly resampled to
        `count` feature vectors of one 16x16 patch's size, through the same projection. Every
        placeholder depends on a different part of the image, so a cache that confuses two
        images gives different KV (CR-ID-4) at any count the runtime's counter chooses."""
        img = torch.as_tensor(data, device=self.device).to(torch.float32) / 255.0 - 0.5      # [H, W, 3]
        width = 3 * PATCH * PATCH
        feats = resample_linear(img.reshape(-1), count * width)
        return feats.view(count, width) @ self.w["vision.proj"].T + self.w["vision.bias"]

    # ------------------------------------------------------------------ forward

    def new_recurrent_state(self, B: int) -> list:
        return [[torch.zeros(B, self.rH, self.rD, self.N, device=self.device),
                 torch.zeros(B, self.C, self.K, device=self.device)]
                for kind in self.kinds if kind == "recurrent"]

    def forward(self, fb: ForwardBatch, kv_pool) -> torch.Tensor:
        """Run all layers over the new positions; returns the final-normed hidden [B, T, hidden]."""
        w = self.w
        x = w["embed"][fb.ids]                                              # [B, T, hidden]
        if fb.media_index is not None:
            x = x.reshape(-1, x.shape[-1]).index_copy(0, fb.media_index, fb.media_embeds).view_as(x)
        cos = sin = read = None
        if any(k == "attention" for k in self.kinds):
            cos, sin = rope_tables(fb.positions, self.D, self.theta)
            read = KVRead(fb.read_slots, fb.positions, fb.valid, fb.all_valid, fb.page_table, fb.kv_lengths)
        for i, kind in enumerate(self.kinds):
            p = f"layers.{i}"
            h = rms_norm(x, w[f"{p}.norm1"])
            if kind == "attention":
                h = self._attention(h, fb, kv_pool, self.ordinal[i], f"{p}.attn", cos, sin, read)
            else:
                h = self._recurrence(h, fb, fb.rec_state[self.ordinal[i]], f"{p}.rec")
            x = x + h
            x = x + swiglu(rms_norm(x, w[f"{p}.norm2"]), w[f"{p}.mlp.gate"], w[f"{p}.mlp.up"], w[f"{p}.mlp.down"])
        return rms_norm(x, w["final_norm"])

    def logits(self, hidden) -> torch.Tensor:
        return hidden @ self.lm_head.T

    def _lora(self, fb, name):
        return None if fb.lora is None else fb.lora.get(name)

    def _attention(self, h, fb, kv_pool, layer, p, cos, sin, read):
        B, T, _ = h.shape
        w, H, G, D = self.w, self.H, self.G, self.D
        q = lora_linear(h, w[f"{p}.wq"], self._lora(fb, f"{p}.wq")).view(B, T, H, D)
        k = lora_linear(h, w[f"{p}.wk"], self._lora(fb, f"{p}.wk")).view(B, T, G, D)
        v = lora_linear(h, w[f"{p}.wv"], self._lora(fb, f"{p}.wv")).view(B, T, G, D)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if fb.all_valid:                                                    # only real positions
            kv_pool.write(layer, fb.write_slots, k.reshape(B * T, G, D), v.reshape(B * T, G, D))
        else:
            kv_pool.write(layer, fb.write_slots, k[fb.valid], v[fb.valid])
        o = self._attend(q, k, v, kv_pool, layer, read).reshape(B, T, H * D)
        return lora_linear(o, w[f"{p}.wo"], self._lora(fb, f"{p}.wo"))

    def _attend(self, q, k, v, kv_pool, layer, read):
        """q [B, T, H, D] over every position its page table holds (the reused prefix and this
        forward's own keys, just written): [B, T, H, D]. k and v are this forward's alone."""
        return kv_pool.attend(layer, q, read)

    def _recurrence(self, h, fb, state, p):
        B, T, _ = h.shape
        w, C, N, rH, rD = self.w, self.C, self.N, self.rH, self.rD
        proj = lora_linear(h, w[f"{p}.in_proj"], self._lora(fb, f"{p}.in_proj"))
        z, xr, Bm, Cm, dt = proj.split([C, C, N, N, rH], dim=-1)
        xr, state[1] = causal_conv(xr, state[1], w[f"{p}.conv_w"], w[f"{p}.conv_b"], fb.lengths)
        xr = F.silu(xr)
        dt = F.softplus(dt + w[f"{p}.dt_bias"]) * fb.valid[..., None]      # padding: dt = 0, state kept
        A = -torch.exp(w[f"{p}.A_log"])
        y, state[0] = ssd_scan(xr.view(B, T, rH, rD), dt, A, Bm, Cm, state[0])
        y = y + w[f"{p}.D"][:, None] * xr.view(B, T, rH, rD)
        y = y.reshape(B, T, C) * F.silu(z)
        return lora_linear(y, w[f"{p}.out_proj"], self._lora(fb, f"{p}.out_proj"))
