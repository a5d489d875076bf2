"""What the kit knows of the tokens a backend generated, and which counts that lets it predict
(spec/RUNNING.md section 4 step 6, section 6 "Counts not judged").

Generated tokens decide decode growth (how many) and decode-end publication (which pages, with
which ids). A backend that prints `output_ids`, or token ids in `logprobs`, gives them exactly.
One that prints only `output_text` gives them exactly when the text has one tokenization only:
for bytes-v1 always (one emitted byte per token), for an `hf` tokenizer when exactly one
sequence of the tokens the engine may emit (spec/engine.md section 5) decodes to the text with
the length its finish implies (`transcripts_hf.py`). Otherwise the finish may still say how many
tokens were generated (`max-length`: exactly max_generate_length), but not which.

The oracle then predicts with a placeholder for each sequence whose count is known but whose
ids are not. That prediction is exact when no other request could have met those unknown
tokens: none whose known tokens run on from this request's whole input into its generated
part, and none with unknown tokens of its own that start where this request's do (equal inputs
with equal text and finish generated the same ids, as greedy decoding does). From the first batch
in which such a meeting could happen, and from the first batch whose counts need a token count
nobody knows, nothing more is predicted: the per-request facts of the earlier batches are judged,
and of that batch the facts its admission decides (where no earlier unknown tokens can be read
there); the aggregate counters and the later requests' facts are not (`Coverage`), each with
its reason. tests/conformance/test_transcripts.py checks all of it against the prediction with
every id known, on random files built to meet generated pages.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import reference

from . import oracle

TEXT_COMPLETE = ("end-of-sequence", "max-length")


@dataclass
class Known:
    """What is known of one response's generated tokens."""
    ids: list[int] | None = None       # exactly, the end-of-sequence token included
    count: int | None = None           # how many, where the ids are not known
    source: str | None = None          # where the ids came from
    text: str | None = None
    finish: str | None = None


def known_tokens(response, engine, max_length: int) -> Known:
    """What `response` says of its generated tokens: ids from `output_ids`, `logprobs` or a text
    with one tokenization only, else at least their count when the finish says it."""
    if not isinstance(response, dict):
        return Known()
    finish, text = response.get("finish_reason"), response.get("output_text")
    out = Known(text=text if isinstance(text, str) else None, finish=finish)
    if finish == "error":
        return out
    ids = oracle.transcript(response, engine)      # output_ids, logprobs, or a bytes-v1 text
    if ids is not None:
        out.source = ("output_ids" if response.get("output_ids") is not None
                      else "logprobs" if response.get("logprobs") else "output_text")
    elif (engine.hf and out.text is not None and finish in TEXT_COMPLETE
          and response.get("output_ids") is None and not response.get("logprobs")):
        from .transcripts_hf import recover_ids
        ids = recover_ids(engine, out.text, finish, max_length)
        out.source = "output_text" if ids is not None else None
    if ids is not None:
        out.ids = ids
    elif finish == "max-length":
        out.count = max_length
    return out


def knowledge(main, replay, engine, max_length: int) -> list[Known]:
    """Per request: the run's own tokens (its counters follow what it generated), else the bypass
    replay's (equal for a backend that passes CR-OUT-1), else the run's count."""
    mine = [known_tokens(r, engine, max_length) for r in (main.responses or [])]
    if replay is None:
        return mine
    other = [known_tokens(r, engine, max_length) for r in (replay.responses or [])]
    for k, (a, b) in enumerate(zip(mine, other)):
        if a.ids is None and b.ids is not None and a.text == b.text and a.finish == b.finish:
            mine[k] = Known(b.ids, None, f"{b.source} of the bypass replay", a.text, a.finish)
    return mine


