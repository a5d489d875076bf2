"""Cache scenarios of the parity suite: the oracle's context cache driven step by step.

Edge-LLM's unit tests of its context cache (contextCacheManager, reusePlan, evictionPlanner,
cacheRecord, resourcePools, blockIndex) run no request: they acquire a lease for a list of block
hashes, publish it, release it, grow it, plan an eviction, and read the pools, the record store
and the page index in between. A cache scenario does the same with the oracle's own
`ContextCache` and section functions (conformance/judge/cache_oracle.py), so those tests are
judged at the granularity they are written at (docs/parity.md section 2):

    {"cache": {"tokens_per_page": 4, "pools": {"base_kv_pages": 2}, "max_records": 2},
     "steps": [{"acquire": "first", "tokens": 4}, {"publish": "first", "hashes": ["A"], "tokens": 4},
               {"release": "first"}, ...]}

Block hashes are the test's own names: the manager is handed hashes, and computing them is
the identity rules' business (CR-ID), not the cache's. A resource is named by the lease that
took it and its place there (`first.0` the first base page of lease `first`, `first.d0` its first
draft page, `first.r0` / `first.p0` its recurrent / partial-KV snapshot slots): which physical
id the pool hands out is not part of the contract (spec/context-reuse.md Appendix A), so an
upstream id is typed as the name of what the test's own assertions say it is. Records are named
by the step that published them. The rules these steps exercise (CR-CAP, CR-PLAN, CR-PUB-4 ..
CR-PUB-6, CR-HYB-3 .. CR-HYB-6, CR-SPEC-1, -2, -4, -6) are the same under every semantics
profile; who publishes when (CR-PUB-1 .. CR-PUB-3, CR-PUB-7, CR-CAP-7) is the batch's business
and stays with the request-level scenarios.
"""
from __future__ import annotations

import copy
from array import array

from ..judge import cache_oracle as oc

from .engine import NotExpressible

POOLS = oc.POOL_NAMES                    # base_kv_pages, recurrent_snapshots, partial_kv_snapshots, draft_kv_pages
PREFIX = {oc.PAGES: "", oc.DRAFT: "d", oc.RECURRENT: "r", oc.PARTIAL_KV: "p"}
MODES = ("vanilla", "spec", "hybrid")


class HashHistory:
    """A lease's identity material as the manager is handed it: the keys of its complete pages
    (the test's block hashes, in order) and the exact digests of its checkpoint candidates
    (CR-HYB-5). Lookup walks as many keys as were given (fewer than n/P when the test gives
    fewer); a length with no candidate has a digest no record holds."""

    truth = None                          # the kit's own identity, no conflation (reference/semantics.py)

    def __init__(self, owner: str, hashes: list, digests: dict):
        self.owner = owner
        self.hashes = list(hashes)
        self.digests = {int(length): name for length, name in digests.items()}

    def keys(self, count: int) -> list:
        return [h.encode() for h in self.hashes[:count]]

    def exact_digest(self, length: int) -> bytes:
        name = self.digests.get(length)
        return name.encode() if name is not None else f"\0{self.owner}:{length}".encode()


