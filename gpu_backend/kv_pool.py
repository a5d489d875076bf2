"""The paged KV pool on the device, and the one way attention reads it: `KVPool.attend`.

One tensor `kv` of shape [L_att, 2, (pages + 1) * P, G, D] in FP16 (or FP8 without reuse):
for attention layer l, `kv[l, 0]` holds keys and `kv[l, 1]` values, and token slot
`page * P + offset` holds position `offset` of that page. A sequence reaches its KV only
through its page table: a reused page is read where the table says, never copied into the
sequence. The extra last page is an all-zero scratch page: padding positions of a batch read
it, and nothing ever writes it.

`attend(layer, q, read)` reads a forward's keys and values along one of two paths, equal
within the backend's tests' tolerance (tests/gpu_backend/test_attention_paths.py):

    gather  index_select of the token slots [B, S] (K and V together, one copy into a float32
            workspace), then SDPA: the reference path, and the default on every device
            (`DEFAULT_ATTENTION`)
    paged   flex_attention over the whole pool with a block mask built from the page tables
            (paged_flex_attention.py): the kernel reads each sequence's pages where they lie,
            nothing is gathered first

With `poison=True` every newly allocated page is filled with NaN, so a read of KV that the
request never wrote (a stale or foreign page) turns the output into NaN (CR-OUT-3).
"""
from dataclasses import dataclass, field

import torch

from . import paged_flex_attention
from .layers import causal_mask, gathered_attention, plain_causal

FP8_MAX = 448.0
_RAW = {torch.float16: torch.int16, torch.float8_e4m3fn: torch.uint8}
PATHS = ("gather", "paged")
# The path `attend` takes by device type. gather everywhere: on CPU the paged path is flex_attention's
# unfused eager form, which scores every slot of the pool (the gather path scores only a
# sequence's own positions) and re-traces for new shapes; on CUDA the compiled paged kernel has
# not yet been measured against the gather path on a lent device (tools/gpu-check.sh runs the
# equality test; benchmarks/ would hold the ratio), so it is opt-in (`Runtime(attention="paged")`).
DEFAULT_ATTENTION = {"cpu": "gather", "cuda": "gather"}


def choose_path(requested: str, device, dtype, poison: bool) -> str:
    """The attention path of a pool: `requested` ("auto": DEFAULT_ATTENTION by device type), or
    ValueError naming why the paged path cannot serve this pool. The paged kernel loads whole
    pages and weighs the unwritten tail of a sequence's last page at 0, so a NaN there (a
    poisoned fresh page) would reach the output through 0 x NaN: poisoned pools read by gather,
    which reads exactly the written positions. It reads FP16 pages only (the reuse dtype, CR-SUP-2)."""
    if requested == "auto":
        return DEFAULT_ATTENTION.get(torch.device(device).type, "gather")
    if requested not in PATHS:
        raise ValueError(f"expected auto, {' or '.join(PATHS)}, got {requested!r}")
    if requested == "paged" and poison:
        raise ValueError("the paged path reads whole pages, so it cannot run on poisoned pages")
    if requested == "paged" and dtype != torch.float16:
        raise ValueError("the paged path reads FP16 pages only")
    return requested


@dataclass(eq=False)
class KVRead:
    """What one forward reads, built once and shared by every attention layer.

    slots: [B, S] token slots of key positions 0..S-1 of each sequence (padding: the scratch
    page), the gather path's input; pages: [B, n] page tables (padding: the scratch page) and
    lengths: [B] key positions each sequence reads, the paged path's (None: gather only);
    positions, valid: [B, T] the queries' absolute positions and which are real."""
    slots: torch.Tensor
    positions: torch.Tensor
    valid: torch.Tensor
    all_valid: bool
    pages: torch.Tensor | None = None
    lengths: torch.Tensor | None = None
    _memo: dict = field(default_factory=dict)

    def mask(self):
        """The gather path's causal mask (layers.causal_mask), or None for SDPA's is_causal."""
        if "mask" not in self._memo:
            S = self.slots.shape[1]
            plain = plain_causal(self.positions, S, self.all_valid)
            self._memo["mask"] = None if plain else causal_mask(torch.where(self.valid, self.positions, 0), S)
        return self._memo["mask"]