@dataclass
class Coverage:
    """Which of a file's counts the oracle could predict."""
    requests: int                       # the first `requests` requests' facts are predicted
    total: int
    aggregates: bool                    # the profile's counters and the failed-batch count
    reasons: list[str] = field(default_factory=list)
    placeholders: list[int] = field(default_factory=list)
    sources: dict = field(default_factory=dict)     # request index -> where its ids came from
    admission: list = field(default_factory=list)   # predictions of the next batch's admission facts

    @property
    def complete(self) -> bool:
        return self.aggregates and self.requests == self.total

    def to_json(self) -> dict:
        out = {"requests_predicted": self.requests, "requests": self.total, "aggregates": self.aggregates}
        if self.admission:
            out["admission_facts_only"] = [p["request_idx"] for p in self.admission]
        if self.reasons:
            out["reasons"] = self.reasons
        if self.placeholders:
            out["count_only"] = self.placeholders
        sources: dict = {}
        for i, s in sorted(self.sources.items()):
            label = s or ("not printed: the count from a max-length finish" if i in self.placeholders
                          else "not printed")
            sources.setdefault(label, []).append(i)
        if sources:
            out["generated_ids_from"] = sources
        return out


ADMISSION_FACTS = ("plan", "matched_tokens", "reused_tokens", "media_aware", "lookup_bypass", "forced_cold",
                   "hybrid_restore")
"""Per-request facts decided when a batch is admitted, before any of it decodes (CR-BATCH-6)."""


def predict_known(engine, flags, doc: dict, base_dir: str, known: list[Known], max_length: int,
                  last_accepted: list | None = None, parsed=None):
    """(prediction, Coverage): the oracle's prediction of as much of the file as the known tokens
    determine (module docstring). The prediction covers the file's first `coverage.requests`
    requests, then (`coverage.admission`) the admission facts of the next batch where those are
    exact; when that is the whole file with aggregates, it is the plain prediction.
    `last_accepted`: per request, what its last EAGLE verification accepted, where reported
    (conformance.judge.oracle.predict); `parsed`: `doc` as oracle.parse reads it, where the caller
    holds it (the file is then not tokenized again)."""
    total = len(doc["requests"])
    sources = {i: k.source for i, k in enumerate(known)}

    def predict(d: dict, generated: list):
        """The oracle on `d`, a leading part of the file, with the generated tokens given."""
        size = len(d["requests"])
        return oracle.predict(engine, flags, d, base_dir, generated,
                              last_accepted[:size] if last_accepted is not None else None,
                              parsed if d is doc else None)
    try:
        prediction = predict(doc, [k.ids for k in known])
        return prediction, Coverage(total, total, True, sources=sources)
    except reference.NeedsTranscript as e:
        first_need = str(e)
    placeholder = _placeholder(engine)
    filled = [k.ids if k.ids is not None else [placeholder] * k.count if k.count else None for k in known]
    counted = [i for i, k in enumerate(known) if k.ids is None and k.count]
    parsed = parsed or oracle.parse(doc, base_dir, engine, flags)
    batches = len(parsed.batches)
    cut, reasons = batches, []
    try:
        predict(doc, filled)
    except reference.NeedsTranscript as e:
        cut = _predictable_batches(predict, doc, filled, parsed)
        reasons.append(f"from batch {cut} on, the counts depend on how many tokens a request generated, "
                       f"which the backend does not print: {str(e).split('; give a transcript')[0]}")
    meetings = [m for m in _meetings(parsed, known, counted) if m[0] <= cut]
    first = min(meetings, default=None)
    if first is not None and first[0] < cut:
        batch, i, x, _ = first
        reasons = [f"from batch {batch} on, request {x} may meet the tokens request {i} generated, which the "
                   "backend does not print (no output_ids or logprobs, and its text has more than one "
                   "tokenization of that length)"]
        cut = batch
    if cut == batches:
        prediction = predict(doc, filled)
        return prediction, Coverage(total, total, True, [], counted, sources)
    reasons = reasons or [first_need]
    size = sum(len(b) for b in parsed.batches[:cut])
    head = dict(doc, requests=doc["requests"][:size])
    prediction = predict(head, filled[:size]) if size else \
        oracle.Prediction([], [], {}, None, [])
    prediction.parsed = parsed                  # inputs of every request, for explanations and input_tokens
    coverage = Coverage(size, total, False, reasons, counted, sources)
    if not any(m[0] == cut and m[3] for m in meetings):
        coverage.admission, trace = _admission(predict, doc, filled, parsed, cut, max_length, placeholder)
        prediction.responses = prediction.responses + coverage.admission
        if coverage.admission:            # the same batches simulated, and the admission of the next
            prediction.trace = trace
    return prediction, coverage


