"""llama.cpp-server: slots chosen by similarity, else least recently used (PEER-LCPP-*)."""
from .common import shared_prefix


class SlotCache:
    """llama-server with `slots` slots (`-np N --cache-ram 0`), each the tokens it computed and
    their KV (PEER-LCPP-1..5). A request takes the slot whose tokens share the largest fraction
    of its prompt, above `slot_prompt_similarity`, else the least recently used one
    (server-context.cpp get_available_slot; the last of equally old slots). The host prompt
    cache (`--cache-ram` above 0, PEER-LCPP-6) is not served."""
    settings = {"slots": 1, "slot_prompt_similarity": 0.1, "cache_ram_mib": 0}

    def __init__(self, slots=1, slot_prompt_similarity=0.1, cache_ram_mib=0):
        if cache_ram_mib != 0:
            raise ValueError("setting cache_ram_mib: the bundled server has no host prompt cache (PEER-LCPP-6): "
                             "only 0 is served")
        self.n, self.threshold = slots, slot_prompt_similarity
        self.slots = [{"tokens": [], "kv": None, "used": -1} for _ in range(slots)]
        self.clock = 0
        self.current = 0

    def reset(self, slot: int | None = None):
        """Erase one slot (or all), PEER-API-4: its tokens go, its last use stays (as the server's)."""
        for i in ([slot] if slot is not None else range(self.n)):
            self.slots[i]["tokens"], self.slots[i]["kv"] = [], None

    @property
    def tokens(self):
        return self.slots[0]["tokens"]

    def pages(self, context: int) -> dict:
        """llama-server's `/props` and `/slots` (PEER-API-5: the kit reads `total_slots`)."""
        return {("GET", "/props"): {"total_slots": self.n, "default_generation_settings": {"n_ctx": context}},
                ("GET", "/slots"): [{"id": i, "n_ctx": context, "is_processing": False} for i in range(self.n)]}

    def cap(self, n: int) -> int:
        """PEER-LCPP-1: at least one prompt token is evaluated again (server-context.cpp: n_past--)."""
        return n - 1

    def pick(self, ids) -> int:
        """PEER-LCPP-5: the most similar slot above the threshold, else the least recently used."""
        best, best_sim = None, 0.0
        if self.threshold != 0:
            for i, slot in enumerate(self.slots):
                if slot["tokens"]:
                    sim = shared_prefix(slot["tokens"], ids) / len(ids)
                    if sim > best_sim and sim > self.threshold:
                        best, best_sim = i, sim
        if best is None:
            best = 0
            for i, slot in enumerate(self.slots):
                if slot["used"] <= self.slots[best]["used"]:
                    best = i
        return best

    def lookup(self, req):
        self.current = self.pick(req.ids)
        slot = self.slots[self.current]
        c = max(0, min(shared_prefix(slot["tokens"], req.ids), self.cap(len(req.ids))))
        use = min(c, len(req.ids) - 1)
        return c, (slot["kv"][:, :, :use] if use > 0 else None)

    def store(self, req, sequence, kv, sampled):
        """PEER-LCPP-2 / PEER-LCPP-4: the slot now holds the computed sequence, nothing else."""
        self.clock += 1
        self.slots[self.current].update(tokens=list(sequence), kv=kv, used=self.clock)
