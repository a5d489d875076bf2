"""One-line explanations of mismatches, derived from the oracle's tokenization.

A runtime engineer reading a FAIL wants the reason in the terms of the request: which pages,
which positions, which earlier request supplied a prefix, which image a page boundary splits.
The Explainer works from the oracle's parse of the request file (token ids and media spans)
and its per-request predictions; it never decides a verdict, it only names the rule and says
why the expected value is what it is.
"""
from __future__ import annotations

from .verdicts import Verdict

# The rule that defines each part of an hf engine's input length (spec/hf-tokenizer.md,
# spec/media-tokens.md): the loader's ids, the image counter's count.
LOADER_RULES = {"tokenizers-raw": "TOK-HF-2", "transformers-auto": "TOK-HF-3"}
COUNTER_RULES = {"hf/qwen-vl": "TOK-MEDIA-2", "vllm/qwen-vl": "TOK-MEDIA-2", "edge-llm/qwen-vl": "TOK-MEDIA-3",
                 "hf/internvl": "TOK-MEDIA-4", "edge-llm/internvl": "TOK-MEDIA-5", "hf/phi-3-vision": "TOK-MEDIA-6"}


class Explainer:
    def __init__(self, engine, flags, prediction):
        parsed = prediction.parsed
        self.engine = engine
        self.P = engine.tokens_per_page
        self.kind = engine.kind
        self.pool = engine.kv_pool_pages
        self.evicted = ((prediction.profile or {}).get("context_cache") or {}).get("records", {}).get("evicted", 0)
        self.flags = flags
        self.requests = parsed.requests if parsed else []
        self.batches = parsed.batches if parsed else []
        self.lookup = parsed.lookup_policy if parsed else "use_cache"
        self.commit = parsed.commit_policy if parsed else "including_generated_tokens"
        self.pred = prediction.responses
        self.batch_info = {b.get("batch_idx"): b for b in prediction.batches}
        self.generated = prediction.generated or []
        self.audio_from = next((r.index for r in self.requests if r.has_audio), None)
        self._ids: dict[int, list] = {}

    # --- verdict modifiers (CR-MEDIA-6) --------------------------------------------------------
    def counter_verdict(self) -> Verdict:
        """Aggregate counters of a file with audio input are unspecified (CR-MEDIA-6): they add up
        the audio requests' own counts."""
        return Verdict.UNSPECIFIED if self.audio_from is not None else Verdict.FAIL

    def request_verdict(self, i: int) -> Verdict:
        """CR-MEDIA-6 leaves open the counts of a request with audio and what it leaves in the cache:
        so also those of a later request that could reuse what an audio request published (a full
        page in common under the same adapter), and once records were evicted those of every
        request after an audio one (the victims depend on what the audio requests left). Every
        other request is judged exactly."""
        if self.audio_from is None or i < self.audio_from:
            return Verdict.FAIL
        if self.requests[i].has_audio or self.evicted:
            return Verdict.UNSPECIFIED
        shares = any(self.requests[j].has_audio and same_adapter and common >= self.P
                     for j, common, _, same_adapter, _ in self.sources(i))
        return Verdict.UNSPECIFIED if shares else Verdict.FAIL

    def decode(self, ids: list) -> str:
        """The text generated ids print as, the end-of-sequence token left out: bytes for bytes-v1
        (spec/tokenizer.md section 4), the engine's tokenizer's decode for an `hf` one."""
        ids = [t for t in ids if t != self.engine.eos_token_id]
        if not self.engine.hf:
            return bytes(t for t in ids if 0 <= t < 256).decode("latin-1")
        return self.engine.hf_tokenizer().decode(ids, skip_special_tokens=True)

    # --- positions --------------------------------------------------------------------------------
    def ids(self, i: int) -> list:
        """Position identities of request i's input: token ids, or (item digest, offset) (CR-MEDIA-1)."""
        if i not in self._ids:
            r = self.requests[i]
            ids = list(r.tokens)
            for s in r.spans:
                for p in range(s.start, s.end):
                    ids[p] = (s.digest, p - s.start)
            self._ids[i] = ids
        return self._ids[i]

    def history(self, j: int) -> list:
        """What request j may have published: its input, then (decode-end) its generated tokens."""
        gen = self.generated[j] if j < len(self.generated) and self.generated[j] else []
        if self.commit == "prefill_state_only" or not gen:
            return self.ids(j)
        return self.ids(j) + list(gen[:-1])

    def item_at(self, i: int, pos: int):
        """(ordinal, span) of the media item holding position pos of request i, or None."""
        for k, s in enumerate(self.requests[i].spans, 1):
            if s.start <= pos < s.end:
                return k, s
        return None

    def batch_of(self, i: int) -> int:
        return next((b for b, members in enumerate(self.batches) if i in members), -1)

    def sources(self, i: int):
        """Earlier requests as (j, identity LCP, raw-token LCP, same adapter, same batch)."""
        mine, raw = self.ids(i), list(self.requests[i].tokens)
        for j in range(i):
            theirs = self.history(j)
            other_raw = list(self.requests[j].tokens) + theirs[len(self.requests[j].tokens):]
            yield (j, _lcp(mine, theirs), _lcp(raw, other_raw),
                   self.requests[j].lora_name == self.requests[i].lora_name,
                   self.batch_of(j) == self.batch_of(i))

    # --- per-request facts --------------------------------------------------------------------------
    def request_field(self, i: int, key: str, want: dict, have: dict) -> tuple[str | None, str]:
        if key in ("plan", "matched_tokens", "reused_tokens", "hybrid_restore"):
            return self.plan(i, want, have)
        if key == "media_aware":
            k = len(self.requests[i].spans)
            return "CR-MEDIA-2", (f"request {i} has {k} media item(s)" if k else f"request {i} has no media item")
        if key == "lookup_bypass":
            return self._bypass_rule(), self._bypass_reason(i, want["lookup_bypass"])
        if key == "forced_cold":
            return "CR-CAP-7", "with one page pool a plan that reuses state never goes cold (CR-CAP-7)"
        if key == "snapshot_pressure_skips":
            return "CR-HYB-4", "a capture is skipped only when its snapshot slots cannot be reserved"
        return self.publications(i, want.get("publications", []), have.get("publications"))

    def _bypass_rule(self) -> str:
        return "CR-POL-3" if self.flags.output_hidden_states else "CR-POL-2" if self.lookup == "bypass" else "CR-POL-1"

    def _bypass_reason(self, i: int, expected: bool) -> str:
        if self.flags.output_hidden_states:
            return "hidden-state output forces every request to bypass lookup"
        if expected:
            return f"the file's lookup policy is {self.lookup}"
        return f"request {i} runs under the lookup policy {self.lookup} and must look up"

    def plan(self, i: int, want: dict, have: dict) -> tuple[str, str]:
        """Why request i's plan is what the oracle says (matched, reused, kind)."""
        n, P = self.requests[i].n, self.P
        e, o = want["reused_tokens"], have.get("reused_tokens")
        if want.get("lookup_bypass"):
            return self._bypass_rule(), f"request {i} bypasses lookup ({self._bypass_reason(i, True)}): it reuses nothing"
        if self.kind != "vanilla":
            why = (f"a {self.kind} sequence reuses only the longest checkpoint length L < n = {n} recorded for "
                   f"exactly its prefix; the oracle finds L = {e}")
            if o == n:
                why += "; an identical replay cannot reuse its own endpoint"
            return ("CR-HYB-6" if want.get("hybrid_restore") != have.get("hybrid_restore") and e == o
                    else "CR-HYB-5"), why
        em, om = want["matched_tokens"], have.get("matched_tokens")
        aware = bool(self.requests[i].spans)
        if aware and o == e and e > 0 and have.get("plan") != want["plan"]:
            return "CR-MEDIA-4", (f"request {i} is media-aware, so its plan is restated after the media trim: "
                                  f"kind {want['plan']}, matched = the kept length {em} "
                                  f"(a text-only input would count the full match)")
        split = self._split(i, o) if aware and isinstance(o, int) and o > e else None
        if split:
            return "CR-MEDIA-3", split + f", so reuse must stop at {e}"
        if isinstance(om, int) and om > em:
            return self._too_much(i, n, em, om, matched=True)
        if isinstance(o, int) and o > e:
            return self._too_much(i, n, e, o)
        if isinstance(o, int) and o < e:
            return self._too_little(i, n, e, o)
        if aware and (want["plan"] == "standard" or have.get("plan") == "full_input_rewind"):
            return "CR-MEDIA-4", (f"request {i} is media-aware, so its plan is restated after the media trim: "
                                  f"kind {want['plan']}, matched = the kept length {want['matched_tokens']} "
                                  f"(a text-only input would count the full match)")
        if want["plan"] == "full_input_rewind" or have.get("plan") == "full_input_rewind":
            return "CR-PLAN-2", (f"n = {n} is a multiple of P = {self.P} and all {n // self.P} pages match: the plan "
                                 f"is a full-input rewind with matched = {n}, keeping {n // self.P - 1} page(s)")
        return "CR-PLAN-3", f"plan kind and matched follow from reused = {e} (CR-PLAN-3)"

    def _too_much(self, i: int, n: int, e: int, o: int, matched: bool = False) -> tuple[str, str]:
        """Why request i must not reuse (or, `matched`, match) as much as `o` positions."""
        P = self.P
        verb = "matches" if matched else "reuses"
        if o % P:
            return "CR-PLAN-4", f"reuse is page aligned: {o} is not a multiple of P = {P}; the oracle {verb} {e}"
        if o >= n and not matched:
            if n % P == 0:
                return "CR-PLAN-2", (f"n = {n} is a multiple of P = {P}: the last page is recomputed on a full "
                                     f"match, so reuse stops at {n - P} at most; the oracle reuses {e}")
            return "CR-PLAN-4", f"at least one token must be computed: reused < n = {n}"
        split = self._split(i, o)
        if split:
            return "CR-MEDIA-3", split + f", so reuse must stop at {e}"
        best = None
        for j, lcp, raw_lcp, same_adapter, same_batch in self.sources(i):
            if lcp >= o and not same_adapter:
                return "CR-ID-3", (f"request {j} holds positions 0-{o - 1} under adapter "
                                   f"{self.requests[j].lora_name!r}, request {i} under {self.requests[i].lora_name!r}: "
                                   f"adapters never share pages")
            if raw_lcp >= o > lcp and same_adapter:
                pos = lcp
                item = self.item_at(i, pos)
                what = f"{item[1].modality} #{item[0]} at positions {item[1].start}-{item[1].end - 1}" if item \
                    else f"position {pos}"
                return "CR-ID-4", (f"request {j} has the same token ids up to position {o - 1}, but its {what} is a "
                                   f"different media item (pixels, geometry or order), so page {pos // P} differs")
            if lcp >= o and same_batch:
                return "CR-BATCH-2", (f"request {j} shares positions 0-{o - 1} but runs in the same batch; a batch "
                                      f"never reuses its own publications")
            if lcp >= o and best is None:
                best = j
        if best is not None:
            if self.pred[best].get("context_cache") and self.pred[best]["context_cache"].get("lookup_bypass"):
                return "CR-PUB-7", f"request {best} shares these pages but bypassed lookup, so it published nothing"
        if best is not None and self.evicted:
            limit = self.flags.max_records
            rule = "CR-CAP-6" if limit is not None and limit <= 4 else "CR-CAP-4"
            return rule, (f"request {best} published positions 0-{o - 1}, but its record was evicted before request "
                          f"{i} (record limit {limit}, pool of {self.pool} pages): the oracle {verb} {e}")
        if best is not None:
            return "CR-PLAN-1", (f"request {best} shares positions 0-{o - 1} with request {i}, yet by the rules of "
                                 f"sections 2-6 the oracle {verb} only {e} (see the other failures of this request)")
        longest = max((lcp for _, lcp, _, same, _ in self.sources(i) if same), default=0)
        return "CR-PLAN-1", (f"no earlier request shares more than {longest} leading positions with request {i}; "
                             f"only complete shared pages count, so the oracle {verb} {e}")

    def _split(self, i: int, r: int) -> str | None:
        """The media item that positions r-1 and r share, described, or None (CR-MEDIA-3)."""
        found = self.item_at(i, r - 1) if r > 0 else None
        if not found or not found[1].start <= r < found[1].end:
            return None
        k, s = found
        return (f"pages {s.start // self.P}-{(s.end - 1) // self.P} of request {i} hold {s.modality} #{k} at "
                f"positions {s.start}-{s.end - 1}; the page boundary at {r} splits it")

    def _too_little(self, i: int, n: int, e: int, o: int) -> tuple[str, str]:
        P = self.P
        for j, lcp, _, same_adapter, same_batch in self.sources(i):
            if same_adapter and not same_batch and lcp >= e:
                gen = lcp > self.requests[j].n
                rule = "CR-PUB-2" if gen else "CR-BATCH-3" if self.batch_of(j) != self.batch_of(i) else "CR-PLAN-1"
                src = f"request {j}'s decode-end record (input and generated tokens)" if gen else f"request {j}"
                return rule, (f"pages 0-{e // P - 1} of request {i} (positions 0-{e - 1}) equal those published by "
                              f"{src} and still held: the oracle reuses {e}")
        return "CR-PLAN-1", f"the oracle finds {e // P} leading pages of request {i} in the cache and reuses {e}"

    def publications(self, i: int, want: list, have) -> tuple[str, str]:
        n, P = self.requests[i].n, self.P
        if not isinstance(have, list):
            return "CR-MET-13", "publications must be a list"
        if self.pred[i].get("context_cache", {}).get("lookup_bypass") and not want:
            return "CR-PUB-7", f"request {i} bypassed lookup: it never publishes"
        if self.commit == "prefill_state_only" and any(p.get("point") == "decode_end" for p in have):
            return "CR-PUB-3", "under prefill_state_only no decode-end publication is attempted"
        for k in range(max(len(want), len(have))):
            w = want[k] if k < len(want) else None
            h = have[k] if k < len(have) else None
            if w == h:
                continue
            point = (w or h).get("point")
            if self.kind != "vanilla":
                return "CR-HYB-3", (f"a {self.kind} sequence captures a checkpoint at L = n = {n} at prefill end and, "
                                    f"when it finishes in a decode step, at L = n + g - 1; expected {w}")
            if w and h and w.get("pages") == h.get("pages") and w.get("status") != h.get("status"):
                return "CR-PUB-4", (f"a record with this {w['pages']}-page endpoint is {'already' if w['status'] == 'existing' else 'not'} "
                                    f"held, so the publication is {w['status']}")
            if point == "prefill_end":
                return "CR-PUB-1", f"n = {n}, P = {P}: the prefill-end record holds floor(n/P) = {n // P} pages"
            gen = self.generated[i] if i < len(self.generated) and self.generated[i] else []
            h_len = n + len(gen) - 1
            return "CR-PUB-2", (f"n = {n} and g = {len(gen)} generated tokens: the decode-end record holds "
                                f"floor((n + g - 1)/P) = {h_len // P} pages")
        return "CR-PUB-8", "publication attempts differ"

    def status(self, i: int, p: dict, r: dict) -> tuple[str, str]:
        b = self.batch_info.get(p.get("batch_idx"), {})
        if p["status"] == "error":
            return b.get("rule") or "CR-CAP-8", f"batch {p.get('batch_idx')} must fail: {b.get('error') or p.get('error')}"
        return "CR-CAP-8", (f"batch {p.get('batch_idx')} is admissible (length limits and pool of CR-CAP-1 hold), "
                            f"but the backend failed it: {str(r.get('output_text'))[:120]}")

    def input_tokens(self, i: int) -> tuple[str | None, str]:
        """(rule, why) of a wrong input length n. On an hf engine the rule is the image counter's
        where the request has images (its count is the likelier disagreement), else the loader's;
        the explanation gives both parts of n. bytes-v1 (spec/tokenizer.md) has no rule ids."""
        r = self.requests[i]
        media = sum(s.end - s.start for s in r.spans)
        images = [s for s in r.spans if s.modality == "image"]
        if not self.engine.hf:
            return None, (f"bytes-v1 (spec/tokenizer.md) gives n = {r.n} for request {i}"
                          + (f", {media} of them media placeholders" if media else ""))
        loader = self.engine.tokenizer["loader"]
        loader_rule = LOADER_RULES.get(loader, "TOK-HF-9")
        counter = (self.engine.vision or {}).get("counter")
        why = (f"the hf profile ({loader} loader, {loader_rule}, spec/hf-tokenizer.md) gives n = {r.n} for "
               f"request {i}: {r.n - media} text and template ids")
        if images and counter in COUNTER_RULES:
            sizes = ", ".join(str(s.end - s.start) for s in images)
            return COUNTER_RULES[counter], f"{why} and {len(images)} image(s) of {sizes} tokens under {counter} " \
                                           f"({COUNTER_RULES[counter]}, spec/media-tokens.md)"
        return loader_rule, why + (f" and {media} media placeholders" if media else "")

    def output(self, i: int, detail: str) -> str:
        cc = self.pred[i].get("context_cache") if i < len(self.pred) else None
        reused = cc.get("reused_tokens", 0) if cc else 0
        where = (f"request {i} reused {reused} tokens (pages 0-{reused // self.P - 1})" if reused
                 else f"request {i} reused nothing")
        return f"{where}; its greedy output must equal the bypass replay's: {detail}"

    # --- aggregate counters ------------------------------------------------------------------------
    def counter(self, key: str, expected, observed) -> str:
        facts = [p.get("context_cache") or {} for p in self.pred]
        pick = {
            "hit_sequences": lambda c: c.get("matched_tokens", 0) > 0,
            "media_aware_sequences": lambda c: c.get("media_aware"),
            "lookup_bypass_sequences": lambda c: c.get("lookup_bypass"),
            "forced_cold_sequences": lambda c: c.get("forced_cold"),
            "hybrid.restores": lambda c: c.get("hybrid_restore"),
        }
        warm = f" plus {self.flags.warmup} warmup admission(s)" if self.flags.warmup else ""
        if key in pick:
            who = [i for i, c in enumerate(facts) if pick[key](c)]
            return f"the oracle counts requests {who or 'none'} of this file{warm}"
        if key in ("matched_tokens", "reused_tokens"):
            per = {i: c.get(key) for i, c in enumerate(facts) if c.get(key)}
            return f"the oracle's per-request {key}: {per or 'all 0'}"
        if key.startswith("plans."):
            kind = key.split(".")[1]
            who = [i for i, c in enumerate(facts) if c.get("plan") == kind]
            return f"the oracle plans {kind} for requests {who or 'none'}{warm}"
        if key.startswith("publications."):
            per = {i: len(c.get("publications", [])) for i, c in enumerate(facts) if c.get("publications")}
            return f"publication attempts per request in the oracle: {per or 'none'}"
        if key == "admitted_sequences":
            return f"every sequence is admitted: {len(self.pred)} request(s){warm}"
        limit = self.flags.max_records
        if key.startswith("reclaimed_resources."):
            why = ("resources return to the free pool, and count, when the record holding them is evicted and no "
                   "sequence still uses them")
        elif key.startswith("resource_pools."):
            why = "at the end of a run free = capacity - resources held by records"
        elif key.startswith("records."):
            why = "records follow CR-PUB-4 (one per endpoint), CR-CAP-4 (planner evictions) and CR-CAP-6"
        else:
            return "counted as spec/context-reuse.md section 10 says"
        if limit is not None and limit <= 4:
            why += f"; record limit {limit}" + (": every new record is evicted at once (CR-CAP-6)" if limit == 0 else "")
        return why

    def prefill(self, key: str, expected, observed) -> str:
        return ("prefill.total_runs counts batches whose prefill ran (warmup excluded); reused_tokens adds reused, "
                "computed_tokens adds n - reused over their sequences")


def _lcp(a: list, b: list) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
