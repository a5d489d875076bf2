"""The speed edits in gpu_backend/ change no value: each fast path is compared, bit for
bit on CPU, with the straightforward formulation it replaced."""
import torch
import torch.nn.functional as F

from gpu_backend.kv_pool import KVPool
from gpu_backend.layers import (MLP_CHUNK, apply_rope, causal_mask, lora_linear, gathered_attention, plain_causal,
                                rope_tables, swiglu)


def _old_rope(x, positions, theta=1e4):
    D = x.shape[-1]
    rot = D - D % 2
    inv_freq = theta ** (-torch.arange(0, rot, 2, dtype=torch.float32) / D)
    angles = positions.to(torch.float32)[..., None] * inv_freq
    c, s = torch.cos(angles)[:, :, None, :], torch.sin(angles)[:, :, None, :]
    half = rot // 2
    x1, x2, rest = x[..., :half], x[..., half:2 * half], x[..., 2 * half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s, rest], dim=-1)


def test_rope_is_bitwise_the_rotate_half_formula():
    torch.manual_seed(0)
    for D in (1, 7, 15, 16, 64):
        pos = torch.randint(0, 10000, (3, 9))
        x = torch.randn(3, 9, 4, D) * 4
        assert torch.equal(apply_rope(x, *rope_tables(pos, D, 1e4)), _old_rope(x, pos))


def test_chunked_swiglu_equals_the_whole_prompt():
    torch.manual_seed(0)
    d, inter = 64, 128
    g, u, dn = torch.randn(inter, d), torch.randn(inter, d), torch.randn(d, inter)
    for n in (5, 2 * MLP_CHUNK, 2 * MLP_CHUNK + 1, 3 * MLP_CHUNK + 7, 4160):
        x = torch.randn(1, n, d)
        assert torch.equal(swiglu(x, g, u, dn), (F.silu(x @ g.T) * (x @ u.T)) @ dn.T), n


def test_linear_and_lora_match_matmul():
    torch.manual_seed(0)
    x, w, a, b = torch.randn(2, 5, 32), torch.randn(48, 32), torch.randn(4, 32), torch.randn(48, 4)
    assert torch.equal(lora_linear(x, w), x @ w.T)
    assert torch.equal(lora_linear(x, w, (a, b)), x @ w.T + (x @ a.T) @ b.T)


def test_is_causal_path_equals_the_explicit_mask():
    torch.manual_seed(0)
    T = 40
    pos = torch.arange(T)[None]
    valid = torch.ones(1, T, dtype=torch.bool)
    assert plain_causal(pos, T, True)
    assert not plain_causal(pos, T, False) and not plain_causal(pos + 1, T + 1, True)
    assert not plain_causal(torch.tensor([[0, 1, 2, 2]]), 4, True)
    q, k, v = torch.randn(1, T, 4, 16), torch.randn(1, T, 2, 16), torch.randn(1, T, 2, 16)
    mask = causal_mask(torch.where(valid, pos, 0), T)
    assert torch.equal(gathered_attention(q, k, v, None), gathered_attention(q, k, v, mask))


def test_gather_workspace_returns_fresh_values_every_call():
    torch.manual_seed(0)
    for dtype in (torch.float16, torch.float8_e4m3fn):
        pool = KVPool(layers=2, pages=6, P=4, kv_heads=2, head_dim=3, dtype=dtype, device="cpu")
        pool.write(0, torch.arange(16), torch.randn(16, 2, 3), torch.randn(16, 2, 3))
        pool.write(1, torch.arange(16), torch.randn(16, 2, 3), torch.randn(16, 2, 3))
        for layer, slots in ((0, [[3, 1, 2, 0, 9, 9]]), (1, [[5, 6], [24, 24]]), (0, [[7]])):
            slots = torch.tensor(slots)
            k, v = pool.gather(layer, slots)
            ref = pool.raw[layer].index_select(1, slots.reshape(-1)).view(dtype).to(torch.float32)
            ref = ref.view(2, *slots.shape, 2, 3)
            assert torch.equal(k, ref[0]) and torch.equal(v, ref[1])
