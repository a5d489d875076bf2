"""`kvconform run --backend openai`: the peer suite against an OpenAI-compatible server.

Everything that can be decided before a request is sent is bad input (exit 2, one line): the
profile, its settings, the URL, the API key's variable, options of the Edge-LLM suite, a server
that cannot be reached, a tokenizer that cannot be loaded. Then every case runs in order and the
same report folder as any run is written (report.json, junit.xml, summary.md, and for each case
that is not PASS its transcript under reproducers/), with the same headline and trust rules:
CONFORMANT only when a complete run judged at least one count and no case ended TIMEOUT, FAIL
or ERROR.
"""
from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path

from ..judge import peer_oracle as oracle

from .. import KvconformError
from ..adapters import choose_backend
from ..adapters.openai import NotOffered, OpenAIClient, ServerFailure
from ..adapters.secrets import display_url
from ..judge.verdicts import Verdict
from ..report.folder import EVIDENCE_SUFFIX, claim_report_folder, safe_name, write_json_atomic
from ..run.interrupts import raise_pending
from ..run.loop import exit_code, print_explanation, print_verdicts, report_files, stop_interrupted
from .run_case import PeerContext, run_case
from .server_info import describe_settings, merge_settings, read_facts, unread_pages
from .scenarios import cases as build_cases
from .summary import PeerReport, peer_note
from .tokens import TokenSource

# Options of the Edge-LLM suite that mean nothing to the peer suite: refused, never ignored.
NOT_FOR_PEERS = ("case", "section", "rule", "shard", "resume", "generated_only", "families", "save_regressions")
ADAPTER_OPTIONS = ("base_url", "api_key_env", "model", "peer_setting", "tokenizer", "device", "executable",
                   "engine_dir", "engine_config", "build_command", "capabilities", "backend_arg")


def parse_settings(profile: str, items: list) -> dict:
    """`--peer-setting KEY=VALUE` pairs, each checked against the profile's settings (their kinds,
    reference/peer_profile.py); a key given twice is bad input."""
    given = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        key, text = key.strip(), text.strip()
        if not sep or not key or not text:
            raise KvconformError(f"--peer-setting {item!r}: expected KEY=N (or KEY=true, KEY=false)")
        if key in given:
            raise KvconformError(f"--peer-setting {key} is given twice: give each setting once")
        given[key] = _setting_value(profile, key, text, item)
        try:
            oracle.check_settings(profile, {key: given[key]})
        except oracle.PeerProfileError as e:
            raise KvconformError(f"--peer-setting: {e}") from None
    return given


def _setting_value(profile: str, key: str, text: str, item: str):
    settings = oracle.SETTINGS[profile]
    kind = next((s.kind for s in oracle.profile_of(profile).settings if s.name == key), None)
    if kind == "bool":
        value = {"true": True, "false": False}.get(text.lower())
        if value is None:
            raise KvconformError(f"--peer-setting {item!r}: expected {key}=true or {key}=false")
        return value
    if kind == "count" and text.lower() in ("none", "unbounded"):
        return None
    if kind in ("choice", "version") or (kind == "interval" and text.lower() == "dense"):
        return text.lower() if kind == "interval" else text
    if kind == "sizes":
        parts = text.strip("[]").split(",")
        if not all(p.strip().isdigit() and len(p.strip()) <= 12 for p in parts):
            raise KvconformError(f"--peer-setting {item!r}: expected {key}=N[,N...] with integers N")
        return [int(p) for p in parts]
    if kind == "fraction":
        try:
            return float(text)
        except ValueError:
            raise KvconformError(f"--peer-setting {item!r}: expected {key}=X with a number X in [0, 1]") from None
    if not text.isdigit():
        raise KvconformError(f"--peer-setting {item!r}: expected KEY=N with an integer N"
                             + ("" if kind else f" ({profile} settings: {', '.join(settings)})"))
    if len(text) > 40:   # an integer still, only far out of any range: the range check says so
        raise KvconformError(f"--peer-setting {key}={text[:20]}...: a {len(text)}-digit integer, far above "
                             f"any {profile} {key}")
    return int(text)


