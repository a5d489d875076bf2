"""Traffic: the requests of a recorded trace as a prefix cache sees them (spec/trace-replay.md
sections 1 and 2: SIM-KEY-1, SIM-KEY-2, SIM-GEN-1). Stdlib only.

A traffic trace is the list of requests a server received (not the decision trace of
reference/trace.py). Each request is a `TrafficRequest`: its prompt length, how many tokens it
samples, and its prompt, either as token ids (a request file or a chat log, tokenized) or as the
hash ids of a hash-id trace (Mooncake's format: one id per block of B tokens). A hash-id prompt
is never expanded to tokens unless a profile compares tokens itself:

    chains = BlockChains(512)
    r = chains.request(0, "line 1", n=6758, output=500, hash_ids=[0, 1, 2, ...])
    r.page_keys(16)          # SIM-KEY-2: one key per complete prompt page of 16 tokens
    r.prompt_tokens()        # SIM-KEY-1: the n token ids, for the profiles that compare tokens
    r.sampled_tokens()       # SIM-GEN-1: its g sampled ids, new to the whole trace

Why keys instead of tokens: a 145M-token trace expanded to Python ints is gigabytes and a
hash per token; keyed per page it is one integer per page, computed by C-level ranges.
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from itertools import chain


class BlockChains:
    """SIM-KEY-2's `chain`: every distinct list of hash ids read from block 0 gets a number once,
    so the number of block j names the ids of blocks 0..j (the empty list is 0). One instance
    numbers one trace; its block size B is the trace's."""

    def __init__(self, block_size: int):
        self.B = block_size
        self._numbers: dict[tuple, int] = {}
        self._sampled = 0                  # sampled ids handed out so far (SIM-GEN-1)

    def chain(self, hash_ids) -> list[int]:
        """The chain number of each block of a request's ids (SIM-KEY-2)."""
        numbers, out, parent = self._numbers, [], 0
        for h in hash_ids:
            key = (parent, h)
            parent = numbers.get(key)
            if parent is None:
                parent = numbers[key] = len(numbers) + 1
            out.append(parent)
        return out

    def sampled_base(self, count: int) -> int:
        """The first of `count` new sampled ids (SIM-GEN-1): ids count down from -1 across the
        whole trace, so no two requests share one and none equals a prompt token (>= 0). They
        stay within 32 bits for any trace of fewer than 2^31 sampled tokens (the Edge-LLM
        profiles hash token histories as 32-bit ids)."""
        first = -1 - self._sampled
        self._sampled += count
        return first

    def request(self, index: int, source: str, n: int, output: int, hash_ids, timestamp=None) -> "TrafficRequest":
        """A hash-id request (SIM-KEY-1); the caller checked len(hash_ids) == ceil(n / B)."""
        return TrafficRequest(index, source, n, output, timestamp, hash_ids=list(hash_ids),
                              chain=self.chain(hash_ids), block_size=self.B, sampled_from=self.sampled_base(output))

    def token_request(self, index: int, source: str, tokens, output: int, timestamp=None, spans=(),
                      lora: str | None = None) -> "TrafficRequest":
        """A request given by its token ids (32-bit, as the Edge-LLM profiles hash them; and
        media spans and adapter, where a request file has them)."""
        tokens = tokens if isinstance(tokens, array) else array("i", tokens)
        return TrafficRequest(index, source, len(tokens), output, timestamp, tokens=tokens, spans=list(spans),
                              lora=lora, sampled_from=self.sampled_base(output))


@dataclass(eq=False)
class TrafficRequest:
    """One request of a trace. `index`: its place in the replay order; `source`: where the trace
    file holds it ("line 17", "$.requests[3]"); `n` prompt tokens; `output` the tokens it samples
    (g >= 1, SIM-GEN-1). Hash-id traffic sets `hash_ids` and `chain` (the chain number of each
    block, SIM-KEY-2), token traffic `tokens` (and `spans`, `lora` where a request file has
    them)."""
    index: int
    source: str
    n: int
    output: int
    timestamp: float | None = None
    hash_ids: list | None = None
    chain: list | None = None
    block_size: int = 0
    tokens: object = None
    spans: list = field(default_factory=list)
    lora: str | None = None
    sampled_from: int = -1

    @property
    def keyed(self) -> bool:
        """Whether the prompt is given by hash ids (its page keys come from `page_keys`)."""
        return self.chain is not None

    def page_keys(self, page_size: int) -> list[int]:
        """SIM-KEY-2: the key of each complete prompt page of `page_size` tokens, the pair
        (chain number of block j, end offset e - jB in it) written as one integer
        `number * (B + 1) + offset` (offset in 1..B, so distinct pairs give distinct integers).
        When the page size divides B the keys of a block are one C-level range."""
        B, P, numbers = self.block_size, page_size, self.chain
        width, count = B + 1, self.n // P
        if B % P == 0:
            keys = list(chain.from_iterable(range(c * width + P, c * width + B + 1, P) for c in numbers))
            del keys[count:]
            return keys
        return [numbers[(e - 1) // B] * width + e - (e - 1) // B * B for e in range(P, count * P + 1, P)]

    def new_key(self, page: int) -> int:
        """The key of a page that holds a sampled token (SIM-GEN-1): unique to this request and
        page, and negative, so never a prompt page's key."""
        return -1 - (self.index << 32) - page

    def prompt_tokens(self) -> list[int]:
        """SIM-KEY-1: the prompt's token ids, T(h, o) = h * B + o for a hash-id request (the
        last block cut to n); the given ids for token traffic."""
        if self.chain is None:
            return list(self.tokens)
        B = self.block_size
        tokens = list(chain.from_iterable(range(h * B, h * B + B) for h in self.hash_ids))
        del tokens[self.n:]
        return tokens

    def sampled_tokens(self, count: int | None = None) -> list[int]:
        """SIM-GEN-1: the first `count` (default all g) of the request's sampled ids."""
        count = self.output if count is None else count
        return list(range(self.sampled_from, self.sampled_from - count, -1))
