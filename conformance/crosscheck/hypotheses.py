"""What the `sglang-radix` oracle would have to do differently for a stream to agree with SGLang:
the classification's hypotheses, never the oracle (reference/peer_sglang.py is the oracle, and
its fixes go there, proven by the cross-check).

Each cause is one switch on a copy of the oracle's radix cache, read from SGLang 0.5.23's
source (docs/crosscheck.md cites the lines):

- `split_prompt` (a): a finished request's node is split at the page-aligned prompt length
  (radix_cache.py `_insert_cache(split_prompt=True)`), so eviction can take the generated tokens
  and keep the prompt;
- `shortfall` (b): a request that needs m slots while f are free evicts m - f tokens, not m
  (allocator/base.py `evict_to_free_tokens`: `shortfall = num_tokens - self.available_size()`);
- `paged_decode` (c): with P > 1 every decode step first makes a whole page free, and a request
  holds whole pages (allocation.py `alloc_paged_token_slots_decode`: `num_tokens =
  len(seq_lens) * allocator.page_size`; `alloc_decode` takes a page when the token starts one);
  the oracle asks P + 1 and holds tokens;
- `newer_leaf` (d): after inserting a request's sequence SGLang matches it again (radix_cache.py
  `checkpoint`: `self.match_prefix(...)` touches the path; a new `TreeNode()` is stamped after the
  insert's access time), so the new leaf is strictly newer than the remainder of a node the insert
  split, where the oracle gives both the same clock.

Two more causes change the stream, not the cache (`normalised`): `empty_salt` removes a `""`
salt, as both runtimes treat it (vLLM keys a salt only `if request.cache_salt`; SGLang
`Req.__init__` and `RadixKey.__init__`: `cache_salt or None`); `empty_extra_key` keys a `""`
extra key apart from none, as SGLang's cache does (its API, io_struct.py `_normalize_extra_key`,
makes `""` None before a request reaches the cache, so a server agrees with the oracle there).

`explain(stream, runtime_observations, compare)` lists every smallest set of causes under which
the oracle (or its copy) observes what the runtime did (none: unexplained).
"""
from __future__ import annotations

from itertools import combinations

from ..judge import peer_oracle

CAUSES = {"vllm": ("empty_salt",),
          "sglang": ("empty_salt", "empty_extra_key", "split_prompt", "shortfall", "paged_decode", "newer_leaf")}
LABELS = {
    "empty_salt": "empty salt",
    "empty_extra_key": "empty extra key kept apart (cache level)",
    "split_prompt": "(a) split at the prompt boundary",
    "shortfall": "(b) evict only the shortfall",
    "paged_decode": "(c) paged decode accounting",
    "newer_leaf": "(d) LRU tie on split",
}