class Run:
    """One cache scenario: each step's result and the state after it (`observe`)."""

    def __init__(self, scenario: dict):
        spec = scenario["cache"]
        self.P = spec["tokens_per_page"]
        sizes = spec.get("pools") or {}
        unknown = set(sizes) - set(POOLS)
        if unknown:
            raise NotExpressible(f"the oracle's cache has no pool {sorted(unknown)[0]!r}")
        self.cache = oc.ContextCache(sizes.get("base_kv_pages", 0), sizes.get("recurrent_snapshots", 0),
                                     sizes.get("partial_kv_snapshots", 0), spec.get("max_records", 1024),
                                     sizes.get("draft_kv_pages", 0))
        self.metrics = oc.Metrics()
        self.leases: dict = {}             # lease name -> (oracle Sequence, mode)
        self.names = [{} for _ in POOLS]   # per pool: resource id -> current name
        self.where: dict = {}              # resource name -> (pool, id), while that id still bears it
        self.taken: dict = {}              # lease name -> resources named after it so far, per pool
        self.record_names: dict = {}       # record key -> name
        self.records: dict = {}            # record name -> the oracle's Record (kept after eviction)
        self.results: list[dict] = []
        self.states: list[dict] = []
        for k, step in enumerate(scenario["steps"]):
            self.results.append(self._step(step, k))
            self.states.append(self._snapshot())

    # -- steps ------------------------------------------------------------------------------------

    def _step(self, step: dict, k: int) -> dict:
        for kind in ("acquire", "plan", "publish", "capture", "release", "release_restored", "grow", "plan_eviction",
                     "evict", "touch", "pin", "unpin", "add_cache", "drop_cache", "allocate", "canonical"):
            if kind in step:
                return getattr(self, "_" + kind)(step, k)
        raise NotExpressible(f"step {k}: no step kind the cache scenarios know ({sorted(step)})")

    def _lease(self, name: str, k: int):
        if name not in self.leases:
            raise NotExpressible(f"step {k}: no lease named {name!r}")
        return self.leases[name]

    def _new_lease(self, name: str, k: int) -> None:
        if name in self.taken:
            raise NotExpressible(f"step {k}: the lease name {name!r} is taken: each lease needs its own name")

    def _planned(self, step: dict, k: int):
        """The plan a lease would get: CR-PLAN-1 .. CR-PLAN-5 (vanilla), CR-SPEC-1/2/6 (spec),
        CR-HYB-5/6 (hybrid), or the cold plan of a bypass lookup (CR-POL-2)."""
        mode = step.get("mode", "vanilla")
        name = step.get("acquire", step.get("plan"))
        if mode not in MODES:
            raise NotExpressible(f"step {k}: no lease mode {mode!r}")
        n = step["tokens"]
        if n <= 0:
            raise NotExpressible(f"step {k}: an input of {n} tokens never reaches planning (a request needs a "
                                 "token, spec/tokenizer.md)")
        history = HashHistory(name, step.get("lookup", []), step.get("checkpoints", {}))
        pure = mode == "hybrid" and not step.get("attention", True)
        bypass = step.get("policy") == "bypass"
        if bypass and mode == "spec":
            raise NotExpressible(f"step {k}: a bypass sequence of an EAGLE deployment holds no managed draft page "
                                 "in the oracle (CR-SPEC-6)")
        if bypass:
            plan = oc.cold_plan(n, self.P)
            if pure:
                plan.private = 0
        elif mode == "vanilla":
            plan = oc.plan_vanilla(history, n, self.P, self.cache.index)
        elif mode == "spec":
            plan = oc.plan_paired(history, n, self.P, self.cache)
        else:
            plan = oc.plan_checkpoint(self.cache, history, n, self.P, pure)
        seq = oc.Sequence(None, 0, history, n, 1, None, bypass)
        paired = oc.paired_lookup(history, n, self.P, self.cache)[1] if mode == "spec" and not bypass else None
        return seq, "recurrent" if pure else mode, plan, paired

    def _plan_facts(self, plan, paired) -> dict:
        """`record` is the record the plan binds (a hybrid checkpoint, an EAGLE pairing record
        that keeps a pair); `paired_record` the record the draft path lookup pairs (0.10's
        `lookupLongest`), bound or not (CR-SPEC-1)."""
        return {"plan": plan.kind, "matched_tokens": plan.matched, "reused_tokens": plan.reused,
                "paired_record": self.record_names.get(paired.key) if paired is not None else None,
                "matched_pages": plan.matched // self.P,
                "kept": self._named(oc.PAGES, plan.kept), "kept_draft": self._named(oc.DRAFT, plan.draft_kept),
                "record": self.record_names.get(plan.record.key) if plan.record is not None else None,
                "demand": {"base_kv_pages": plan.private, "draft_kv_pages": plan.draft_private}}

    def _plan(self, step: dict, k: int) -> dict:
        """Planning alone: it reads the index and the records and changes nothing (`unchanged`)."""
        before = self._snapshot()
        _, _, plan, paired = self._planned(step, k)
        return dict(self._plan_facts(plan, paired), unchanged=self._snapshot() == before)

    def _acquire(self, step: dict, k: int) -> dict:
        """CR-CAP-3: pin the kept pages (and a hybrid hit's snapshot slots, a spec hit's kept
        draft pages), obtain the private demand with the planner (CR-CAP-4), or roll back; a
        hybrid hit or a spec hit that keeps a pair then touches its record (CR-SPEC-1, CR-HYB-6), as the batch runner
        does after acquisition."""
        name = step["acquire"]
        self._new_lease(name, k)
        seq, mode, plan, paired = self._planned(step, k)
        facts = self._plan_facts(plan, paired)
        if mode == "spec":
            held = self.cache.acquire(plan.kept, plan.private, protected=plan.record, draft_kept=plan.draft_kept,
                                      draft_private=plan.draft_private)
            pins = ()
        else:
            pins = oc.restore_pins(plan.record) if plan.record is not None else ()
            held = self.cache.acquire(plan.kept, plan.private, pins, protected=plan.record)
        if held is None:
            return dict(facts, status="insufficient_capacity")
        if isinstance(held, tuple):
            seq.pages, seq.draft_pages = held
            seq.paired = True
        else:
            seq.pages = held
            if mode == "spec":
                seq.draft_pages, seq.paired = [], True
        seq.plan, seq.slot_pins = plan, list(pins)
        if mode != "vanilla" and plan.record is not None and plan.record.key in self.cache.records:
            self.cache.touch(plan.record)
        self.leases[name] = (seq, mode)
        self._name_new(name, oc.PAGES, seq.pages[len(plan.kept):], start=len(plan.kept))
        self._name_new(name, oc.DRAFT, (seq.draft_pages or [])[len(plan.draft_kept):], start=len(plan.draft_kept))
        return dict(facts, status="acquired", pages=self._named(oc.PAGES, seq.pages),
                    draft_pages=self._named(oc.DRAFT, seq.draft_pages or []), restored=self._slots(seq.slot_pins))

    def _with_hashes(self, seq, hashes: list, k: int) -> None:
        """A lease publishes its own history: the hashes given must extend what it looked up."""
        looked = seq.history.hashes
        common = min(len(looked), len(hashes))
        if looked[:common] != hashes[:common]:
            raise NotExpressible(f"step {k}: the lease looked up {looked} and publishes {hashes}: an oracle sequence "
                                 "publishes its own token history, so other hashes cannot be stated")
        seq.history.hashes = list(hashes) if len(hashes) >= len(looked) else looked

    def _publish(self, step: dict, k: int) -> dict:
        """publish: the first floor(t / P) pages as one record (CR-PUB-4 .. CR-PUB-6); a spec
        lease publishes them with its draft path (CR-SPEC-4)."""
        name = step["publish"]
        seq, mode = self._lease(name, k)
        if mode in ("hybrid", "recurrent"):
            raise NotExpressible(f"step {k}: a hybrid lease publishes checkpoints (CR-HYB-3), not page records")
        count = step["tokens"] // self.P
        if count < 1 or count > len(step["hashes"]) or count > len(seq.pages):
            raise NotExpressible(f"step {k}: a publication of {step['tokens']} tokens with {len(step['hashes'])} "
                                 f"hash(es) over {len(seq.pages)} page(s): no oracle publication is that")
        self._with_hashes(seq, step["hashes"], k)
        if mode == "spec":
            publication, _ = oc.publish_pairs(self.cache, seq, count, oc.PREFILL_END, self.P)
        else:
            publication = oc.publish_pages(self.cache, seq, count, oc.PREFILL_END, self.P)
        key = (seq.history.keys(count)[-1], count)
        return self._published(publication, key, step.get("as", name))

    def _published(self, publication: dict, key, name: str) -> dict:
        record = self.cache.records.get(key)
        if record is None:                              # inserted and evicted at once (CR-CAP-6, M = 0)
            return {"status": publication["status"], "published_pages": publication["pages"], "record": None}
        if key not in self.record_names or self.records.get(self.record_names[key]) is not record:
            self.record_names[key] = name
            self.records[name] = record
        return {"status": publication["status"], "published_pages": publication["pages"],
                "record": self.record_names[key], "pages": self._named(oc.PAGES, record.pages),
                "draft_pages": self._named(oc.DRAFT, record.draft_pages or [])}

    def _capture(self, step: dict, k: int) -> dict:
        """reserveHybridSnapshots + publishHybrid + retiring the reservation: one checkpoint at
        L (CR-HYB-3): its slots reserved with the planner, a partial-KV slot when L % P != 0 in
        a deployment with attention (CR-HYB-4), then published; a reservation that cannot be met
        is a snapshot-pressure skip."""
        name = step["capture"]
        seq, mode = self._lease(name, k)
        if mode not in ("hybrid", "recurrent"):
            raise NotExpressible(f"step {k}: only a hybrid lease captures a checkpoint")
        length = step["tokens"]
        self._with_hashes(seq, step.get("hashes", []), k)
        seq.history.digests[length] = step["digest"]
        pure = mode == "recurrent"
        staged = oc.reserve_captures(self.cache, [(seq, length)], oc.PREFILL_END, self.P, pure, self.metrics)
        if not staged:
            return {"status": "snapshot_pressure_skip"}
        for pool, slot in staged[0][2]:
            self._name_new(name, pool, [slot])
        oc.publish_captures(self.cache, staged, oc.PREFILL_END, self.P, pure, self.metrics)
        return self._published(seq.publications[-1], (seq.history.exact_digest(length), length),
                               step.get("as", name))

    def _release(self, step: dict, k: int) -> dict:
        """CR-CAP-10: the lease gives back its pages (and restored snapshot pins, CR-HYB-6)."""
        name = step["release"]
        seq, _ = self._lease(name, k)
        self._release_restored({"release_restored": name}, k)
        self.cache.release(seq.pages, seq.draft_pages)
        del self.leases[name]
        return {}

    def _release_restored(self, step: dict, k: int) -> dict:
        seq, _ = self._lease(step["release_restored"], k)
        for pool, r in seq.slot_pins:
            self.cache.pools[pool].unpin(r)
        seq.slot_pins = []
        return {}

    def _grow(self, step: dict, k: int) -> dict:
        """CR-CAP-9 (CR-SPEC-6 for a spec lease: base and draft pages grow together)."""
        name = step["grow"]
        seq, _ = self._lease(name, k)
        if step["pages"] < 0:
            raise NotExpressible(f"step {k}: a growth by {step['pages']} pages: the oracle grows to a size")
        had, had_draft = len(seq.pages), len(seq.draft_pages or [])
        grown = self.cache.grow(seq.pages, had + step["pages"], seq.draft_pages)
        self._name_new(name, oc.PAGES, seq.pages[had:], start=had)
        self._name_new(name, oc.DRAFT, (seq.draft_pages or [])[had_draft:], start=had_draft)
        return {"grown": grown, "pages": self._named(oc.PAGES, seq.pages),
                "draft_pages": self._named(oc.DRAFT, seq.draft_pages or [])}

    def _plan_eviction(self, step: dict, k: int) -> dict:
        """CR-CAP-4: the victims the planner chooses for a demand, whether it is feasible, and
        what evicting them would reclaim (read from the oracle evicting them on a copy); the
        planner itself changes nothing (`unchanged`)."""
        demand = tuple(step["plan_eviction"].get(pool, 0) for pool in POOLS)
        before = self._snapshot()
        victims = self.cache.plan_eviction(demand)
        unchanged = self._snapshot() == before
        reclaimed = {pool: 0 for pool in POOLS}
        if victims:
            trial = copy.deepcopy(self.cache)
            for record in victims:
                trial.evict(trial.records[record.key])
            reclaimed = {pool: trial.reclaimed[i] - self.cache.reclaimed[i] for i, pool in enumerate(POOLS)}
        return {"feasible": victims is not None, "victims": [self.record_names[r.key] for r in victims or []],
                "reclaimed": reclaimed, "unchanged": unchanged}

    def _record(self, name: str, k: int):
        if name not in self.records:
            raise NotExpressible(f"step {k}: no record named {name!r}")
        return self.records[name]

    def _evict(self, step: dict, k: int) -> dict:
        """Erase one record as an eviction does (CR-CAP-2, CR-CAP-4): refused (an error, nothing
        changed) when the store does not hold it."""
        return self._refusable(lambda: self.cache.evict(self._record(step["evict"], k)))

    def _touch(self, step: dict, k: int) -> dict:
        return self._refusable(lambda: self.cache.touch(self._record(step["touch"], k)))

    def _refusable(self, call) -> dict:
        before = self._snapshot()
        try:
            call()
        except KeyError:
            if self._snapshot() != before:
                raise
            return {"refused": True}
        return {"refused": False}

    def _resource(self, name: str, k: int):
        if name not in self.where:
            raise NotExpressible(f"step {k}: no resource named {name!r} is held under that name")
        return self.where[name]

    def _pin(self, step: dict, k: int) -> dict:
        pool, r = self._resource(step["pin"], k)
        self.cache.pools[pool].pin(r)
        return {}

    def _unpin(self, step: dict, k: int) -> dict:
        """releaseActiveRef: one active reference less (CR-CAP-2); refused when none is held."""
        pool, r = self._resource(step["unpin"], k)
        return self._refusable(lambda: self.cache.pools[pool].unpin(r))

    def _add_cache(self, step: dict, k: int) -> dict:
        pool, r = self._resource(step["add_cache"], k)
        self.cache.pools[pool].add_cache(r)
        return {}

    def _drop_cache(self, step: dict, k: int) -> dict:
        """releaseCacheRef: one cache reference less (CR-CAP-2); refused when none is held."""
        pool, r = self._resource(step["drop_cache"], k)
        return self._refusable(lambda: self.cache.pools[pool].drop_cache_all((r,)))

    def _allocate(self, step: dict, k: int) -> dict:
        """ResourcePools::allocate: a demand over the pools from free resources alone, all or
        nothing (the planner's empty victim list, CR-CAP-4, says free resources suffice)."""
        name = step["allocate"]
        self._new_lease(name, k)
        demand = tuple(step["demand"].get(pool, 0) for pool in POOLS)
        if min(demand) < 0:
            raise NotExpressible(f"step {k}: a negative demand: no call of the oracle takes one")
        if self.cache.plan_eviction(demand) != []:
            return {"allocated": False}
        for pool, count in enumerate(demand):
            self._name_new(name, pool, self.cache.pools[pool].allocate_all(count))
        return {"allocated": True}

    def _canonical(self, step: dict, k: int) -> dict:
        """The page index alone (BaseBlockIndex::insert): for each hash, the page the index maps
        it to, else the proposed page, which enters the index (CR-PUB-5: the first committer's
        page is canonical); `inserted` says which hashes entered."""
        hashes, proposed = step["canonical"], [self._resource(name, k) for name in step["pages"]]
        if len(hashes) != len(proposed) or any(pool != oc.PAGES for pool, _ in proposed):
            raise NotExpressible(f"step {k}: one base page per hash")
        keys = [h.encode() for h in hashes]
        if any(key not in self.cache.index and r in self.cache.page_key for key, (_, r) in zip(keys, proposed)):
            raise NotExpressible(f"step {k}: a page the index already maps under another hash: the oracle's index is "
                                 "written only by publications of a sequence's own pages")
        inserted = [key not in self.cache.index for key in keys]
        pages = self.cache.canonical_pages(keys, [r for _, r in proposed])
        return {"pages": self._named(oc.PAGES, pages), "inserted": inserted}

    # -- names --------------------------------------------------------------------------------------

    def _name_new(self, lease: str, pool: int, fresh: list, start: int | None = None) -> None:
        """Name the resources the pool just handed out to `lease`: `lease.<prefix><place>`, the
        place in the lease's list from `start`, else the next number after those already named
        after the lease. A name an id bore before it was freed and handed out again no longer
        names anything."""
        taken = self.taken.setdefault(lease, [0, 0, 0, 0])
        for i, r in enumerate(fresh):
            place = start + i if start is not None else taken[pool]
            taken[pool] = max(taken[pool], place + 1)
            name = f"{lease}.{PREFIX[pool]}{place}"
            old = self.names[pool].get(r)
            if old is not None:
                self.where.pop(old, None)
            self.names[pool][r] = name
            self.where[name] = (pool, r)

    def _named(self, pool: int, held) -> list:
        return [self.names[pool].get(r, f"#{r}") for r in held]

    def _slots(self, pins) -> list:
        return [self.names[pool].get(r, f"#{r}") for pool, r in pins]

    # -- state ----------------------------------------------------------------------------------------

    def _snapshot(self) -> dict:
        """What a test reads between calls, by name: the record store's LRU order, the pools'
        free counts and reference counts (CR-CAP-2), the page index, each record's and each
        lease's resources, and the eviction counters (CR-MET-8, CR-MET-10)."""
        c = self.cache
        records = {self.record_names.get(r.key): r for r in c.records.values()}
        state = {"lru": list(records), "records": len(records), "index_size": len(c.index), "evicted": c.evicted,
                 "index": {key.decode(): self.names[oc.PAGES].get(page) for key, page in c.index.items()},
                 "keys": {(key[0].decode(errors="replace"), key[1]): self.record_names.get(key) for key in c.records},
                 "checkpoints": sorted((r.tokens for r in records.values() if r.recurrent_slot is not None),
                                       reverse=True)}
        for i, pool in enumerate(POOLS):
            p = c.pools[i]
            pairs = [[p.active.get(r, 0), p.cache.get(r, 0)] for r in set(p.active) | set(p.cache)]
            state[f"free.{pool}"] = p.free
            state[f"reclaimed.{pool}"] = c.reclaimed[i]
            state[f"refs.{pool}"] = sorted(pairs + [[0, 0]] * p.free)
        state["record_pages"] = {n: self._named(oc.PAGES, r.pages) for n, r in records.items()}
        state["record_draft_pages"] = {n: self._named(oc.DRAFT, r.draft_pages or []) for n, r in records.items()}
        state["record_slots"] = {n: self._slots(_slots_of(r)) for n, r in records.items()}
        leases = {n: seq for n, (seq, _) in self.leases.items()}
        state["lease_pages"] = {n: self._named(oc.PAGES, seq.pages) for n, seq in leases.items()}
        state["lease_draft_pages"] = {n: self._named(oc.DRAFT, seq.draft_pages or []) for n, seq in leases.items()}
        state["lease_restored"] = {n: self._slots(seq.slot_pins) for n, seq in leases.items()}
        state["refs_of"] = {name: [c.pools[pool].active.get(r, 0), c.pools[pool].cache.get(r, 0)]
                            for name, (pool, r) in self.where.items()}
        return state

    def observe(self, what: dict):
        if "step" in what:
            result = self.results[what["step"]]
            value = what["value"]
            if value not in result:
                raise NotExpressible(f"step {what['step']} has no {value}")
            found = result[value]
            return found[what["of"]] if "of" in what else found
        state, name = self.states[what["after"]], what["state"]
        if name in ("free", "refs", "reclaimed"):
            return state[f"{name}.{what['of']}"]
        if name == "indexed":
            return state["index"].get(what["of"])
        if name == "find":
            return state["keys"].get(tuple(what["of"]))
        if name in ("refs_of", "active_of", "cache_of"):
            pair = state["refs_of"].get(what["of"], [0, 0])
            return pair if name == "refs_of" else pair[name == "cache_of"]
        if name == "checkpoint_lengths":       # the store's checkpoint lengths below n, longest first (CR-HYB-5)
            return [length for length in state["checkpoints"] if length < what["of"]]
        if name in ("record_pages", "record_draft_pages", "record_slots", "lease_pages", "lease_draft_pages",
                    "lease_restored"):
            return state[name].get(what["of"])
        return state[name]


