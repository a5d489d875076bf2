"""The two KV read paths of `KVPool.attend` (gpu_backend/kv_pool.py) say the same thing:

    gather  index_select of the token slots through the page table, then SDPA: the reference
            path and the default on every device
    paged   flex_attention reading the pool's pages inside the call, told by a block mask
            which pages each sequence may read (gpu_backend/paged_flex_attention.py)

On CPU here (flex_attention's eager form); the CUDA twin, with the compiled kernel, is
tests/gpu_backend/test_gpu.py::test_cuda_paged_attention_equals_gather (tools/gpu-check.sh).
The end-to-end tolerances are the backend tests' own: LOGIT_ATOL (test_model.py, logits against
a float64 forward) and LOGPROB_TOL (test_reuse.py, spec/RUNNING.md section 5).
"""
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_mask

import gpu_backend.paged_flex_attention as paged_flex_attention
from gpu_backend import BackendInputError
from gpu_backend.kv_pool import DEFAULT_ATTENTION, KVPool, KVRead, choose_path
from gpu_backend.paged_flex_attention import Q_BLOCK, block_mask, kv_block
from tests.gpu_backend.test_draft_head import EAGLE
from tests.gpu_backend.test_model import LOGIT_ATOL
from tests.gpu_backend.test_reuse import LOGPROB_TOL
from tests.helpers.backend import MEDIA, runtime, texts

# Attention outputs of the two paths differ by float32 rounding only (the paged sum runs over
# the keys in pool order, not position order): measured 2.4e-7 on the pool below.
FLOAT32_ROUNDING = 1e-5


def _pools(P, pages, G, D, device="cpu", seed=0):
    """A gather pool and a paged pool holding the same random KV (scratch page zero)."""
    g = torch.Generator().manual_seed(seed)
    data = torch.randn(2, (pages + 1) * P, G, D, generator=g).half().to(device)
    data[:, pages * P:] = 0
    pools = [KVPool(layers=1, pages=pages, P=P, kv_heads=G, head_dim=D, dtype=torch.float16, device=device,
                    attention=path) for path in ("gather", "paged")]
    for pool in pools:
        pool.kv[0] = data
    return pools


