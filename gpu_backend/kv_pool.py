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

    def read_positions(self, slots):
        """All layers' K and V at token slots [n] -> [L_att, 2, n, G, D] in the pool dtype."""
        return self.raw.index_select(2, slots).view(self.dtype)

    def write_positions(self, slots, data) -> None:
        """Inverse of read_positions."""
        self.raw.index_copy_(2, slots, data.view(_RAW[self.dtype]))