def _admission(predict, doc, filled, parsed, cut: int, max_length: int, placeholder: int) -> tuple[list, object]:
    """Batch `cut`'s admission facts: what its requests find and reuse depends only on the batches
    before it, which are predicted exactly, so any count of its own generated tokens gives them.
    Returns them with the trace of that prediction (its steps up to those admissions hold)."""
    members = parsed.batches[cut]
    end = members[-1] + 1
    guess = filled[:members[0]] + [f if f is not None else [placeholder] * max_length for f in filled[members[0]:end]]
    try:
        hypothetical = predict(dict(doc, requests=doc["requests"][:end]), guess)
    except (reference.NeedsTranscript, reference.Unreported, reference.InputError):
        return [], None
    out = []
    for p in hypothetical.responses[members[0]:end]:
        if p["status"] != "ok":
            return [], None                      # it fails in the guess: maybe at admission, maybe later
        facts = {k: v for k, v in (p.get("context_cache") or {}).items() if k in ADMISSION_FACTS}
        entry = {"request_idx": p["request_idx"], "batch_idx": p["batch_idx"], "status": None,
                 "input_tokens": p["input_tokens"], "context_cache": facts if p.get("context_cache") else None}
        if p.get("outputs_defined") is False:
            entry["outputs_defined"] = False
        out.append(entry)
    return out, hypothetical.trace


def _placeholder(engine) -> int:
    """A token id that stands for an unknown generated token: any id but the end-of-sequence."""
    return 0 if engine.eos_token_id != 0 else 1


def _predictable_batches(predict, doc, filled, parsed) -> int:
    """The number of leading batches the oracle predicts without a count nobody knows (batches run
    in file order, so a prefix of the file is predicted exactly as in the whole file)."""
    lo, hi = 0, len(parsed.batches) - 1          # lo batches are predictable; hi is not
    while lo < hi:
        mid = (lo + hi + 1) // 2
        size = sum(len(b) for b in parsed.batches[:mid])
        try:
            predict(dict(doc, requests=doc["requests"][:size]), filled[:size])
            lo = mid
        except reference.NeedsTranscript:
            hi = mid - 1
    return lo


def _meetings(parsed, known: list[Known], counted: list[int]) -> list[tuple]:
    """(batch, i, x, at admission) for every request x that could meet the unknown tokens request i
    generated, in the later batch of the two; `at admission`: x's lookup could find them (x comes
    later and its input runs on past i's), rather than a decode-end publication of the two. Token
    ids alone are compared, which finds more meetings than the page identity would (it adds
    media and adapters), never fewer."""
    if parsed.commit_policy == "prefill_state_only":
        return []                                # generated tokens are never published (CR-POL-5)
    batch_of = {i: b for b, members in enumerate(parsed.batches) for i in members}
    tokens = [list(map(int, r.tokens)) for r in parsed.requests]
    out = []
    for i in counted:
        if known[i].count < 2:                   # one generated token has no KV: nothing published
            continue
        mine = tokens[i]
        for x in range(len(parsed.requests)):
            if x == i:
                continue
            seen = tokens[x] + (list(known[x].ids[:-1]) if known[x].ids is not None else [])
            open_x = (known[x].ids is None and known[x].finish != "error"
                      and (known[x].count is None or known[x].count >= 2))
            common = min(len(seen), len(mine))
            if seen[:common] != mine[:common]:
                continue
            if len(seen) > len(mine) or open_x and not _same_output(parsed, known, i, x):
                reads = batch_of[i] < batch_of[x] and len(tokens[x]) > len(mine) and tokens[x][:len(mine)] == mine
                out.append((max(batch_of[i], batch_of[x]), i, x, reads))
    return out


def _same_output(parsed, known, i: int, x: int) -> bool:
    """Equal inputs (ids, media, adapter), equal text and finish: greedy decoding generated equal ids."""
    a, b = parsed.requests[i], parsed.requests[x]
    return (list(a.tokens) == list(b.tokens) and a.lora_name == b.lora_name
            and [s.digest for s in a.spans] == [s.digest for s in b.spans]
            and known[i].text == known[x].text and known[i].finish == known[x].finish
            and known[i].count == known[x].count)
