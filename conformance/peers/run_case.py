"""One peer case against a server: reset, send each step in order, judge each count.

Requests go one at a time, each after the previous answered (no profile defines concurrent
reuse). The oracle's state follows the case: a step that sampled tokens whose ids the server
does not return leaves the state unknown, and every later count of the case is NOT_SUPPORTED
rather than judged on a guess (PEER-TOK-2). The oracle records why it predicts each count (its
decision trace, reference/peer_trace.py): a wrong count is explained by those steps.
"""
from __future__ import annotations

import time
import uuid
import zlib
from dataclasses import dataclass, field

from ..judge import peer_oracle as oracle

from ..adapters.openai import NotOffered, OpenAIClient, ServerFailure
from ..judge.explain import MAX_CHAIN, step_json
from ..judge.verdicts import CaseResult, Failure, Verdict
from ..report.pagemap import peer_page_map
from . import PEER_PROFILES
from .feedback import choose_answer
from .judge import USAGE, count_missing, judge_count, judge_timings, read_count
from .layout import Answer, PeerCase, Unsupported
from .scenarios import unit
from .server_info import ServerFacts
from .tokens import TokenMismatch, TokenSource


@dataclass
class PeerContext:
    client: OpenAIClient
    tokens: TokenSource
    profile: str
    settings: dict
    facts: ServerFacts = field(default_factory=ServerFacts)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    """Salts a case's requests where the server offers no cache reset (see `case_salt`)."""


def server_failure(e: ServerFailure, what: str, request: int | None) -> Failure:
    """PEER-API-3: a request without a usable answer is TIMEOUT or ERROR, with the reason."""
    verdict = Verdict.TIMEOUT if e.kind == "timeout" else Verdict.ERROR
    return Failure("PEER-API-3", what, "an answer", e.kind, e.message, request, verdict)


def request_fields(profile: str, step, case_salt: str | None = None) -> dict:
    """The body fields that key a step's cache entries (spec/peer-profiles.md section 6). Under a
    case salt every request carries it, the step's own salt appended: one-to-one, so the oracle
    judges the step's salt as written."""
    out = {}
    if case_salt is not None:
        out["cache_salt"] = case_salt + ("" if step.salt is None else "/" + step.salt)
    elif step.salt is not None:
        out["cache_salt"] = step.salt
    if step.extra_key is not None:
        out["extra_key"] = step.extra_key
    if step.lora is not None:
        field_name = PEER_PROFILES[profile].lora_field
        out[field_name] = ({"lora_name": step.lora, "lora_int_id": lora_task_id(step.lora)}
                           if field_name == "lora_request" else step.lora)
    if step.skip_read:
        out["prompt_logprobs"] = 1
    if step.logit_bias:
        out["logit_bias"] = dict(step.logit_bias)
    if step.retention is not None:
        out["kv_cache_retention_config"] = step.retention
    return out


def lora_task_id(name: str) -> int:
    """A stable positive LoRA task id for an adapter name (trtllm-serve's `lora_int_id`)."""
    return zlib.crc32(name.encode()) % 1_000_000 + 1


def case_salt(case, ctx: "PeerContext", attempt: int = 0) -> str | None:
    """Where the profile's server offers no cache reset (TensorRT-LLM), a salt that no earlier
    request of this or any other run carried: by PEER-TRT-2 the case then starts from an empty
    tree (PEER-API-4)."""
    if "case_salt" not in PEER_PROFILES[ctx.profile].features:
        return None
    return f"kvconform-{ctx.run_id}-{case.id}-{attempt}"


def run_case(case, ctx: PeerContext) -> tuple[CaseResult, list]:
    """The case's result and its transcript (every request and response, for the evidence)."""
    start = time.monotonic()
    result = CaseResult(case.id, list(case.rules), True, source=f"peer:{ctx.profile}", section=case.section)
    transcript: list = []
    if isinstance(case, Unsupported):
        return result.settle(Verdict.NOT_SUPPORTED, case.reason), transcript
    options = [case.steps] + list(case.variants)
    try:
        for tried, steps in enumerate(options):
            result = CaseResult(case.id, list(case.rules), True, source=f"peer:{ctx.profile}", section=case.section)
            transcript = []
            try:
                _steps(case, steps, ctx, result, transcript, tried, last=tried == len(options) - 1)
            except _NoRoundTrip:
                continue
            if tried:
                result.details["variant"] = tried     # the earlier ones could not feed their answer back
            break
    finally:
        result.duration_s = time.monotonic() - start
    return result, transcript


