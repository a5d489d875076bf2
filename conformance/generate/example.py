"""One generated example: a drawn engine and a sequence of batches, checked after every batch.

With a session-capable adapter each step sends one batch, as its own request file, to three
runtime instances kept for the whole example: the backend under the drawn lookup policy, the
backend under `bypass` (the replay of CR-OUT-1, and the source of `{{output:K}}` answers),
and the oracle. After every step the backend's counters, per-request facts and outputs are
judged exactly as a case is (`judging.judge`), with request indices of the whole example.
A request file per step on one runtime instance is the same as one file holding all the
batches (CR-BATCH-3), which is what the reproducer is: the trace written as one case file.

Without sessions (the command adapter) the example is run once, at the end, as that case file.
"""
from __future__ import annotations

import copy
from pathlib import Path

from ..adapters.base import Adapter
from ..cases.case import bypass_replay_of, materialize, resolve_outputs
from ..judge import oracle
from ..judge.explain import Explainer
from ..judge.judging import judge, merged_transcripts, prediction_refused, same_reason, shape_failures
from ..judge.numerical_judge import check_outputs, merge_facts
from ..judge.verdicts import Failure, Verdict
from ..materialize import engine_key, write_units
from .draw import Setup, build_request, strip_private


class Mismatch(Exception):
    """The backend disagreed with the oracle or its replay at some step."""

    def __init__(self, failures: list[Failure]):
        super().__init__("; ".join(f.line() for f in failures[:3]))
        self.failures = failures


def _shift(responses: list, offset: int, batch: int) -> list:
    return [dict(r, request_idx=offset + k, batch_idx=batch) if isinstance(r, dict) else r
            for k, r in enumerate(responses or [])]


