"""How a case runs: the steps of spec/RUNNING.md section 4, for any adapter.

support -> engine -> (negative cases: refusal) -> templates -> run -> bypass replay ->
prediction -> comparisons. Each step that cannot proceed settles the verdict with a reason;
nothing here catches a crash to call it NOT_SUPPORTED.
"""
from __future__ import annotations

import json
import os
import shutil
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import KvconformError
from ..adapters.base import (Adapter, AdapterError, BuildRefused, Engine, RunResult, is_greedy,
                             missing_capabilities, requirements)
from ..adapters.engines import cache_root, digest
from ..cases.case import Case, bypass_replay_of, materialize, resolve_outputs, template_refs
from ..generate.example import replay
from ..judge import oracle
from ..judge.compare import MISSING, dotted_get, leaves
from ..judge.explain import Explainer
from ..judge.judging import judge, observable, prediction_refused, same_reason, shape_failures
from ..judge.numerical_judge import check_outputs
from ..judge.transcripts import knowledge, predict_known
from ..judge.verdicts import CaseResult, Failure, Verdict
from ..materialize import NotExpressible, materialize_for
from ..report.pagemap import case_page_map

# Keys of an engine description the oracle reads (spec/engine.md section 2): a bundled build
# must write exactly what the build arguments derive.
DESCRIPTION_KEYS = ("tokens_per_page", "max_input_len", "max_kv_cache_capacity", "max_batch_size",
                    "kv_pool_pages", "kv_cache_dtype", "layer_kinds", "num_kv_heads", "head_dim",
                    "recurrent", "vision", "audio", "deployment", "tokenizer", "vocab_size", "eos_token_id",
                    "image_token_id")


class Settled(Exception):
    """A step decided the verdict; the case stops there."""


def run_case(case: Case, adapter: Adapter, manifest: dict | None, manifest_error: str = "") -> CaseResult:
    """Run one case against one adapter and return its verdict with the evidence."""
    result = CaseResult(case.id, case.rules, case.mandatory, case.source(), case.section)
    start = time.monotonic()
    try:
        if manifest is None:
            result.settle(Verdict.ERROR, f"no capability manifest: {manifest_error}")
        else:
            Runner(case, adapter, manifest, result).run()
    except Settled:
        pass
    except AdapterError as e:
        result.settle(Verdict.ERROR, str(e))
        result.stderr_tail = e.stderr_tail
    except KvconformError as e:
        result.settle(Verdict.ERROR, str(e))
    except Exception as e:  # the kit could not run the case: never a PASS
        result.settle(Verdict.ERROR, f"{type(e).__name__}: {e}")
        result.stderr_tail = "\n".join(traceback.format_exc().splitlines()[-12:])
    result.duration_s = time.monotonic() - start
    if result.verdict in (Verdict.PASS, Verdict.NOT_SUPPORTED):
        result.stderr_tail = ""  # evidence only where something needs explaining
    if result.verdict < Verdict.TIMEOUT:
        result.invocations = []  # the files are kept only beside a failing case's reproducer
    return result