def how_it_starts(ctx: PeerContext, salt: str | None) -> tuple[str, str]:
    """(rule, why) of the empty cache a case starts from: the step the oracle's trace begins
    with, which a lookup that finds nothing cites (PEER-API-4)."""
    p = PEER_PROFILES[ctx.profile]
    if salt is not None:
        return (p.key_rule or "PEER-API-4", f"the server offers no cache reset: every request of the case carries "
                f"the cache salt {salt!r}, which no earlier request carried, and the salt keys every cached entry, "
                "so the case starts from an empty cache (PEER-API-4)")
    return "PEER-API-4", f"the case starts from a cache the kit emptied (POST {p.reset})"


RESET_WAIT_S = 10.0
"""How long a reset that answers `{"success": false}` is retried (blocks still held, for instance
by a request the server still computes after a timeout) before the case is ERROR."""


def _reset(ctx: PeerContext, result: CaseResult) -> bool:
    """PEER-API-4: empty the cache, and know that it is empty: vLLM answers HTTP 200 with
    `{"success": false}` while blocks are held, so a body that says false is retried for
    RESET_WAIT_S, then the case is ERROR."""
    path = PEER_PROFILES[ctx.profile].reset
    if path is None:
        return True                                   # the case runs under its own salt
    if "{slot}" in path:
        return all(_reset_one(ctx, result, path.format(slot=i)) for i in range(ctx.settings.get("slots", 1)))
    return _reset_one(ctx, result, path)


def _reset_one(ctx: PeerContext, result: CaseResult, path: str) -> bool:
    deadline = time.monotonic() + RESET_WAIT_S
    while True:
        try:
            doc = ctx.client.post(path)
        except NotOffered as e:
            result.add(Failure("PEER-API-4", f"POST {path}", "HTTP 200", str(e),
                               "the server does not offer the profile's cache reset, so the case cannot start from "
                               f"an empty cache{profile_hint(ctx)}", None, Verdict.ERROR))
            return False
        except ServerFailure as e:
            result.add(server_failure(e, f"POST {path}", None))
            return False
        if not (isinstance(doc, dict) and doc.get("success") is False):
            return True
        if time.monotonic() >= deadline:
            result.add(Failure("PEER-API-4", f"POST {path}", '{"success": true}', doc,
                               f"the cache could not be emptied: the server kept answering success false for "
                               f"{RESET_WAIT_S:g} s (it still holds blocks, e.g. of a request it computes after a "
                               "timeout)", None, Verdict.ERROR))
            return False
        time.sleep(0.25)


def _reset_hint(ctx: PeerContext, salt: str | None, k: int, predicted: int, reported: int) -> str:
    """The first request after a reset can reuse nothing: a count above the prediction there says
    the cache was not empty, which the FAIL should say rather than leave to be guessed."""
    reset = PEER_PROFILES[ctx.profile].reset
    if k != 0 or salt is not None or reset is None or reported <= predicted:
        return ""
    return (f"; this is the case's first request, sent right after POST {reset} answered success, yet the server "
            f"reused {reported} token(s): the cache was not empty, so the reset cleared nothing (or another client "
            "filled it meanwhile)")


def adapter_hint(step, ctx: PeerContext, e: ServerFailure) -> str:
    """Where a request on a LoRA adapter failed with a client error: which adapter, and what the
    server lists."""
    if step.lora is None or e.status not in (None, 400, 404, 422) or e.kind == "timeout":
        return ""
    listed = ctx.facts.adapters
    have = "it lists none" if not listed else f"it lists {', '.join(sorted(listed))}"
    if listed is not None and step.lora in listed:
        return f" (adapter {step.lora!r} is listed by the server, yet the request failed)"
    return (f" (the request names LoRA adapter {step.lora!r}; {have if listed is not None else 'the server lists no adapters'}"
            f": start it with the adapter, e.g. vLLM --enable-lora --lora-modules {step.lora}=DIR)")