def check_options(args) -> str:
    """The peer profile, after refusing every option that does not apply."""
    choose_backend("openai", {k: getattr(args, k, None) for k in ADAPTER_OPTIONS})
    for key in NOT_FOR_PEERS:
        if getattr(args, key, None):
            raise KvconformError(f"--{key.replace('_', '-')} does not apply to --backend openai (the peer suite has "
                                 "its own cases: select them with -k, list them with --list)")
    if getattr(args, "executor", "local") not in (None, "local"):
        raise KvconformError("--executor applies to the Edge-LLM suite, not to --backend openai")
    if getattr(args, "jobs", 1) != 1:
        raise KvconformError("--jobs does not apply to --backend openai: requests are sent one at a time")
    if not args.base_url:
        raise KvconformError("--backend openai needs --base-url (e.g. http://127.0.0.1:8080)")
    if args.profile is None:
        raise KvconformError(f"--backend openai needs --profile, the peer profile of the server's runtime (one of "
                             f"{', '.join(oracle.PROFILES)}; spec/peer-profiles.md)")
    if args.profile not in oracle.PROFILES:
        raise KvconformError(f"--profile {args.profile}: --backend openai needs a peer profile (one of "
                             f"{', '.join(oracle.PROFILES)})")
    return args.profile


def api_key(args) -> str | None:
    if not args.api_key_env:
        return None
    key = os.environ.get(args.api_key_env)
    if key is None:
        raise KvconformError(f"--api-key-env {args.api_key_env}: the environment variable is not set")
    if not key.strip():
        raise KvconformError(f"--api-key-env {args.api_key_env}: the environment variable is set but empty")
    return key


def rerun_command(args, case_id: str) -> str:
    """The command that re-runs one case, with the tokenizer and report folders as they were given:
    run from the folder the run started in. No working directory of this machine is written into
    the report (a committed report names no path of the machine that made it)."""
    argv = ["kvconform", "run", "--backend", "openai", "--base-url", display_url(args.base_url), "--profile",
            args.profile]
    if args.model:
        argv += ["--model", args.model]
    if args.api_key_env:
        argv += ["--api-key-env", args.api_key_env]
    if args.tokenizer:
        argv += ["--tokenizer", str(args.tokenizer)]
    for item in args.peer_setting or []:
        argv += ["--peer-setting", item]
    argv += ["--timeout", f"{args.timeout:g}", "-k", case_id,
             "--report", str(Path(args.report) / "reruns" / safe_name(case_id)), "--force"]
    return shlex.join(argv)


def _select(all_cases: list, keywords: list | None, exclude: list | None = None) -> list:
    import fnmatch

    def matches(case_id: str, texts: list) -> bool:
        return any(k in case_id or fnmatch.fnmatch(case_id, k) for k in texts)
    chosen = [c for c in all_cases if (not keywords or matches(c.id, keywords)) and not matches(c.id, exclude or [])]
    if not chosen:
        options = " ".join([f"-k {k}" for k in keywords or []] + [f"--exclude {k}" for k in exclude or []])
        raise KvconformError(f"{options}: selects no peer case (kvconform run --backend openai --list names them)")
    return chosen


def vision_note(profile: str, tokens: TokenSource) -> dict | None:
    """Whether the model takes images (its folder has an image processor) and, if so, why image
    prompts are not judged where they are not: None for a text model."""
    if tokens.vision is None:
        return None
    if "images" not in oracle.profile_of(profile).features:
        why = f"the {profile} profile does not state how its runtime keys cached blocks by image"
    else:
        why = tokens.image_problem()
    return {"processor": tokens.vision.processor, "images_not_judged": why}


def main(args) -> int:
    profile = check_options(args)
    given = parse_settings(profile, args.peer_setting)
    client = OpenAIClient(args.base_url, model=args.model, api_key=api_key(args), timeout=args.timeout)
    try:
        return _run(args, profile, given, client)
    finally:
        client.close()


