"""llama.cpp-server: slots chosen by similarity, else least recently used; chunk reuse by KV
shifting; the slot's context and context shift (PEER-LCPP-*)."""
import numpy as np

from .common import shared_prefix


def run_length(a, i: int, b, j: int) -> int:
    """How many ids a[i:] and b[j:] share from their starts (no slices copied)."""
    n = 0
    while i + n < len(a) and j + n < len(b) and a[i + n] == b[j + n]:
        n += 1
    return n


class SlotCache:
    """llama-server with `slots` slots (`-np N --cache-ram 0`), each the tokens it computed and
    their KV (PEER-LCPP-1..9). A request takes the slot whose tokens share the largest fraction
    of its prompt, above `slot_prompt_similarity` (as floats, like get_available_slot), else the
    least recently used one (the last of equally old slots). With `cache_reuse` n > 0, runs of
    at least n cached tokens that the prompt continues with are moved down, their keys rotated to
    the new positions (update_slots' KV shifting). `n_ctx` is the slot's context (default: the
    engine's): a prompt that does not fit is refused, and generation stops at the context, or
    with `context_shift` discards half of what follows the first `n_keep` tokens (pre_decode).
    The host prompt cache (`--cache-ram` above 0, PEER-LCPP-6) is not served."""
    settings = {"slots": 1, "slot_prompt_similarity": 0.1, "cache_ram_mib": 0, "cache_reuse": 0,
                "context_shift": False, "n_keep": 0, "n_ctx": None}

    def __init__(self, slots=1, slot_prompt_similarity=0.1, cache_ram_mib=0, cache_reuse=0, context_shift=False,
                 n_keep=0, n_ctx=None):
        if cache_ram_mib != 0:
            raise ValueError("setting cache_ram_mib: the bundled server has no host prompt cache (PEER-LCPP-6): "
                             "only 0 is served")
        if cache_reuse != int(cache_reuse) or cache_reuse < 0 or n_keep != int(n_keep) or n_keep < 0:
            raise ValueError("setting cache_reuse and n_keep: whole numbers >= 0")
        if n_ctx is not None and (n_ctx != int(n_ctx) or n_ctx < 5):
            raise ValueError("setting n_ctx: a whole number >= 5")
        self.n, self.threshold = int(slots), slot_prompt_similarity
        self.min_chunk, self.shifts, self.keep = int(cache_reuse), context_shift is True, int(n_keep)
        self.n_ctx = None if n_ctx is None else int(n_ctx)
        self.slots = [{"tokens": [], "kv": None, "used": -1} for _ in range(self.n)]
        self.clock = 0
        self.current = 0

    def reset(self, slot: int | None = None):
        """Erase one slot (or all), PEER-API-4: its tokens go, its last use stays (as the server's)."""
        for i in ([slot] if slot is not None else range(self.n)):
            self.slots[i]["tokens"], self.slots[i]["kv"] = [], None

    @property
    def tokens(self):
        return self.slots[0]["tokens"]

    def context(self, engine_context: int) -> int:
        """The slot's context: `n_ctx`, which the engine must hold, else the engine's."""
        if self.n_ctx is not None and self.n_ctx > engine_context:
            raise ValueError(f"setting n_ctx: {self.n_ctx} is more than the engine's context of {engine_context}")
        return self.n_ctx or engine_context

    def pages(self, context: int) -> dict:
        """llama-server's `/props` and `/slots` (PEER-API-5: the kit reads `total_slots` and the
        slot's `n_ctx`)."""
        n_ctx = self.context(context)
        return {("GET", "/props"): {"total_slots": self.n, "default_generation_settings": {"n_ctx": n_ctx}},
                ("GET", "/slots"): [{"id": i, "n_ctx": n_ctx, "is_processing": False} for i in range(self.n)]}

    def cap(self, n: int) -> int:
        """PEER-LCPP-1: at least one prompt token is evaluated again (server-context.cpp: n_past--)."""
        return n - 1

    def similarity(self, slot: dict, ids) -> np.float32:
        """get_available_slot's `float(lcp) / n_tokens`, in single precision."""
        return np.float32(shared_prefix(slot["tokens"], ids)) / np.float32(len(ids))

    def above(self, sim, threshold) -> bool:
        """PEER-LCPP-5: a share counts when it is above the threshold, not equal to it."""
        return sim > threshold

    def pick(self, ids) -> int:
        """PEER-LCPP-5: the most similar slot above the threshold, else the least recently used."""
        best, best_sim = None, np.float32(0)
        threshold = np.float32(self.threshold)
        if threshold != 0:
            for i, slot in enumerate(self.slots):
                if slot["tokens"]:
                    sim = self.similarity(slot, ids)
                    if sim > best_sim and self.above(sim, threshold):
                        best, best_sim = i, sim
        if best is None:
            best = 0
            for i, slot in enumerate(self.slots):
                if slot["used"] <= self.slots[best]["used"]:
                    best = i
        return best

    def admit(self, req, max_tokens: int, engine_context: int) -> dict:
        """PEER-LCPP-8: refuse a prompt the slot cannot hold (ValueError, HTTP 400; the slot it
        was given is released untouched, as used now); otherwise how generation meets the
        context: stop there, or shift (PEER-LCPP-9). The engine's generate() takes the result."""
        n_ctx = self.context(engine_context)
        if not self.fits(len(req.ids), n_ctx):
            self.clock += 1
            self.slots[self.pick(req.ids)]["used"] = self.clock
            raise ValueError(f"request ({len(req.ids)} tokens) exceeds the available context size ({n_ctx} tokens), "
                             "try increasing it")
        return {"context": n_ctx, "shift": self.discard if self.shifts else None}

    def fits(self, n: int, n_ctx: int) -> bool:
        """PEER-LCPP-8: a prompt fits when it leaves room for one more token (update_slots: `>=` refuses)."""
        return n < n_ctx

    def discard(self, held: int, n_ctx: int) -> tuple[int, int]:
        """PEER-LCPP-9, pre_decode: (kept, discarded) for a slot holding `held` of `n_ctx`."""
        kept = min(self.keep, n_ctx - 4)
        rest = held - kept
        return kept, max(0, min(rest // 2, rest - 1))

    def long_enough(self, run: int) -> bool:
        """PEER-LCPP-7: a run is moved down when it has at least `cache_reuse` tokens."""
        return run >= self.min_chunk

    def chunks(self, held: list, ids: list, start: int) -> list:
        """PEER-LCPP-7: [(slot position, prompt position, length)] of the runs of at least
        `cache_reuse` tokens moved down after the common prefix `start`."""
        moved, c, p = [], start, start
        while self.min_chunk and c < len(held) and p < len(ids):
            run = run_length(held, c, ids, p)
            if not self.long_enough(run):
                c += 1
                continue
            moved.append((c, p, run))
            c, p = c + run, p + run
        return moved

    def lookup(self, req):
        """(count, the reused KV): a tensor for a common prefix alone, else the pieces
        [(KV of a run, positions it moves by)] that the engine places (rotating their keys)."""
        self.current = self.pick(req.ids)
        slot = self.slots[self.current]
        prefix = shared_prefix(slot["tokens"], req.ids)
        pieces = [(0, 0, prefix)] + self.chunks(slot["tokens"], req.ids, prefix)
        reached = pieces[-1][1] + pieces[-1][2]
        c = max(0, min(reached, self.cap(len(req.ids))))
        use = min(c, len(req.ids) - 1)
        if use <= 0:
            return c, None
        if len(pieces) == 1:
            return c, slot["kv"][:, :, :use]
        placed = []
        for at, to, length in pieces:
            length = min(length, use - to)
            if length > 0:
                placed.append((slot["kv"][:, :, at:at + length], to - at))
        return c, placed

    def store(self, req, sequence, kv, sampled):
        """PEER-LCPP-2 / PEER-LCPP-4 / PEER-LCPP-9: the slot now holds what the engine left in it
        (the computed sequence, less what context shifts discarded), nothing else."""
        self.clock += 1
        self.slots[self.current].update(tokens=list(sequence), kv=kv, used=self.clock)