def profile_hint(ctx: PeerContext) -> str:
    """'; the server looks like X: is --profile right?' when its API says another runtime."""
    seen = ctx.facts.runtime
    if seen is None or seen == ctx.profile:
        return ""
    return f"; the server looks like a {seen} server, not {ctx.profile}: is --profile right?"


def _steps(case: PeerCase, steps: list, ctx: PeerContext, result: CaseResult, transcript: list,
           attempt: int = 0, last: bool = True) -> None:
    if not _reset(ctx, result):
        return
    trace = oracle.PeerTrace()
    trace.started(*how_it_starts(ctx, case_salt(case, ctx, attempt)))
    sim = oracle.simulator(ctx.profile, ctx.settings, trace=trace)
    foil = oracle.simulator(ctx.profile, ctx.settings) if case.generated else None
    done: dict = {}                                   # request -> (prompt ids, completion)
    answers: dict = {}                                # request -> the text fed back for its answer
    unknown: str | None = None
    judged = above_zero = depends = 0
    rows = []
    for k, step in enumerate(steps):
        try:
            messages, ids, shared = _prompt(step, done, answers, ctx)
            if case.generated and not last and shared.get("sampled_tokens_shared") == 0:
                raise _NoRoundTrip()
        except TokenMismatch as e:
            result.add(Failure("PEER-TOK-1", "prompt ids", "the kit's ids", "the server's ids", str(e), k, Verdict.ERROR))
            return
        except ServerFailure as e:
            result.add(server_failure(e, "the server's tokenization", k))
            return
        except _NoAnswer as e:
            result.add(Failure("PEER-API-3", f"choices[0].message.content of request {e.step}", "a string", None,
                               "the answer to feed back is missing", k, Verdict.ERROR))
            return
        context = ctx.facts.context
        if context is not None and len(ids) + step.max_tokens > context and not step.beyond_context:
            result.settle(Verdict.NOT_SUPPORTED, f"request {k} needs {len(ids)} prompt tokens + max_tokens "
                          f"{step.max_tokens}, more than the server's context of {context} tokens: not sent")
            return
        req = oracle.PeerRequest(ids, step.lora, step.salt, step.extra_key,
                                 images=[oracle.ImageItem(*image) for image in ctx.tokens.images_of(messages, ids)],
                                 lora_path=(ctx.facts.adapters or {}).get(step.lora) if step.lora else None,
                                 skip_prefix_cache=step.skip_read, retention=step.retention)
        trace.begin(k)
        if unknown is None and _refused(sim, req):
            if not _judge_refusal(step, messages, ids, k, ctx, trace, result, transcript, rows, case, attempt):
                return
            judged += 1
            _after_refusal(sim, req)
            continue
        predicted = sim.predict(req) if unknown is None else None
        explained = trace.explained(k) if unknown is None else (None, [])
        why = explained[0].why if explained[0] is not None else unknown
        fields = request_fields(ctx.profile, step, case_salt(case, ctx, attempt))
        entry = {"request": k, "messages": messages, "max_tokens": step.max_tokens, "fields": fields,
                 "prompt_ids": ids, "predicted_cached_tokens": predicted, "why": why,
                 "oracle_steps": [step_json(s) for s in explained[1]]}
        transcript.append(entry)
        try:
            completion = ctx.client.chat(messages, step.max_tokens, fields)
        except ServerFailure as e:
            entry["failure"] = e.message
            failure = server_failure(e, "POST /v1/chat/completions", k)
            failure.why += adapter_hint(step, ctx, e)
            result.add(failure)
            return
        entry["response"] = completion.raw
        reported, failures = read_count(completion, len(ids), k, ctx.profile)
        for f in failures:
            result.add(f)
        rows.append({"request": k, "prompt_tokens": len(ids), "predicted": predicted,
                     "reported": reported, "fields": fields, "sampled_ids": completion.sampled_ids,
                     **({"reuse": True} if step.reuse else {}), **({"count_missing": True} if count_missing(failures)
                                                                    else {}), **shared})
        if reported is not None:
            if predicted is None:
                result.add(Failure("PEER-TOK-2", USAGE, None, reported, unknown, k, Verdict.NOT_SUPPORTED))
            else:
                judged += 1
                above_zero += predicted > 0
                depends += foil is not None and predicted != foil.predict(req)
                for f in judge_count(ctx.profile, predicted, reported, explained, k):
                    f.why += _reset_hint(ctx, case_salt(case, ctx, attempt), k, predicted, reported)
                    result.add(f)
                if "timings" in PEER_PROFILES[ctx.profile].features:
                    for f in judge_timings(completion, reported, len(ids), k):
                        result.add(f)
        done[k] = (ids, completion)
        if unknown is None:
            unknown = _commit(sim, req, step, completion, k)
            if foil is not None and unknown is None:
                try:
                    foil.commit(req, (completion.sampled_ids or [0])[:1])     # the prompt only
                except oracle.PeerProfileError:
                    foil, depends = None, depends + 1      # no comparison: keep the case judged
    result.details = {"steps": rows, "judged_above_zero": above_zero,
                      **({"layout": case.layout} if case.layout else {}),
                      "page_map": peer_page_map(ctx.profile, ctx.settings, rows)}
    if judged == 0 and result.verdict == Verdict.PASS:
        result.settle(Verdict.NOT_SUPPORTED, "no count of this case could be judged")
    elif result.verdict == Verdict.PASS and nothing_at_stake(case, rows):
        result.settle(Verdict.NOT_SUPPORTED, vacuous_reason(case, rows, ctx))
    elif result.verdict == Verdict.PASS and foil is not None and depends == 0:
        shares = ", ".join(f"request {r['request']}: {r['sampled_tokens_shared']}" for r in rows
                           if "sampled_tokens_shared" in r) or "none fed back"
        result.settle(Verdict.NOT_SUPPORTED, "no count of the case depends on whether the server caches the tokens it "
                      f"generated (sampled ids the next prompt shares: {shares}): a server that caches the prompt "
                      "only would pass, so caching of generated tokens was not judged")


