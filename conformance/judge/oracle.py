"""The runner's view of the reference oracle (`reference/`), and the one way into it.

Everything the runner expects of a backend comes from here: whether a deployment is refused,
how each request is tokenized, each request's cache facts, the profile, and the decision trace
that says which rule decided each of them (the runner's explanations print it). Nothing is
hard-coded in the runner.

No room of conformance/ but judge/ imports `reference` (tests/test_boundaries.py): what the other
rooms need of the oracle (its errors, the engine description and its limits, request parsing,
the semantics profiles, the readers of a request's inputs) is re-exported below under the
oracle's own names; the peer profiles are in `peer_oracle`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import reference
from reference import (SPEC_VERSION, DeploymentRejected, EngineConfig, InputError, NeedsTranscript,  # noqa: F401
                       OutOfScope, PROFILE_NAMES, RuntimeFlags, Simulator, Unreported, load_profile,
                       parse_generated, simulate, transcript_tokens)
from reference.decode import DecodeError, load_audio, load_image  # noqa: F401  (media inputs)
from reference.engine import MAX_LAYERS, MAX_POOL_PAGES, MAX_WARMUP, check_token_ids, engine_from_config  # noqa: F401
from reference.engine import resolve_paths as resolve_engine_paths  # noqa: F401
from reference.hybrid import slot_sizes  # noqa: F401
from reference.identity import TokenHistory, adapter_root  # noqa: F401
from reference.media_tokens import image_tokens  # noqa: F401
from reference.requests import ParsedFile, parse_request_file
from reference.semantics import DEFAULT as DEFAULT_PROFILE  # noqa: F401
from reference.tokenizer import EOS


@dataclass
class Prediction:
    """The oracle's prediction for one request file on one runtime instance."""
    responses: list[dict]
    batches: list[dict]
    profile: dict
    parsed: ParsedFile | None = None
    generated: list = field(default_factory=list)
    trace: object = None
    """The oracle's decision trace (reference.trace.Trace): the rule-tagged step that decided
    each predicted value, indexed by the request's place on the runtime instance."""
    source: tuple | None = None
    """(the request file, its folder): what a failure's explanation may tokenize again."""


def derive_engine(build_args: dict):
    """The description a build with these arguments writes (reference.InputError if refused)."""
    return reference.engine_from_build_args(build_args)


def engine_of(config: dict):
    """Read an engine description (config.json contents) the way the oracle reads a file."""
    return engine_from_config(config)


def flags_of(runtime: dict):
    return reference.RuntimeFlags.from_case_runtime(runtime)


def rejection(engine, flags):
    """The CR-SUP / CR-HYB-2 refusal of this deployment, or None."""
    return reference.validate_deployment(engine, flags)


def parse(doc: dict, base_dir: str, engine, flags) -> ParsedFile:
    """Tokenize a request file as the spec says (raises reference.InputError)."""
    return parse_request_file(doc, base_dir, engine, batch_size=flags.batch_size)


def predict(engine, flags, doc: dict, base_dir: str, generated: list | None,
            last_accepted: list | None = None, parsed: ParsedFile | None = None) -> Prediction:
    """Simulate one request file on a fresh runtime instance.

    `generated`: per request, the token ids it generated (a final 257 when it ended by
    end-of-sequence), or None where unknown; `last_accepted`: per request, the tokens its last
    EAGLE verification accepted, or None where not reported. Raises reference.NeedsTranscript
    when the counts depend on tokens that were not given, reference.Unreported when they depend
    on an acceptance that was not reported. `parsed`: `doc` as `parse` reads it, where the caller
    holds it; else the file is parsed here, once, for the simulation and the prediction.
    """
    sim = reference.Simulator(engine, flags, trace=True)
    if parsed is None and sim.rejection is None:      # a refused deployment raises before parsing
        parsed = parse(doc, base_dir, engine, flags)
    responses = sim.run(doc, base_dir, generated=generated, last_accepted=last_accepted, parsed=parsed)
    return Prediction(responses, list(sim.batches), sim.profile(), parsed, list(generated or []), sim.trace,
                      (doc, base_dir))