def _run(args, profile: str, given: dict, client: OpenAIClient) -> int:
    try:
        client.get("/v1/models")
    except NotOffered:
        pass
    except ServerFailure as e:
        raise KvconformError(f"cannot start the openai adapter: {e.message}") from None
    facts = read_facts(client, profile, args.model)
    tokens = TokenSource(client, profile, args.tokenizer)     # bad input first: one line, nothing else printed
    problem = tokens.usable()
    if problem:
        raise KvconformError(problem)
    if facts.runtime not in (None, profile):
        print(f"kvconform run: warning: the server's API looks like {facts.runtime}, not {profile}: the --profile "
              "may be wrong", file=sys.stderr)
    settings, origin = merge_settings(profile, given, facts)
    for line in unread_pages(facts, given):
        print(f"kvconform run: warning: {line}", file=sys.stderr)
    print(f"kvconform run: {profile} settings, each with where it came from:", file=sys.stderr)
    for line in describe_settings(settings, origin, facts):
        print(f"  {line}", file=sys.stderr)
    try:
        plan = _select(build_cases(profile, settings, tokens.layout_ids, facts, tokens.image_plan()), args.keyword,
                       args.exclude)
    except ServerFailure as e:
        raise KvconformError(f"cannot lay the peer cases out on the server's tokens: {e.message}") from None
    if args.list:
        for case in plan:
            print(f"{case.id}\t{case.section}\tpeer:{profile}")
        return 0
    claim_report_folder(Path(args.report), args.force)
    options = {k: v for k, v in vars(args).items() if k != "func" and not callable(v)}
    options["base_url"] = display_url(args.base_url)        # stored without its credentials
    report = PeerReport(Path(args.report), "openai", None, {**client.describe(), **tokens.describe()}, options,
                    profile=profile)
    report.doc["peer"] = {"profile": profile, "settings": settings, "settings_origin": origin,
                          "settings_said": describe_settings(settings, origin, facts),
                          "server": facts.describe(), "version": oracle.PEER_PROFILES_VERSION,
                          "spec": "spec/peer-profiles.md", "token_source": tokens.describe(),
                          "vision": vision_note(profile, tokens)}
    ctx = PeerContext(client, tokens, profile, settings, facts)
    start = time.monotonic()
    print(f"kvconform run: backend openai at {display_url(args.base_url)}, peer profile {profile} {settings}, "
          f"{len(plan)} case(s)", file=sys.stderr)
    try:
        for k, case in enumerate(plan):
            result, transcript = run_case(case, ctx)
            if result.verdict not in (Verdict.PASS, Verdict.NOT_SUPPORTED):
                folder = Path(args.report) / "reproducers" / f"{safe_name(case.id)}{EVIDENCE_SUFFIX}"
                folder.mkdir(parents=True, exist_ok=True)
                write_json_atomic(folder / "transcript.json", {"case": case.id, "profile": profile,
                                                               "settings": settings, "requests": transcript})
                result.evidence = str(folder.relative_to(args.report))
                result.rerun = rerun_command(args, case.id)
            report.add(result)
            raise_pending()             # a signal whose exception was dropped (conformance/run/interrupts.py)
            if not args.no_progress:
                print(f"  {result.verdict!s:<14} {case.id}", file=sys.stderr)
            if getattr(args, "fail_fast", False) and result.verdict in (Verdict.FAIL, Verdict.ERROR, Verdict.TIMEOUT):
                report.stopped_early(case.id, len(plan) - k - 1)    # --fail-fast: the verdict is decided
                break
    except KeyboardInterrupt as e:
        return stop_interrupted(report, e)
    doc = report.finish()
    if print_verdicts(report):
        print_explanation(report.results)
    summary = doc["summary"]
    note = peer_note(summary)
    print(f"\n{summary['headline']} ({profile}){note}: {summary['judged']} of {len(report.results)} case(s) judged "
          f"in {time.monotonic() - start:.0f} s; {report_files(report)}")
    return exit_code(summary)