class Example:
    """The state of one example; `step` runs one batch and raises Mismatch on a disagreement."""

    def __init__(self, family: str, adapter: Adapter, manifest: dict, setup: Setup, media_dir: Path,
                 base_dir: str):
        self.family, self.adapter, self.manifest, self.setup = family, adapter, manifest, setup
        self.media_dir, self.base_dir = media_dir, base_dir
        self.handle = adapter.engine_for(setup.engine_args)
        self.engine = self.handle.description
        self.flags = oracle.flags_of(setup.runtime)
        self.requests: list[dict] = []      # drawn requests (with `_index`, templates unresolved)
        self.steps: list[list[dict]] = []
        self.texts: dict[int, str] = {}     # bypass answers, for {{output:K}}
        self.resolved: list[dict] = []
        self.main_responses: list = []
        self.replay_responses: list = []
        self.predicted: list = []
        self.out_of_scope = ""               # why the oracle cannot predict the last batch (profile)
        self.generated: list = []
        self.batches: list = []
        self.sessions = None
        self.warnings: list[Failure] = []
        self.reference: dict | None = None   # requests checked against the numerical reference
        self.refused = oracle.rejection(self.engine, self.flags)

    # --- drawing ----------------------------------------------------------------------------------
    def add_step(self, lora, step_recipes: list[dict]) -> list[dict]:
        """Build one batch from its recipes (requests of earlier batches may be built upon)."""
        earlier = list(self.requests)
        batch = []
        for recipe in step_recipes:
            r = build_request(recipe, self.setup, earlier, self.media_dir)
            if lora:
                r["lora_name"] = lora
            r["_index"] = len(self.requests) + len(batch)
            batch.append(r)
        self.steps.append(batch)
        self.requests += batch
        return batch

    # --- running ----------------------------------------------------------------------------------
    def start(self) -> None:
        if self.adapter.sessions:
            self.sessions = (self.adapter.start(self.handle, self.setup.runtime),
                             self.adapter.start(self.handle, self.setup.runtime),
                             oracle.OracleSession(self.engine, self.flags) if self.refused is None else None)

    def close(self) -> None:
        for s in (self.sessions or ())[:2]:
            s.close()

    def doc_for(self, requests: list[dict], policy: str | None = None, index: int | None = None) -> dict:
        settings = dict(self.setup.settings)
        if index is not None and self.switched(index):
            settings.update(self.setup.switch_settings)
        doc = dict(settings, requests=[strip_private(r) for r in requests])
        if self.setup.hf_engine is not None:       # letters become one-token units of the engine's tokenizer
            for r in doc["requests"]:
                write_units(r, self.setup.hf_engine, self.setup.settings.get("apply_chat_template", True))
        if policy is not None:
            doc["context_cache_lookup_policy"] = policy
        return doc

    def switched(self, index: int) -> bool:
        """Whether step `index` is the drawn policy switch (session adapters only)."""
        return bool(self.adapter.sessions) and index == self.setup.switch_at

    def policy_for(self, index: int) -> str:
        """The lookup policy of step `index`: the drawn one, the other one at the switch."""
        policy = self.setup.settings.get("context_cache_lookup_policy", "use_cache")
        if self.switched(index) and not self.setup.switch_settings:
            policy = "bypass" if policy == "use_cache" else "use_cache"
        return policy

    def step(self, batch: list[dict]) -> None:
        """Run one batch on the backend, its replay and the oracle, and judge it."""
        offset, index = len(self.resolved), len(self.batches)
        doc = resolve_outputs(self.doc_for(batch, self.policy_for(index), index), self.texts)
        doc = materialize(doc, self.base_dir, self.handle.directory)   # LoRA paths name the engine's files
        main_s, replay_s, oracle_s = self.sessions
        main = self._usable(main_s.run(doc, self.base_dir), "run")
        if self.refused is not None or main.outcome == "rejected":
            self._rejection(main)
            return
        replay = self._usable(replay_s.run(bypass_replay_of(doc), self.base_dir), "bypass replay")
        if main.outcome != "ok" or replay.outcome != "ok":
            raise Mismatch([Failure(None, "input", "the batch runs", f"{main.outcome}/{replay.outcome}: "
                                    f"{main.message or replay.message}", "the oracle accepts this batch", offset)])
        problems = shape_failures(main, replay, len(batch))
        if problems:
            raise Mismatch(problems)
        generated = merged_transcripts(main, replay, self.engine)
        try:
            predicted = oracle_s.run(doc, self.base_dir, generated)
        except oracle.InputError as e:
            raise Mismatch([prediction_refused(e)]) from None
        except oracle.NeedsTranscript as e:
            raise Mismatch([Failure(None, "transcript", "generated tokens", None, str(e), verdict=Verdict.ERROR)])
        except oracle.OutOfScope as e:
            self.out_of_scope = str(e)        # the profile leaves these counts undefined: the example ends here
            return
        self.resolved += doc["requests"]
        self.main_responses += _shift(main.responses, offset, index)
        self.replay_responses += _shift(replay.responses, offset, index)
        self.predicted += _shift(predicted.responses, offset, index)
        self.generated += generated
        failed_before = sum(1 for b in self.batches if b.get("status") != "ok")
        self.batches += [dict(b, batch_idx=index) for b in predicted.batches]
        for r in self.replay_responses[offset:]:
            self.texts[r["request_idx"]] = r.get("output_text", "")
        whole = dict(self.setup.settings, requests=self.resolved, context_cache_lookup_policy=doc.get(
            "context_cache_lookup_policy", "use_cache"))  # explanations follow this batch's policy
        prediction = oracle.Prediction(self.predicted, self.batches, predicted.profile,
                                       oracle.parse(whole, self.base_dir, self.engine, self.flags), self.generated,
                                       predicted.trace)
        main_all = copy.copy(main)
        main_all.responses = self.main_responses
        replay_all = copy.copy(replay)
        replay_all.responses = self.replay_responses
        failures = judge(self.engine, self.flags, self.manifest, prediction, main_all, replay_all,
                         start=offset, failed_before=failed_before)
        found, facts = check_outputs(self.manifest, self.handle.directory, self.engine, doc, self.base_dir,
                                     predicted.parsed, predicted.responses, main.responses, offset)
        failures += Explainer(self.engine, self.flags, prediction).with_chains(found)   # the numerical reference
        self.reference = merge_facts(self.reference, facts)
        for f in failures:
            if f.what.startswith("profile."):
                f.why += f" (after batch {index})"
        if any(f.verdict >= Verdict.TIMEOUT for f in failures):
            raise Mismatch(failures)
        self.warnings += failures  # QUALITY_WARNING and UNSPECIFIED: reported, not shrunk

    def _usable(self, got, what: str):
        if got.outcome in ("timeout", "crash"):
            verdict = Verdict.TIMEOUT if got.outcome == "timeout" else Verdict.ERROR
            raise Mismatch([Failure(None, what, "a result", got.outcome, f"{got.message} {got.stderr_tail[-300:]}",
                                    verdict=verdict)])
        return got

    def _rejection(self, main) -> None:
        if self.refused is None:
            raise Mismatch([Failure(None, "deployment", "accepted", f"refused: {main.message}",
                                    "no CR-SUP rule or CR-HYB-2 refuses this engine and these flags")])
        if main.outcome != "rejected":
            raise Mismatch([Failure(self.refused.rule, "deployment", f"refused: {self.refused.message}",
                                    main.outcome, "the runtime must refuse before running any request")])
        if self.manifest.get("observables", {}).get("rejection_messages") and \
                not same_reason(self.refused.message, main.message):
            raise Mismatch([Failure(self.refused.rule, "rejection message", self.refused.message, main.message,
                                    "the message must name the same reason")])

    # --- the trace as a case file --------------------------------------------------------------------
    def case_doc(self, case_id: str, description: str, rules: list[str]) -> dict:
        """The example so far as one standalone case file (templates kept)."""
        doc = self.doc_for(self.requests)
        doc["_conformance"] = {
            "id": case_id, "description": description, "rules": rules or ["CR-OUT-1"],
            "engine": self.setup.engine_args, "runtime": self.setup.runtime,
            "flags": ["generated", "regression"],
        }
        fixed = self.adapter.fixed_engine()
        if fixed is not None:        # drawn for the engine under test: nothing to lay out again
            doc["_conformance"]["materialized"] = {"engine": engine_key(fixed.config), "engine_config": fixed.config,
                                                   "source_engine": self.setup.engine_args, "adaptations": []}
        k = self.setup.switch_at
        if k is not None and self.adapter.sessions and k < len(self.steps):
            # One request file cannot switch the lookup policy; the trace records where it did, and
            # `replay` runs the batches as separate files on one runtime instance.
            other = self.policy_for(k)
            doc["_policy_switch"] = {"batch": k, "context_cache_lookup_policy": other}
            doc["_conformance"]["description"] += (f" (Batch {k} ran as its own request file under {other} on the "
                                                    "same runtime instance; see _policy_switch.)")
        return doc


