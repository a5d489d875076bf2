"""What the oracle would have to do differently for a stream to agree with the runtime: the
classification's hypotheses, never the oracle (reference/peer_sglang.py is the oracle, and its
fixes go there, proven by the cross-check).

Each SGLang cause is one counterfactual on a copy of the `sglang-radix` cache, at the stream's
own settings (docs/crosscheck.md cites the source lines):

- `no_prompt_split` (a): a finished request's node is not split at its page-aligned prompt, as
  SGLang before 0.5.20 (radix_cache.py `cache_finished_req` inserts the sequence once);
- `whole_demand` (b): an allocation that finds fewer free slots than it asks for evicts all it
  asks for, not the shortfall, as SGLang before 0.5.17 (mem_cache/common.py
  `evict_from_tree_cache`: `tree_cache.evict(EvictParams(num_tokens=num_tokens))`);
- `decode_tokens` (c): a decode step asks for P + 1 free slots and a request holds tokens, not
  pages: the kit's own reading before peer profiles 1.3.0, which SGLang never did
  (allocation.py `alloc_paged_token_slots_decode` asks for a whole page, allocator/paged.py
  takes one only when the token starts a page);
- `split_tie` (d): the leaf an insert creates is stamped like the remainder of the node it split
  (their tie broken by position), the kit's reading before 1.3.0; SGLang's new `TreeNode` is
  stamped after (radix_cache.py `_insert_helper`).

Two more change the stream, not the cache (`normalised`): `empty_salt` keys a `""` salt like
none, as both runtimes do (vLLM keys a salt only `if request.cache_salt`; both oracles now do, so
no runtime lists it any more); `empty_extra_key` keys a `""` extra key apart from none, as SGLang's cache does
below its API (io_struct.py `_normalize_extra_key` makes `""` None first, and the SGLang driver
calls it, so a stream through the API never shows this).

`explain(stream, runtime_observations, compare)` lists every smallest set of causes under which
the oracle (or its copy) observes what the runtime did (none: unexplained).
"""
from __future__ import annotations

from itertools import combinations

from ..judge import peer_oracle

CACHE_CAUSES = ("no_prompt_split", "whole_demand", "decode_tokens", "split_tie")
CAUSES = {"vllm": (),
          "sglang": ("empty_extra_key",) + CACHE_CAUSES}
LABELS = {
    "empty_salt": "empty salt",
    "empty_extra_key": "empty extra key kept apart (below the API)",
    "no_prompt_split": "(a) no split at the prompt boundary (SGLang < 0.5.20)",
    "whole_demand": "(b) evicts the whole demand, not the shortfall (SGLang < 0.5.17)",
    "decode_tokens": "(c) P + 1 slots per decode step, tokens held (the oracle before 1.3.0)",
    "split_tie": "(d) a new leaf stamped like the remainder it split off (the oracle before 1.3.0)",
}


def variant(settings: dict, switches) -> object:
    """A copy of the `sglang-radix` cache with the switched causes; with none it is the oracle
    (tests/crosscheck checks it on generated streams)."""
    on = frozenset(switches)

    class Variant(peer_oracle.RadixCache):
        def _extend(self, n: int, matched: int) -> int:
            if "decode_tokens" not in on:
                return super()._extend(n, matched)
            if self.pool is not None:            # the old reading: the tokens held, a page of slack asked
                self._make_room(0, n - matched + (self.P if self.P > 1 else 0), n - matched, "the prompt")
            return n - matched

        def _decode(self, position: int, held: int) -> int:
            if "decode_tokens" not in on:
                return super()._decode(position, held)
            if self.pool is not None:            # the old reading: P + 1 slots asked, one token held
                self._make_room(held, 1 + (self.P if self.P > 1 else 0), 1, "a decode step")
            return held + 1

        def _split(self, namespace, child, k):
            upper = super()._split(namespace, child, k)
            if "split_tie" in on:
                upper.touched = child.touched    # the old reading: one clock value for the whole walk
            return upper

        def _insert(self, namespace, ids, computed=None, why=()):
            if "split_tie" not in on:
                return super()._insert(namespace, ids, computed, why)
            self._frozen = 0                     # the old reading: the new leaf gets the walk's own value
            try:
                return super()._insert(namespace, ids, computed, why)
            finally:
                self._frozen = None

        def _tick(self) -> int:
            frozen = getattr(self, "_frozen", None)
            if frozen:
                return frozen
            now = super()._tick()
            if frozen == 0:
                self._frozen = now
            return now

    s = peer_oracle.check_settings("sglang-radix", settings)
    sim = Variant(s["page_size"], s["pool_tokens"], s["radix_cache"], version=s["version"], eagle=s["eagle"],
                  sliding_window=s["sliding_window"], swa_eviction_interval=s["swa_eviction_interval"],
                  mamba=s["mamba"])
    if "no_prompt_split" in on:
        sim.split_prompt = False
    if "whole_demand" in on:
        sim.shortfall = False
    return sim


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
    cache_switches = set(switches) & set(CACHE_CAUSES)
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