def variant(settings: dict, switches) -> object:
    """A copy of the `sglang-radix` cache with the switched causes; with none it is the oracle
    (tests/crosscheck checks it on generated streams). `commit` restates the oracle's with each
    switch where it applies; everything else is the oracle's own."""
    on = frozenset(switches)

    class Variant(peer_oracle.RadixCache):
        def _free(self, held: int) -> int:
            return self.pool - self.size - held

        def _make_room(self, held: int, need: int) -> None:
            free = self._free(held)
            if free < need:
                self.evict(need - free if "shortfall" in on else need)

        def commit(self, request, sampled) -> None:
            if not self.on:
                return
            P = self.P
            self.clock += 1
            namespace, n = peer_oracle.sglang_namespace(request), len(request.ids)
            matched, node = self._walk(namespace, request.ids[:max(0, n - 1)], touch=True)
            matched = peer_oracle.sglang_cached(matched, n, P)
            self._lock(node, 1)
            paged = "paged_decode" in on and P > 1
            if self.pool is not None:
                self._make_room(0, n - matched + (P if P > 1 else 0))
            held = (-(-n // P) * P - matched) if paged else n - matched
            self._check(held, 0)
            for k in range(len(sampled) - 1):
                position = n + k
                if paged:
                    if self.pool is not None:
                        self._make_room(held, P)
                    if position % P == 0:
                        held += P
                else:
                    if self.pool is not None:
                        self._make_room(held, 1 + (P if P > 1 else 0))
                    held += 1
                self._check(held, 0)
            seq = peer_oracle.computed_sequence(request.ids, sampled)
            aligned = seq[:P * (len(seq) // P)]
            self.clock += 1
            self._insert(namespace, aligned)
            prompt = list(request.ids)[:P * (n // P)]
            if "split_prompt" in on and 0 < len(prompt) < len(aligned):
                self.clock += 1
                self._walk(namespace, prompt, touch=True)
            if "newer_leaf" in on:
                self.clock += 1
                self._walk(namespace, aligned, touch=True)
            self._lock(node, -1)

        def _check(self, held: int, _):
            if self.pool is not None and self._free(held) < 0:
                raise peer_oracle.PeerProfileError(
                    f"sglang-radix: a request needs more than pool_tokens={self.pool} slots")

    s = {k: settings[k] for k in ("page_size", "pool_tokens") if k in settings}
    return Variant(s.get("page_size", 1), s.get("pool_tokens"))


def normalised(stream: dict, switches) -> dict:
    """The stream as the runtime keys it under the switched stream causes: an empty salt removed
    (`empty_salt`); an empty extra key removed where a LoRA adapter follows it and kept apart from
    none where none does (`empty_extra_key`: SGLang's `Req` concatenates `extra_key + lora_id`,
    and its `RadixKey` keys `""` apart from None)."""
    if not {"empty_salt", "empty_extra_key"} & set(switches):
        return stream
    steps = []
    for step in stream["steps"]:
        step = dict(step)
        if "empty_salt" in switches and step.get("salt") == "":
            del step["salt"]
        if "empty_extra_key" in switches and step.get("extra_key") == "":
            if step.get("lora") is None:
                step["extra_key"] = APART
            else:
                del step["extra_key"]
        steps.append(step)
    return dict(stream, steps=steps)


APART = "\x00empty"
"""An extra key no generated request carries: the empty key kept apart from none."""


def observe(stream: dict, switches) -> list:
    """The stream's observations on the oracle with `switches` on."""
    from . import oracle_side
    stream = normalised(stream, switches)
    cache_switches = set(switches) - {"empty_salt", "empty_extra_key"}
    if stream["runtime"] != "sglang" or not cache_switches:
        return oracle_side.observe(stream)
    return _observe_variant(stream, cache_switches)


def _observe_variant(stream: dict, switches) -> list:
    from .oracle_side import REQUEST_FIELDS
    sim = variant(stream.get("settings") or {}, switches)
    error = peer_oracle.PeerProfileError
    out = []
    for step in stream["steps"]:
        if step.get("reset"):
            sim.reset()
            out.append({"reset": True})
            continue
        if "prompt" not in step or step.get("hold"):
            out.append({"undefined": "one request at a time"})
            break
        request = peer_oracle.PeerRequest(list(step["prompt"]), **{k: step[k] for k in REQUEST_FIELDS if k in step})
        cached = sim.predict(request)
        try:
            sim.commit(request, list(step.get("sampled") or [0]))
        except error as e:
            out.append({"undefined": str(e)})
            break
        out.append({"cached": cached})
    return out


def explain(stream: dict, runtime: list, compare) -> list:
    """Every smallest set of causes (each in CAUSES order) whose switches make the oracle's copy
    agree with the runtime's observations: several when the stream cannot tell them apart, none
    when no set explains it. `compare(a, b)` is None on agreement."""
    causes = CAUSES.get(stream["runtime"], ())
    for size in range(1, len(causes) + 1):
        found = [switches for switches in combinations(causes, size)
                 if compare(runtime, observe(stream, switches)) is None]
        if found:
            return found
    return []