def _read(P, scratch, tables, starts, ends, device="cpu"):
    """The KVRead of rows computing positions [start, end) over `tables`, as the model runner builds it."""
    B, T, S = len(tables), max(e - s for s, e in zip(starts, ends)), max(ends)
    pos, valid = torch.zeros(B, T, dtype=torch.long), torch.zeros(B, T, dtype=torch.bool)
    slots = torch.full((B, S), scratch * P, dtype=torch.long)
    table = torch.full((B, max(map(len, tables))), scratch, dtype=torch.long)
    for b, (pages, st, e) in enumerate(zip(tables, starts, ends)):
        pos[b, :e - st], valid[b, :e - st] = torch.arange(st, e), True
        p, pt = torch.arange(e), torch.tensor(pages)
        slots[b, :e] = pt[p // P] * P + p % P
        table[b, :len(pages)] = pt
    all_valid = bool(valid.all())
    to = lambda t: t.to(device)
    return lambda: KVRead(to(slots), to(pos), to(valid), all_valid, to(table), to(torch.tensor(ends))), valid


def paths_differ_by(P, device="cpu") -> float:
    """Largest difference of the two paths' attention outputs over rows that resume after reused
    pages, start from 0, decode one position, hold more pages than they read, and share a page,
    with pages shuffled over the pool as after eviction churn (test_gpu.py runs it on CUDA)."""
    pages, G, D, H = 40, 2, 8, 4                                   # GQA: 2 query heads per KV head
    gather, paged = _pools(P, pages, G, D, device)
    order = list(range(pages))
    random.Random(P).shuffle(order)
    tables = [order[0:5], order[5:7], order[7:16], [order[0], order[16], order[17]]]
    starts = [2 * P + 2, 0, 8 * P + 1, P]                          # suffix, from 0, decode step, shared page 0
    ends = [4 * P + 3, 2 * P - 1, 8 * P + 2, 3 * P]
    read, valid = _read(P, pages, tables, starts, ends, device)
    q = torch.randn(len(tables), int(valid.sum(1).max()), H, D, generator=torch.Generator().manual_seed(1)).to(device)
    with torch.inference_mode():
        want, got = gather.attend(0, q, read()), paged.attend(0, q, read())
    return (got - want)[valid.to(device)].abs().max().item()


@pytest.mark.parametrize("P", [4, 16, 24])
def test_the_paged_path_equals_the_gather_path_on_scattered_pages(P):
    assert paths_differ_by(P) <= FLOAT32_ROUNDING, f"P={P}"


def test_a_key_block_is_whole_pages_of_at_least_16_slots():
    assert [kv_block(P) for P in (1, 4, 16, 24, 64, 128)] == [16, 16, 16, 48, 64, 128]


@pytest.mark.parametrize("P", [4, 24])
def test_the_block_mask_lists_every_key_block_a_query_sees(P):
    """The compiled kernel (CUDA) visits only the key blocks the block mask lists, while the
    eager form checked above evaluates the mask everywhere: so the lists are checked here, block
    by block, against the exact mask (300 queries: three query blocks, the last one partial)."""
    pages, T = 120, 300
    starts, ends = [0, 5], [T, 5 + T]
    need = -(-ends[1] // P)
    tables = [list(range(pages - 1, pages - 1 - need, -1)), random.Random(P).sample(range(pages), need)]
    read = _read(P, pages, tables, starts, ends)[0]()
    n_slots, block = (pages + 1) * P, kv_block(P)
    mask = block_mask(read, P, n_slots)
    seen = create_mask(mask.mask_mod, 2, 1, T, n_slots)[:, 0]                       # [B, T, N]
    seen = F.pad(seen, (0, -n_slots % block, 0, -T % Q_BLOCK))
    seen = seen.view(2, seen.shape[1] // Q_BLOCK, Q_BLOCK, -1, block).any(4).any(2)  # [B, q blocks, kv blocks]
    listed = mask.to_dense()[:, 0].bool()
    assert listed.shape == seen.shape and seen.any(-1).all()
    assert not (seen & ~listed).any(), "a block a query sees is not listed"
    own = torch.zeros_like(listed[:, 0])
    for b, table in enumerate(tables):
        own[b, torch.tensor(table) * P // block] = True
    assert not (listed & ~own[:, None]).any(), "a listed block holds none of the row's pages"


@pytest.fixture
def paged_calls(monkeypatch):
    """Counts the forwards' calls of the paged kernel: a comparison where it never ran proves nothing."""
    calls, attend = [], paged_flex_attention.attend
    monkeypatch.setattr(paged_flex_attention, "attend", lambda *a: calls.append(1) or attend(*a))
    return calls


def compare_runs(d, docs, paged_calls, device="cpu"):
    """Run `docs` on two fresh runtimes, gather and paged; the same tokens, facts and counters,
    log-probabilities within LOGPROB_TOL."""
    outs = {}
    paged_calls.clear()
    for path in ("gather", "paged"):
        rt = runtime(d, attention=path, device=device)
        assert rt.kv.path == path
        outs[path] = ([rt.infer(doc, MEDIA) for doc in docs], rt.profile()["context_cache"])
        assert bool(paged_calls) == (path == "paged")
    (gather, g_counts), (paged, p_counts) = outs["gather"], outs["paged"]
    g_counts.pop("planning_nanoseconds"), p_counts.pop("planning_nanoseconds")
    assert p_counts == g_counts
    for a_file, b_file in zip(gather, paged):
        for a, b in zip(a_file["responses"], b_file["responses"]):
            assert (b["output_ids"], b["finish_reason"], b["context_cache"]) == \
                (a["output_ids"], a["finish_reason"], a["context_cache"])
            for la, lb in zip(a.get("logprobs", []), b.get("logprobs", [])):
                assert abs(la[0]["logprob"] - lb[0]["logprob"]) <= LOGPROB_TOL
    return g_counts


@pytest.mark.parametrize("kind", ["attention", "hybrid"])
def test_a_runtime_on_the_paged_path_says_what_the_gather_path_says(engine, kind, paged_calls):
    d = engine(model=kind, vision=True, maxInputLen=60, maxKVCacheCapacity=80, maxBatchSize=2)
    doc = texts([{"type": "text", "text": "ab"}, {"type": "image", "image": "img_20x40.png"},
                 {"type": "text", "text": "and the rest of it"}])
    logits = [runtime(d, attention=path).teacher_forced_logits(doc, MEDIA, chunks=[9, 5]).numpy()
              for path in ("gather", "paged")]
    assert paged_calls, "the paged run read through the paged kernel"
    assert np.abs(logits[1] - logits[0]).max() <= LOGIT_ATOL
    assert (logits[1].argmax(-1) == logits[0].argmax(-1)).all()
    prefix = "The paged cache keeps this prefix"
    files = [texts(prefix, gen=4, num_logprobs=2, logit_bias={"257": -100}),
             texts(prefix + ", twice", "Another prompt", gen=6, num_logprobs=2, logit_bias={"257": -100},
                   batch_size=2)]
    counts = compare_runs(d, files, paged_calls)
    assert counts["reused_tokens"] > 0, "the comparison must cover reused pages"


def test_eagle_verify_windows_on_the_paged_path(engine, paged_calls):
    counts = compare_runs(engine(**EAGLE), [texts("abcdefghi", "hello worl", gen=8, batch_size=2),
                                             texts("abcdefghiXY", gen=6)], paged_calls)
    assert counts["reused_tokens"] > 0


def test_which_path_runs_and_what_the_paged_path_refuses(engine):
    """gather by default on CPU and CUDA (kv_pool.DEFAULT_ATTENTION says why); the paged path
    reads whole pages, so never poisoned ones, and FP16 pages only."""
    assert DEFAULT_ATTENTION == {"cpu": "gather", "cuda": "gather"}
    assert choose_path("auto", "cpu", torch.float16, False) == "gather"
    assert runtime(engine()).kv.path == "gather"
    for dtype, poison in ((torch.float16, True), (torch.float8_e4m3fn, False)):
        with pytest.raises(ValueError):
            choose_path("paged", "cpu", dtype, poison)
    with pytest.raises(BackendInputError):
        runtime(engine(), attention="paged", poison_fresh_pages=True)
    with pytest.raises(BackendInputError):
        runtime(engine(), attention="flash")