class KVPool:
    def __init__(self, *, layers: int, pages: int, P: int, kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device, poison: bool = False, attention: str = "auto"):
        self.P, self.pages, self.dtype, self.poison = P, pages, dtype, poison
        self.path = choose_path(attention, device, dtype, poison)
        self.scratch_page = pages
        self.kv = torch.zeros(layers, 2, (pages + 1) * P, kv_heads, head_dim, dtype=dtype, device=device)
        # index_copy/index_select/index_fill are not implemented for FP8: work on an integer view
        self.raw = self.kv.view(_RAW[dtype])
        self.nan_bits = torch.tensor(float("nan"), dtype=dtype).view(_RAW[dtype]).item()
        self._shape = (kv_heads, head_dim)
        self._ws_raw = self._ws_f32 = None   # gather workspaces, grown to the largest read

    @property
    def nbytes(self) -> int:
        return self.kv.numel() * self.kv.element_size()

    def _encode(self, x):
        if self.dtype == torch.float8_e4m3fn:
            x = x.clamp(-FP8_MAX, FP8_MAX)
        return x.to(self.dtype).view(_RAW[self.dtype])

    def slots(self, page_ids, device) -> torch.Tensor:
        """Token slots of whole pages: [len(page_ids) * P]."""
        pages = torch.as_tensor(page_ids, dtype=torch.long, device=device)
        return (pages[:, None] * self.P + torch.arange(self.P, device=device)).flatten()

    def on_allocate(self, page_ids) -> None:
        if self.poison:
            self.raw.index_fill_(2, self.slots(page_ids, self.kv.device), self.nan_bits)

    def write(self, layer: int, slots, k, v) -> None:
        """Store k, v [N, G, D] at token slots [N] (one encode and one copy for both)."""
        self.raw[layer].index_copy_(1, slots, self._encode(torch.stack([k, v])))

    def gather(self, layer: int, slots):
        """Read keys and values at token slots [B, S] -> two float32 tensors [B, S, G, D].

        The result lives in a workspace reused by the next gather (the caller consumes it first,
        as attention does layer by layer): a decode step then allocates nothing, where fresh
        [2, B*S, G, D] buffers every layer and step cost page faults on the order of the copy."""
        B, S = slots.shape
        size = 2 * B * S * self._shape[0] * self._shape[1]
        if self._ws_raw is None or self._ws_raw.numel() < size:
            self._ws_raw = torch.empty(size, dtype=self.raw.dtype, device=self.kv.device)
            self._ws_f32 = torch.empty(size, dtype=torch.float32, device=self.kv.device)
        raw = self._ws_raw[:size].view(2, B * S, *self._shape)
        out = self._ws_f32[:size].view(2, B * S, *self._shape)
        torch.index_select(self.raw[layer], 1, slots.reshape(-1), out=raw)
        out.copy_(raw.view(self.dtype))
        kv = out.view(2, B, S, *self._shape)
        return kv[0], kv[1]

    def attend(self, layer: int, q, read: KVRead):
        """Attention of queries q [B, T, H, D] over the keys and values `read` names, through
        this pool's path: [B, T, H, D]. Without page tables (a caller that holds token slots
        only) the gather path serves every pool."""
        if self.path == "paged" and read.pages is not None:
            return paged_flex_attention.attend(q, self.kv[layer, 0], self.kv[layer, 1], read, self.P)
        k_all, v_all = self.gather(layer, read.slots)                    # [B, S, G, D] through the page table
        return gathered_attention(q, k_all, v_all, read.mask())

    def read_positions(self, slots):
        """All layers' K and V at token slots [n] -> [L_att, 2, n, G, D] in the pool dtype."""
        return self.raw.index_select(2, slots).view(self.dtype)

    def write_positions(self, slots, data) -> None:
        """Inverse of read_positions."""
        self.raw.index_copy_(2, slots, data.view(_RAW[self.dtype]))