OTHER_LOADER = {"tokenizers-raw": "transformers-auto", "transformers-auto": "tokenizers-raw"}


def input_length_under_other_loader(engine, flags, source: tuple | None, i: int) -> tuple[str, int] | None:
    """(the other loader, request `i`'s n when the engine's tokenizer files are read by that
    loader: TOK-HF-2 against TOK-HF-3), or None where no other loader applies or the file does
    not parse under it. Evidence for blaming a wrong n on the loader or on the rendering."""
    tok = getattr(engine, "tokenizer", None)
    if source is None or not isinstance(tok, dict) or tok.get("loader") not in OTHER_LOADER:
        return None
    other = OTHER_LOADER[tok["loader"]]
    try:
        config = engine.to_config()
        config["tokenizer"] = dict(config["tokenizer"], loader=other)
        parsed = parse(source[0], source[1], engine_of(config), flags)
        return other, len(parsed.requests[i].tokens)
    except Exception:            # the other loader refuses the files: no evidence either way
        return None


class OracleSession:
    """One simulated runtime instance taking request files one after another (CR-BATCH-3)."""

    def __init__(self, engine, flags):
        self.engine, self.flags = engine, flags
        self.sim = reference.Simulator(engine, flags, trace=True)

    def run(self, doc: dict, base_dir: str, generated: list | None, last_accepted: list | None = None) -> Prediction:
        before = len(self.sim.batches)
        parsed = parse(doc, base_dir, self.engine, self.flags) if self.sim.rejection is None else None
        responses = self.sim.run(doc, base_dir, generated=generated, last_accepted=last_accepted, parsed=parsed)
        return Prediction(responses, list(self.sim.batches)[before:], self.sim.profile(), parsed,
                          list(generated or []), self.sim.trace, (doc, base_dir))


def transcript(response: dict, engine=None) -> list[int] | None:
    """The token ids a response generated: from `output_ids`, else greedy `logprobs`, else
    (bytes-v1 only) `output_text` when that is unambiguous (spec/RUNNING.md section 4 step 5)."""
    tokens = reference.transcript_tokens({"responses": [response]}, engine)[0]
    return list(tokens) if tokens is not None else None


def transcripts(responses: list[dict] | None, engine=None) -> list[list[int] | None]:
    return [transcript(r, engine) if isinstance(r, dict) else None for r in (responses or [])]


def accepted_counts(responses: list[dict] | None) -> list:
    """Per response, `last_verification_accepted` as the backend wrote it (None where absent); the
    oracle checks the values (CR-SPEC-4)."""
    return [r.get("last_verification_accepted") if isinstance(r, dict) else None for r in (responses or [])]


def load_hf_tokenizer(folder: str, loader: str = "transformers-auto"):
    """The oracle's reader of a real tokenizer folder (spec/hf-tokenizer.md); `tokenizers` and
    jinja2 are imported only when a case or engine names one."""
    from reference.hf_tokenizer import load_hf_tokenizer as load
    return load(folder, loader)


def text_of(tokens: list[int]) -> str:
    """The output text of generated bytes-v1 tokens (spec/tokenizer.md section 4)."""
    return bytes(t for t in tokens if t < 256).decode("latin-1") if tokens else ""


__all__ = ["Prediction", "derive_engine", "engine_of", "flags_of", "rejection", "parse", "predict",
           "OracleSession", "transcript", "transcripts", "accepted_counts", "text_of", "EOS",
           # re-exported from reference/
           "SPEC_VERSION", "DeploymentRejected", "InputError", "NeedsTranscript", "OutOfScope", "Unreported",
           "EngineConfig", "RuntimeFlags", "engine_from_config", "check_token_ids", "resolve_engine_paths", "MAX_LAYERS",
           "MAX_POOL_PAGES", "MAX_WARMUP", "ParsedFile", "parse_request_file", "parse_generated", "Simulator",
           "simulate", "transcript_tokens", "PROFILE_NAMES", "DEFAULT_PROFILE", "load_profile",
           "load_hf_tokenizer", "DecodeError", "load_image", "load_audio", "image_tokens", "slot_sizes",
           "TokenHistory", "adapter_root"]