def run_whole(example: Example, run_case_doc) -> tuple[int, str]:
    """Adapters without sessions: judge the whole example once, as the case file it would be.
    Returns the number of batches judged (0 when the case could not run here) and, then, why."""
    result = run_case_doc(example.case_doc("generated/pending", "generated example", ["CR-OUT-1"]))
    if result.verdict >= Verdict.TIMEOUT:
        raise Mismatch(result.failures or [Failure(None, "case", "PASS", str(result.verdict), result.reason,
                                                   verdict=result.verdict)])
    example.warnings += result.failures
    if result.verdict == Verdict.NOT_SUPPORTED:
        return 0, result.reason
    size = example.setup.batch_size
    return -(-len(example.requests) // size), ""


def replay(doc: dict, family: str, adapter: Adapter, manifest: dict, base_dir: str, media_dir: Path) -> list[Failure]:
    """Re-run a written trace batch by batch, one request file per batch on one runtime instance,
    honouring its `_policy_switch` (which one request file cannot express): batch `batch` runs
    under the other lookup policy, or, where the switch names settings (`enable_thinking`), under
    those. Returns the failures of the first batch that disagrees, [] when none does."""
    meta = doc["_conformance"]
    settings = {k: v for k, v in doc.items() if k not in ("requests", "_conformance", "_policy_switch")}
    size = settings.get("batch_size", 1)
    switch = doc.get("_policy_switch") or {}
    setup = Setup(meta["engine"], dict(meta.get("runtime", {})), settings, size, [None],
                  switch_at=switch.get("batch"),
                  switch_settings={k: v for k, v in switch.items() if k not in ("batch", "context_cache_lookup_policy")})
    ex = Example(family, adapter, manifest, setup, media_dir, base_dir)
    ex.start()
    try:
        for k in range(0, len(doc["requests"]), size):
            batch = [dict(r, _index=k + j) for j, r in enumerate(doc["requests"][k:k + size])]
            ex.steps.append(batch)
            ex.requests += batch
            ex.step(batch)
    except Mismatch as m:
        return m.failures
    finally:
        ex.close()
    return []