def _refused(sim, req) -> bool:
    """Whether the profile says the server refuses the request (an HTTP 400, no count): vLLM's
    server refuses an empty cache_salt (PEER-VLLM-17), llama.cpp a prompt its slot cannot hold
    (PEER-LCPP-8)."""
    refuses = getattr(sim, "refuses", None)
    return refuses is not None and refuses(req) is not None


def _after_refusal(sim, req) -> None:
    """What a refused request leaves, as the profile says: llama.cpp's slot is used now
    (PEER-LCPP-8); vLLM's cache never saw it (PEER-VLLM-17), so nothing."""
    after = getattr(sim, "after_refusal", None)
    if after is not None:
        after(req)


def _judge_refusal(step, messages, ids, k, ctx, trace, result, transcript, rows, case, attempt) -> bool:
    """Send a request the oracle predicts refused: an HTTP 400 is what it predicts (True: the
    case goes on); an answer with a count is FAIL, named by the oracle's step, and the case stops
    (the server now holds what the oracle says it refused); another failure is ERROR or TIMEOUT as
    for any request (False: the case stops)."""
    head, chain = trace.explained(k, "refused")
    fields = request_fields(ctx.profile, step, case_salt(case, ctx, attempt))
    entry = {"request": k, "messages": messages, "max_tokens": step.max_tokens, "fields": fields,
             "prompt_ids": ids, "predicted_cached_tokens": None, "predicted_refusal": True, "why": head.why,
             "oracle_steps": [step_json(s) for s in chain]}
    transcript.append(entry)
    try:
        completion = ctx.client.chat(messages, step.max_tokens, fields)
    except ServerFailure as e:
        entry["failure"] = e.message
        if e.kind == "http" and e.status == 400:
            rows.append({"request": k, "prompt_tokens": len(ids), "predicted": None, "reported": None,
                         "refused": {"predicted": True, "reported": e.message}, "fields": fields})
            return True
        result.add(server_failure(e, "POST /v1/chat/completions", k))
        return False
    entry["response"] = completion.raw
    rows.append({"request": k, "prompt_tokens": len(ids), "predicted": None, "reported": None,
                 "refused": {"predicted": True, "reported": "HTTP 200 with a completion"}, "fields": fields})
    result.add(Failure(head.rule, "HTTP status", "400 (the request refused)", "200 with a completion", head.why, k,
                       chain=[step_json(s) for s in chain][-MAX_CHAIN:]))
    return False