class Runner:
    """The steps for one case; a step that decides the verdict raises Settled."""

    def __init__(self, case: Case, adapter: Adapter, manifest: dict, result: CaseResult):
        self.case, self.adapter, self.manifest, self.result = case, adapter, manifest, result

    def settle(self, verdict: Verdict, reason: str, stderr: str = ""):
        self.result.settle(verdict, reason)
        if stderr:
            self.result.stderr_tail = stderr
        raise Settled

    def fail(self, failure: Failure):
        self.result.add(failure)
        raise Settled

    def run(self) -> None:
        profile = self.case.runtime.get("semanticsProfile")
        if profile is not None and profile not in self.case.profiles:
            held = ", ".join(r for r in self.case.rules if not oracle.load_profile(profile).holds(r))
            self.settle(Verdict.NOT_SUPPORTED, f"not part of the {profile} profile"
                        + (f" ({held} does not hold there)" if held else f" (the case holds in {', '.join(self.case.profiles)})"))
        fixed = self.adapter.fixed_engine()
        if fixed is not None:
            self.case = self.materialized(fixed)
        case = self.case
        need = requirements(case.doc, case.engine_args, case.runtime)
        missing = missing_capabilities(need, self.manifest)
        if missing:
            self.settle(Verdict.NOT_SUPPORTED, f"the backend does not declare {', '.join(missing)}")
        handle, engine = self.engine()
        self.result.engine = handle.key
        flags = oracle.flags_of(case.runtime)
        try:
            refused = oracle.rejection(engine, flags)
        except oracle.OutOfScope as e:
            self.settle(Verdict.NOT_SUPPORTED, f"outside spec {oracle.SPEC_VERSION}: {e}")
        wanted = (case.meta.get("expect") or {}).get("rejected")
        if wanted and (refused is None or refused.rule != wanted["rule"]):
            self.settle(Verdict.ERROR, f"oracle self-check: the case expects a refusal by {wanted['rule']}, the oracle "
                                       f"{'accepts the deployment' if refused is None else 'refuses by ' + refused.rule}")
        if case.negative:
            return self.negative(handle, engine, flags)
        if "_policy_switch" in case.doc:
            return self.several_files()
        doc = materialize(case.doc, case.base_dir, handle.directory)
        replay = None
        if template_refs(doc) and refused is None:
            doc, replay = self.resolve_templates(handle, doc)
        greedy = is_greedy(doc)
        wants_replay = replay is None and case.compare_outputs and greedy and refused is None
        main, early = self.run_and_replay(handle, doc, wants_replay)
        if refused is not None or main.outcome == "rejected":
            return self.rejection(refused, main)
        if main.outcome == "input_error":
            self.fail(Failure(None, "input", "the file runs", f"refused as bad input: {main.message}",
                              "the oracle accepts this request file, so the backend must run it"))
        if replay is None and case.compare_outputs and greedy:
            replay = early or self.invoke(handle, bypass_replay_of(doc), "bypass replay")
            if replay.outcome != "ok":
                self.fail(Failure("CR-OUT-1", "bypass replay", "the file runs", replay.outcome,
                                  f"the same file under bypass must run: {replay.message}"))
        self.compare(engine, flags, doc, main, replay if case.compare_outputs and greedy else None)

    def several_files(self) -> None:
        """A generated reproducer whose trace switched the lookup policy for one batch: one request
        file cannot express that (CR-POL-1), so its batches run as successive request files on one
        runtime instance (CR-BATCH-3), exactly as the generated test ran them."""
        if not getattr(self.adapter, "sessions", False):
            self.settle(Verdict.NOT_SUPPORTED, "the case sends several request files to one runtime instance "
                                               "(_policy_switch); this adapter runs one file per process")
        base_dir = str(self.case.base_dir)
        for failure in replay(self.case.doc, "replay", self.adapter, self.manifest, base_dir, Path(base_dir)):
            self.result.add(failure)

    # --- step 1b: materialization for a fixed engine -------------------------------------------------------
    def materialized(self, fixed: Engine) -> Case:
        """The case laid out for the one engine under test (spec/RUNNING.md section 4 step 2)."""
        if self.case.meta.get("description_edits"):
            self.settle(Verdict.NOT_SUPPORTED, "cannot be expressed on this engine: the case hands the runtime a "
                                               "hand-written engine description (description_edits), and the "
                                               "engine under test is not the kit's to edit")
        try:
            made = materialize_for(self.case, fixed.config, cache_root() / "materialized-media")
        except NotExpressible as e:
            self.settle(Verdict.NOT_SUPPORTED, f"cannot be expressed on this engine: {e}")
        self.result.materialized = made.doc
        self.result.details["materialized"] = {"adaptations": made.adaptations}
        return Case(self.case.path, made.doc)

    # --- step 2: the engine ---------------------------------------------------------------------------
    def engine(self) -> tuple[Engine, object]:
        args = self.case.engine_args
        fixed = self.adapter.fixed_engine()
        if fixed is not None:                 # materialized for it: its own description is the truth
            return fixed, self.engine_of(fixed)
        try:
            derived = oracle.derive_engine(args)
        except oracle.InputError as e:
            return self.refused_build(f"{e.path}: {e.message}")
        try:
            handle = self.adapter.engine_for(args)
        except BuildRefused as e:
            self.fail(Failure(None, "build", "an engine", f"refused: {e}",
                              "spec/engine.md accepts these build arguments"))
        want = derived.to_config()
        for key in DESCRIPTION_KEYS:
            if _norm(want.get(key)) != _norm(handle.config.get(key)):
                self.result.add(Failure("CR-CAP-1" if key == "kv_pool_pages" else None,
                                        f"{handle.directory or 'engine'}/config.json: {key}", want.get(key),
                                        handle.config.get(key),
                                        "spec/engine.md derives the description from the build arguments"))
        if self.result.failures:
            raise Settled
        edits = self.case.meta.get("description_edits")
        if edits:
            handle = self.edited(handle, edits)
        return handle, self.engine_of(handle)

    def edited(self, handle: Engine, edits: dict) -> Engine:
        """The built engine with a hand-written description (spec/RUNNING.md section 4 step 2):
        a copy of its folder whose config.json has `edits` over the built one, the other files
        linked. Only where the runtime reads that config.json (the bundled builder's engines)."""
        if not getattr(self.adapter, "edits_descriptions", False):
            self.settle(Verdict.NOT_SUPPORTED, "the case hands the runtime a hand-written engine description "
                                               "(description_edits); this adapter's engines are not the kit's "
                                               "to edit")
        self.result.details["description_edits"] = dict(edits)
        if handle.directory is None:             # the oracle posing as a backend reads the description only
            return Engine(f"{handle.key}-{digest(edits)}", {**handle.config, **edits})
        source = Path(handle.directory)
        raw = json.loads((source / "config.json").read_text())
        folder = cache_root() / "described" / f"{handle.key}-{digest(edits)}"
        if not (folder / "config.json").exists():
            tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            for entry in source.iterdir():
                if entry.name != "config.json":
                    (tmp / entry.name).symlink_to(entry.resolve())
            (tmp / "config.json").write_text(json.dumps({**raw, **edits}, indent=1))
            try:
                tmp.rename(folder)
            except OSError:          # another worker wrote it first: the same content
                shutil.rmtree(tmp, ignore_errors=True)
        return Engine(folder.name, json.loads((folder / "config.json").read_text()), str(folder))

    def engine_of(self, handle: Engine):
        try:
            return handle.description
        except oracle.InputError as e:
            self.settle(Verdict.ERROR, f"the oracle cannot read the engine description: {e.path}: {e.message}")

    def refused_build(self, message: str):
        """The spec refuses these build arguments: the backend's build must refuse them too."""
        try:
            handle = self.adapter.engine_for(self.case.engine_args)
        except BuildRefused as e:
            self.result.details["build_refused"] = str(e)
            raise Settled
        self.fail(Failure("CR-CAP-1" if "maxKVPoolPages" in message else None, "build", f"refused: {message}",
                          "built", "spec/engine.md section 1 refuses these build arguments"))

    # --- step 3: negative cases --------------------------------------------------------------------------
    def negative(self, handle: Engine, engine, flags) -> None:
        neg, case = self.case.negative, self.case
        doc = materialize(case.doc, case.base_dir, handle.directory)
        try:
            oracle.parse(doc, case.base_dir, engine, flags)
            self.settle(Verdict.ERROR, "negative case, but the oracle accepts the file (a case or oracle bug)")
        except oracle.InputError as e:
            if e.path != neg["path"]:
                self.settle(Verdict.ERROR, f"negative case expects an input error at {neg['path']}, "
                                           f"the oracle reports {e.path}: {e.message}")
            expected = f"input error at {e.path}: {e.message}"
        got = self.invoke(handle, doc, "run")
        rule = next((r for r in case.rules), None)
        if got.outcome != "input_error" or got.wrote_output and got.responses:
            observed = got.outcome if got.outcome != "ok" else f"ran ({len(got.responses or [])} responses)"
            self.fail(Failure(rule, "exit code", "2, nothing written", f"{got.exit_code}: {observed}",
                              f"bad input is refused before anything runs: {expected}"))
        self.result.details["refusal"] = {"path": got.error_path, "message": got.message[:300]}
        if neg.get("message_contains") and got.error_path not in (None, neg["path"]):
            self.result.details["refusal"]["note"] = f"the backend names {got.error_path}, the spec {neg['path']}"

    # --- step 4: invocations ---------------------------------------------------------------------------
    def invoke(self, handle: Engine, doc: dict, what: str) -> RunResult:
        return self.usable(self.run_file(handle, doc), what)

    def run_file(self, handle: Engine, doc: dict) -> RunResult:
        """One request file on a fresh runtime instance, as the backend answered (not yet judged)."""
        session = self.adapter.start(handle, self.case.runtime)
        try:
            return session.run(doc, self.case.base_dir)
        finally:
            session.close()

    def run_and_replay(self, handle: Engine, doc: dict, replay: bool) -> tuple[RunResult, RunResult | None]:
        """The run and, when wanted, its bypass replay. A backend of one process per file runs
        both at once: the replay does not depend on the run, and each file costs a process start
        and an engine load that overlap on separate cores."""
        if not replay or self.adapter.sessions:
            return self.invoke(handle, doc, "run"), None
        pool = ThreadPoolExecutor(2)
        try:
            run = pool.submit(self.run_file, handle, doc)
            bypass = pool.submit(self.run_file, handle, bypass_replay_of(doc))
            main, early = run.result(), bypass.result()
        finally:            # interrupted: return at once; the adapter's close() ends the processes
            pool.shutdown(wait=False, cancel_futures=True)
        return self.usable(main, "run"), self.usable(early, "bypass replay")

    def usable(self, got: RunResult, what: str) -> RunResult:
        self.result.invocations.append((what, got))
        if got.outcome == "timeout":
            self.settle(Verdict.TIMEOUT, f"{what}: {got.message}", got.stderr_tail)
        if got.outcome == "crash":
            self.settle(Verdict.ERROR, f"{what}: {got.message}", got.stderr_tail)
        if got.stderr_tail and not self.result.stderr_tail:
            self.result.stderr_tail = got.stderr_tail
        return got

    def resolve_templates(self, handle: Engine, doc: dict) -> tuple[dict, RunResult]:
        """Resolve `{{output:K}}` from a bypass run of the requests before each reference.

        The bypass run goes batch group by batch group; its concatenated responses are the bypass
        replay of the resolved file (CR-BATCH-3: a runtime instance sees earlier files' records),
        so they are reused as the replay. Without sessions, each group re-runs the resolved prefix
        on a fresh instance and the last run is the replay.
        """
        size = self.case.batch_size()
        refs = template_refs(doc)
        cuts = sorted({(i // size) * size for i in refs}) + [len(doc["requests"])]
        texts: dict[int, str] = {}
        responses: list = []
        session = self.adapter.start(handle, self.case.runtime) if self.adapter.sessions else None
        start, last = 0, None
        try:
            for cut in cuts:
                doc = resolve_outputs(doc, texts, upto=cut)
                part = bypass_replay_of(dict(doc, requests=doc["requests"][start if session else 0:cut]))
                if not part["requests"]:
                    continue
                if session:
                    got = self.usable(session.run(part, self.case.base_dir), "bypass run for {{output:K}}")
                else:
                    got = self.invoke(handle, part, "bypass run for {{output:K}}")
                if got.outcome != "ok":
                    self.settle(Verdict.ERROR, f"the bypass run that resolves {{{{output:K}}}} ended "
                                               f"{got.outcome}: {got.message}")
                base = start if session else 0
                shifted = [dict(r, request_idx=base + k) for k, r in enumerate(got.responses or [])]
                responses = (responses + shifted) if session else shifted
                for r in shifted:
                    texts[r["request_idx"]] = r.get("output_text", "")
                start, last = cut, got
        finally:
            if session:
                session.close()
        profile = last.profile if last else None
        return doc, RunResult("ok", responses, profile, None, 0, wrote_output=True)

    # --- step 5: refusals ------------------------------------------------------------------------------
    def rejection(self, refused, main: RunResult) -> None:
        if refused is None:
            self.fail(Failure(None, "deployment", "accepted", f"refused (exit {main.exit_code}): {main.message}",
                              "no CR-SUP rule or CR-HYB-2 refuses this engine and these flags"))
        if main.outcome == "input_error":
            where = f"{main.error_path}: " if main.error_path else ""
            self.fail(Failure(refused.rule, "deployment", f"the {refused.rule} refusal", "refused as bad input",
                              f"the backend exited {main.exit_code} with {where}{main.message[:200]}; a deployment "
                              f"{refused.rule} refuses is refused at start-up as such (\"{refused.message}\"; "
                              "spec/RUNNING.md section 2: a non-zero exit other than 2, which means bad input)"))
        if main.outcome != "rejected":
            self.fail(Failure(refused.rule, "deployment", f"refused: {refused.message}",
                              f"{main.outcome} (exit {main.exit_code})",
                              "the runtime must refuse before running any request"))
        if observable(self.manifest, "rejection_messages") and not same_reason(refused.message, main.message):
            self.fail(Failure(refused.rule, "rejection message", refused.message, main.message,
                              "the message must name the same reason"))

    # --- steps 6-7: prediction and comparison -----------------------------------------------------------
    def compare(self, engine, flags, doc: dict, main: RunResult, replay: RunResult | None) -> None:
        problems = shape_failures(main, replay, len(doc["requests"]))
        if problems:
            for p in problems:
                self.result.add(p)
            raise Settled
        accepted = (oracle.accepted_counts(main.responses)
                    if observable(self.manifest, "last_verification_accepted") else None)
        try:
            parsed = oracle.parse(doc, self.case.base_dir, engine, flags)    # once: the prediction reuses it
            most = flags.max_generate_length or parsed.max_generate_length
            known = knowledge(main, replay, engine, most)
            prediction, coverage = predict_known(engine, flags, doc, self.case.base_dir, known, most, accepted,
                                                 parsed=parsed)
        except oracle.Unreported as e:
            self.settle(Verdict.UNSPECIFIED, f"the counts depend on a fact the backend does not report: {e}")
        except oracle.OutOfScope as e:
            self.settle(Verdict.UNSPECIFIED, f"the {flags.semantics_profile} profile leaves these counts undefined: {e}")
        except oracle.InputError as e:
            self.fail(prediction_refused(e))
        whole = coverage.complete or self.case.meta.get("generated") is not None
        if not whole and self.case.meta.get("expect"):
            coverage.reasons.append("the case's hand-derived counts (which check the oracle) are checked only "
                                    "on a whole prediction")
        if whole:
            self.check_expect(engine, flags, doc, prediction)
        judged: dict = {}
        for f in judge(engine, flags, self.manifest, prediction, main, replay, coverage=coverage, record=judged):
            self.result.add(f)
        self.result.details["judged"] = dict(judged, **coverage.to_json())
        handle = self.adapter.fixed_engine() or self.adapter.engine_for(self.case.engine_args)
        found, self.result.details["reference"] = check_outputs(      # against the numerical reference
            self.manifest, handle.directory, engine, doc, self.case.base_dir, prediction.parsed,
            prediction.responses, main.responses) if self.case.compare_outputs else ([], {})
        for f in Explainer(engine, flags, prediction).with_chains(found):
            self.result.add(f)
        self.result.details["page_map"] = case_page_map(engine, flags, prediction, main.responses, main.profile,
                                                        self.result.failures)
        if not coverage.complete and not self.result.failures:
            self.nothing_it_is_about(judged, coverage)

    def nothing_it_is_about(self, judged: dict, coverage) -> None:
        """A case none of whose counts could be predicted is NOT_SUPPORTED, even though its outputs
        were compared (and agree): what it is about was not judged (spec/RUNNING.md section 6).
        A case about outputs (CR-OUT) is judged by its outputs."""
        about_outputs = any(r.startswith("CR-OUT-") for r in self.case.rules)
        if judged.get("counts") or about_outputs and judged.get("outputs"):
            return
        self.settle(Verdict.NOT_SUPPORTED, "none of the counts this case is about could be predicted: "
                    + "; ".join(coverage.reasons)
                    + (f" (its {judged['outputs']} output(s) were compared with the bypass replay and agree)"
                       if judged.get("outputs") else ""))

    def check_expect(self, engine, flags, doc: dict, prediction) -> None:
        """A case's hand-derived `expect` checks the oracle itself: a mismatch is the kit's ERROR."""
        expect = self.case.meta.get("expect")
        if not expect or "rejected" in expect:
            return
        given = self.case.meta.get("generated")
        if given is not None:
            tokens = [oracle.parse_generated(g) for g in given]
            prediction = oracle.predict(engine, flags, doc, self.case.base_dir, tokens,
                                        self.case.meta.get("last_accepted"))
        for section in ("context_cache", "prefill"):
            for key, value in leaves(expect.get(section) or {}):
                got = dotted_get(prediction.profile.get(section) or {}, key)
                got = None if got is MISSING else got
                if got != value:
                    self.settle(Verdict.ERROR, f"oracle self-check: the case expects {section}.{key} = {value}, "
                                               f"the oracle predicts {got}")
        for i, want in enumerate(expect.get("requests") or []):
            if want is None or i >= len(prediction.responses):
                continue
            p = prediction.responses[i]
            facts = dict(p.get("context_cache") or {}, status=p["status"], input_tokens=p["input_tokens"])
            for key, value in want.items():
                if facts.get(key) != value:
                    self.settle(Verdict.ERROR, f"oracle self-check: the case expects request {i} {key} = {value}, "
                                               f"the oracle predicts {facts.get(key)}")


def _norm(value):
    """A description value as compared: unset entries dropped, and an hf profile without the
    place of its files (a build copies them into the engine folder, TOK-HF-1)."""
    if not isinstance(value, dict):
        return value
    return {k: v for k, v in value.items() if v not in (None, False, {}) and not (k == "files" and "profile" in value)}
