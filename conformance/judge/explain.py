"""Explanations of mismatches: the oracle's own decision trace, formatted (reference/trace.py).

The oracle records a rule-tagged step wherever it decides a predicted value. A mismatch is
explained by the step that produced the final value of what differs (the last step that
changed it), with its reason, and by the chain of steps that led there (the value's other
steps and, transitively, the earlier steps they followed from: the publication a hit reused,
the eviction that took a page out of the index). Nothing here works out a rule again: a rule
changed in the spec changes the oracle's steps, and the explanations follow.

A failure on an aggregate counter names the counter's rule (CR-MET-*) and cites the per-request
steps it adds up, or the file's eviction steps for records, pools and reclaimed resources.
"""
from __future__ import annotations

from reference.requests import input_steps
from reference.trace import chain, deciding

from . import oracle

MAX_CHAIN = 8
"""Steps shown per failure: the deciding step and the latest of its causes."""
MAX_CITED = 4
"""Requests whose steps an aggregate counter's failure cites."""


def step_json(step) -> dict:
    """A step as a failure's chain shows it: rule, value, reason, and whose step it is."""
    out = {"rule": step.rule, "value": step.value, "why": step.why}
    if step.owner is not None:
        out["request"] = step.owner
    return out


class Explainer:
    """Formats the trace of one prediction (conformance.judge.oracle.Prediction)."""

    def __init__(self, engine, flags, prediction):
        self.engine = engine
        self.flags = flags
        self.trace = prediction.trace
        self.parsed = prediction.parsed
        self.pred = prediction.responses
        self.source = getattr(prediction, "source", None)

    # --- the steps of a value ----------------------------------------------------------------
    def steps(self, i: int, value: str) -> list:
        return self.trace.steps_of(i, value) if self.trace is not None else []

    def explained(self, steps: list) -> tuple[str | None, str, list]:
        """(rule, why, chain) of the value these steps decided: the last step that changed it."""
        if not steps:
            return None, "the oracle's trace has no step for this value", []
        head = deciding(steps)
        return head.rule, head.why, [step_json(s) for s in chain(steps)][-MAX_CHAIN:]

    # --- per-request facts --------------------------------------------------------------------
    def request_field(self, i: int, key: str, want: dict, have: dict) -> tuple[str | None, str, list]:
        if key == "publications":
            return self.publications(i, want.get("publications", []), have.get("publications"))
        return self.explained(self.steps(i, key))

    def publications(self, i: int, want: list, have) -> tuple[str | None, str, list]:
        """The step of the first publication that differs: its count and point, else its status;
        for a publication the oracle does not make, the step that says why none is made there."""
        if not isinstance(have, list):
            return "CR-MET-13", "publications must be a list", []
        for k in range(max(len(want), len(have))):
            w = want[k] if k < len(want) else None
            h = have[k] if k < len(have) else None
            if w == h:
                continue
            if w is None:
                point = h.get("point") if isinstance(h, dict) else None
                return self.explained(self.steps(i, f"publications.{point}") or self.steps(i, f"publications[{k}]"))
            if isinstance(h, dict) and all(h.get(x) == w.get(x) for x in ("point", "tokens", "pages")):
                return self.explained(self.steps(i, f"publications[{k}].status"))
            return self.explained(self.steps(i, f"publications[{k}]"))
        return "CR-PUB-8", "publication attempts differ", []

    def status(self, i: int) -> tuple[str | None, str, list]:
        return self.explained(self.steps(i, "status"))

    def input_tokens(self, i: int, observed=None) -> tuple[str | None, str, list]:
        """The steps that decided n: the trace's, or for a request the prediction does not cover,
        the oracle's input steps of its parse (reference.requests.input_steps).

        On an `hf` engine the loader's step decides a text-only n, but the chat template's
        rendering decides it as much (TOK-HF-4). Which one to blame is told by evidence: when the
        other loader reads the same request to the observed n, the loader rule stands; when
        neither loader gives it, the rendered prompt differs, and TOK-HF-4 is the rule."""
        steps = self.steps(i, "input_tokens")
        if not steps and self.parsed is not None and i < len(self.parsed.requests):
            steps = input_steps(self.engine, self.parsed, self.parsed.requests[i])
        rule, why, chain = self.explained(steps)
        if rule in ("TOK-HF-2", "TOK-HF-3") and isinstance(observed, int) and self._rendered(i):
            other = oracle.input_length_under_other_loader(self.engine, self.flags, self.source, i)
            if other is not None and other[1] != observed:
                why = (f"the chat template's rendering decides n with the loader (spec/hf-tokenizer.md TOK-HF-4: "
                       f"jinja2 with trim_blocks and lstrip_blocks, the generation prompt after any last message, "
                       f"the file's keywords over the engine's); neither this loader nor {other[0]} (n = {other[1]}) "
                       f"reads the prompt to {observed}, so the rendered text differs; {why}")
                return "TOK-HF-4", why, chain
        return rule, why, chain

    def _rendered(self, i: int) -> bool:
        """Whether request `i` is text only and rendered by the chat template."""
        if self.parsed is None or i >= len(self.parsed.requests) or self.parsed.requests[i].spans:
            return False
        return self.parsed.template.get("apply_chat_template", True) is not False

    def output(self, i: int, detail: str) -> str:
        """Why a greedy output must equal the bypass replay's: what the request reused."""
        reused = self.steps(i, "reused_tokens")
        cc = self.pred[i].get("context_cache") if i < len(self.pred) else None
        count = (cc or {}).get("reused_tokens", 0)
        where = (f"request {i} reused {count} tokens ({reused[-1].rule}: {reused[-1].why})" if count and reused
                 else f"request {i} reused {count} tokens" if count else f"request {i} reused nothing")
        return f"{where}; its greedy output must equal the bypass replay's: {detail}"

    def output_chain(self, i: int) -> list:
        """The steps an output depends on: how its input was tokenized and what it reused."""
        steps = self.steps(i, "input_tokens") + self.steps(i, "reused_tokens")
        return [step_json(s) for s in chain(steps)][-MAX_CHAIN:]

    def with_chains(self, failures: list) -> list:
        """Output failures (CR-OUT-*, which compare outputs, not predicted values) get the chain of
        the steps their request's output depends on."""
        for f in failures:
            if not f.chain and isinstance(f.request, int) and (f.rule or "").startswith("CR-OUT-"):
                f.chain = self.output_chain(f.request)
        return failures

    # --- aggregate counters ------------------------------------------------------------------------
    def counter(self, key: str, expected, observed) -> tuple[str, list]:
        """(why, chain) of a counter: the requests it adds up and their deciding steps, or the
        file's steps for records, pools and reclaimed resources."""
        facts = [p.get("context_cache") or {} for p in self.pred]
        pick = {
            "admitted_sequences": ("status", lambda c: True),
            "hit_sequences": ("matched_tokens", lambda c: c.get("matched_tokens", 0) > 0),
            "media_aware_sequences": ("media_aware", lambda c: c.get("media_aware")),
            "lookup_bypass_sequences": ("lookup_bypass", lambda c: c.get("lookup_bypass")),
            "forced_cold_sequences": ("forced_cold", lambda c: c.get("forced_cold")),
            "hybrid.restores": ("hybrid_restore", lambda c: c.get("hybrid_restore")),
            "matched_tokens": ("matched_tokens", lambda c: c.get("matched_tokens")),
            "reused_tokens": ("reused_tokens", lambda c: c.get("reused_tokens")),
            "hybrid.snapshot_pressure_skips": ("snapshot_pressure_skips", lambda c: c.get("snapshot_pressure_skips")),
            "speculative.full_page_replays": ("reused_tokens", lambda c: True),
        }
        warm = f" plus {self.flags.warmup} warmup admission(s)" if self.flags.warmup else ""
        if key.startswith("plans."):
            kind = key.split(".")[1]
            value, test = "plan", lambda c: c.get("plan") == kind
        elif key.startswith("publications."):
            value, test = "publications", lambda c: c.get("publications")
        else:
            value, test = pick.get(key, (None, None))
        if value is not None:
            who = [i for i, c in enumerate(facts) if test(c)]
            if key in ("matched_tokens", "reused_tokens"):
                said = f"the oracle's per-request {key}: {({i: facts[i][key] for i in who}) or 'all 0'}"
            elif value == "publications":
                said = ("publication attempts per request in the oracle: "
                        f"{({i: len(facts[i]['publications']) for i in who}) or 'none'}")
            else:
                said = f"the oracle counts requests {who or 'none'} of this file{warm}"
            return said, self._cited(who, value)
        return self._file_counter(key)

    def _cited(self, who: list, value: str) -> list:
        """The deciding step of the value of each request a counter adds up (the first few)."""
        out = []
        for i in who[:MAX_CITED]:
            if value == "publications":
                steps = [s for s in (self.trace.requests.get(i, ()) if self.trace else ())
                         if s.value.startswith("publications[")]
            else:
                steps = self.steps(i, value)
            if steps:
                out.append(step_json(deciding(steps)))
        return out

    def _file_counter(self, key: str) -> tuple[str, list]:
        """Records, pools and reclaimed resources: what the file's eviction steps say."""
        steps = [s for s in (self.trace.file if self.trace else ()) if s.value in ("records", "pages", "recency")]
        evicted = sum(1 for s in steps if s.value == "records")
        if key.startswith("records."):
            why = f"the oracle evicts {evicted} record(s) in this file (CR-PUB-4 keys records by endpoint)"
        elif key.startswith(("reclaimed_resources.", "resource_pools.")):
            why = (f"a resource returns to the free pool, and counts as reclaimed, when the last record holding it "
                   f"is evicted and no sequence uses it; the oracle evicts {evicted} record(s) in this file")
        else:
            why = "counted as spec/context-reuse.md section 10 says"
        return why, [step_json(s) for s in chain(steps)][-MAX_CHAIN:]

    def batch_failures(self) -> list:
        """The file's steps of batches that fail (CR-BATCH-5, CR-CAP-8, CR-SUP-8)."""
        return [step_json(s) for s in (self.trace.file if self.trace else ())
                if s.value.startswith("batch[")][-MAX_CHAIN:]

    def prefill(self, key: str, expected, observed) -> tuple[str, list]:
        who = [i for i, p in enumerate(self.pred) if p.get("status") == "ok"]
        return ("prefill.total_runs counts batches whose prefill ran (warmup excluded); reused_tokens adds reused, "
                "computed_tokens adds n - reused over their sequences"), self._cited(
            [i for i in who if (self.pred[i].get("context_cache") or {}).get("reused_tokens")], "reused_tokens")

    def decode(self, ids: list) -> str:
        """The text generated ids print as, the end-of-sequence token left out: bytes for bytes-v1
        (spec/tokenizer.md section 4), the engine's tokenizer's decode for an `hf` one."""
        ids = [t for t in ids if t != self.engine.eos_token_id]
        if not self.engine.hf:
            return bytes(t for t in ids if 0 <= t < 256).decode("latin-1")
        return self.engine.hf_tokenizer().decode(ids, skip_special_tokens=True)
