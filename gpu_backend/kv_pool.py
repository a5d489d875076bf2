"""The paged KV pool on the device.

One tensor `kv` of shape [L_att, 2, (pages + 1) * P, G, D] in FP16 (or FP8 without reuse):
for attention layer l, `kv[l, 0]` holds keys and `kv[l, 1]` values, and token slot
`page * P + offset` holds position `offset` of that page. A sequence reaches its KV only
through its page table, so prefill and decode gather one index_select per layer (K and V
together). The extra last page is an all-zero scratch page: padding positions of a batch read
it, and nothing ever writes it.

With `poison=True` every newly allocated page is filled with NaN, so a read of KV that the
request never wrote (a stale or foreign page) turns the output into NaN (CR-OUT-3).
"""
import torch

FP8_MAX = 448.0
_RAW = {torch.float16: torch.int16, torch.float8_e4m3fn: torch.uint8}


class KVPool:
    def __init__(self, *, layers: int, pages: int, P: int, kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device, poison: bool = False):
        self.P, self.pages, self.dtype, self.poison = P, pages, dtype, poison
        self.scratch_page = pages
        self.kv = torch.zeros(layers, 2, (pages + 1) * P, kv_heads, head_dim, dtype=dtype, device=device)
        # index_copy/index_select/index_fill are not implemented for FP8: work on an integer view
        self.raw = self.kv.view(_RAW[dtype])
        self.nan_bits = torch.tensor(float("nan"), dtype=dtype).view(_RAW[dtype]).item()

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
        """Store k, v [N, G, D] at token slots [N]."""
        self.raw[layer, 0].index_copy_(0, slots, self._encode(k))
        self.raw[layer, 1].index_copy_(0, slots, self._encode(v))

    def gather(self, layer: int, slots):
        """Read keys and values at token slots [B, S] -> two float32 tensors [B, S, G, D]."""
        B, S = slots.shape
        kv = self.raw[layer].index_select(1, slots.reshape(-1)).view(self.dtype)  # [2, B*S, G, D]
        kv = kv.to(torch.float32).view(2, B, S, *kv.shape[2:])
        return kv[0], kv[1]

    def read_positions(self, slots):
        """All layers' K and V at token slots [n] -> [L_att, 2, n, G, D] in the pool dtype."""
        return self.raw.index_select(2, slots).view(self.dtype)

    def write_positions(self, slots, data) -> None:
        """Inverse of read_positions."""
        self.raw.index_copy_(2, slots, data.view(_RAW[self.dtype]))