class _NoRoundTrip(Exception):
    """The first answer of a conversation case cannot be fed back as the ids it sampled."""


class _NoAnswer(Exception):
    def __init__(self, step: int):
        super().__init__(step)
        self.step = step


def _prompt(step, done: dict, answers: dict, ctx: PeerContext) -> tuple[list, list, dict]:
    """The step's messages with every fed-back answer filled in, their ids, and (for an answer
    fed back here for the first time) how many sampled ids the prompt shares. A new answer's
    text is chosen by its round trip (feedback.py)."""
    fresh = [m.step for m in step.messages if isinstance(m, Answer) and m.step not in answers]
    for m in step.messages:
        if isinstance(m, Answer) and m.step not in done:
            raise _NoAnswer(m.step)

    def build(text=None):
        return [{"role": "assistant", "content": answers.get(m.step, text)} if isinstance(m, Answer) else m
                for m in step.messages]
    if not fresh:
        messages = build()
        return messages, ctx.tokens.ids(messages), {}
    last = fresh[-1]
    for earlier in fresh[:-1]:                        # more than one new answer: take the server's text
        answers[earlier] = done[earlier][1].text
    prompt_ids, completion = done[last]
    chosen = choose_answer(build, prompt_ids, completion.sampled_ids, completion.text, ctx.tokens)
    if chosen is None:
        raise _NoAnswer(last)
    answers[last] = chosen[0]
    return build(), chosen[1], {"sampled_tokens_shared": chosen[2], "answer_from": last}


def nothing_at_stake(case: PeerCase, rows: list) -> bool:
    """True when every request the case exists to judge reuse on was predicted 0: then a
    server that caches nothing would pass it, and a PASS would say nothing."""
    marked = [r for r in rows if r.get("reuse")]
    return bool(marked) and all(r["predicted"] in (0, None) for r in marked)


def vacuous_reason(case: PeerCase, rows: list, ctx: PeerContext) -> str:
    marked = [r for r in rows if r.get("reuse")]
    U = unit(ctx.profile, ctx.settings)
    off = [k for k in ("enable_prefix_caching", "radix_cache", "enable_block_reuse") if ctx.settings.get(k) is False]
    if off:
        why = f"{off[0]} is false, so the profile predicts no reuse"
    else:
        why = (f"the prompts ({', '.join(str(r['prompt_tokens']) for r in marked)} tokens) are shorter than one "
               f"block of {U} beyond what they share, or share nothing")
    return (f"every request that tests reuse is predicted 0 ({why}): a server that caches nothing would pass, "
            "so nothing was judged")


def _commit(sim, req, step, completion, k: int) -> str | None:
    """Update the oracle with what the request left cached; the reason when that is unknown."""
    sampled = completion.sampled_ids
    produced = completion.usage.get("completion_tokens") if isinstance(completion.usage, dict) else None
    if sampled is not None and type(produced) is int and produced != len(sampled):
        return (f"request {k}: the log-probabilities list {len(sampled)} sampled ids, usage.completion_tokens says "
                f"{produced}: what it left cached is unknown (PEER-TOK-2)")
    if sampled is None:
        if step.max_tokens > 1 and produced != 1:
            return (f"request {k} sampled tokens whose ids the response does not give "
                    f"({completion.sampled_ids_problem}): what it left cached is unknown (PEER-TOK-2)")
        sampled = [0]                                  # one sampled token: never fed back, its id is moot
    try:
        sim.commit(req, sampled)
    except oracle.PeerProfileError as e:
        return f"request {k}: {e}"
    return None