def _slots_of(record) -> list:
    """(pool, slot) of the snapshot slots a checkpoint record holds (CR-HYB-4)."""
    slots = [(oc.RECURRENT, record.recurrent_slot), (oc.PARTIAL_KV, record.partial_kv_slot)]
    return [(pool, r) for pool, r in slots if r is not None]


class IdentityRun:
    """An identity scenario: the page keys of the oracle's identity rules (CR-ID-1 .. CR-ID-6,
    reference/identity.py), compared as Edge-LLM's block-hash tests compare hashBlock results.

        {"identity": {"tokens_per_page": 4},
         "sequences": {"first": {"tokens": [11, 12, 21, 22]}, "other": {"tokens": [...], "lora": "x"}}}

    An observation `{"same": [A, B]}` says whether two identities are equal, each side being
    `[sequence, "page", i]` (the key of complete page i), `[sequence, "exact", L]` (the exact
    identity of [0, L), CR-HYB-5) or `["root", adapter]` (the chain root of an adapter, null for
    none, CR-ID-3). Only equality is observable: the bit patterns are the kit's own (CR-ID-6)."""

    def __init__(self, scenario: dict):
        P = scenario["identity"]["tokens_per_page"]
        self.histories = {name: oc.TokenHistory(array("i", seq["tokens"]), [], oc.adapter_root(seq.get("lora")), P)
                          for name, seq in scenario["sequences"].items()}

    def _identity(self, side: list) -> bytes:
        if side[0] == "root":
            return oc.adapter_root(side[1])
        name, kind, at = side
        if name not in self.histories:
            raise NotExpressible(f"no sequence named {name!r}")
        history = self.histories[name]
        try:
            return history.key(at) if kind == "page" else history.exact_digest(at)
        except IndexError:
            raise NotExpressible(f"{name} has no complete page {at}: only complete pages are keyed (CR-ID-2)") from None

    def observe(self, what: dict):
        first, second = what["same"]
        return self._identity(first) == self._identity(second)
