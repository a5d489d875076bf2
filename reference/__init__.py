"""kvconform's reference oracle: an executable transcription of spec/context-reuse.md.

Stdlib only (but hf_tokenizer.py and jpeg.py); written to be read beside the spec, not for
speed. Its modules, by the spec section each transcribes:

    identity.py      section 1, cache identity (CR-ID): page keys, media item digests
    planning.py      section 2, planning (CR-PLAN)
    media.py         section 3, media spans (CR-MEDIA): the page-boundary trim
    publication.py   section 4, publication (CR-PUB)
    policy.py        section 5, lookup and commit policy (CR-POL)
    capacity.py      section 6, capacity (CR-CAP): pools, page index, records, eviction planner
    batching.py      section 7, batches and the order of events (CR-BATCH)
    hybrid.py        section 8, recurrent and hybrid models (CR-HYB)
    support.py       section 9, the support matrix (CR-SUP)
    metrics.py       section 10, metrics (CR-MET)
    speculative.py   section 12, attention-only EAGLE (CR-SPEC)
    sequence.py      one sequence's state in its batch and the facts it reports (CR-MET-13)
    simulator.py     one runtime instance over request files: the predictions it writes
    trace.py         the decision trace's containers (steps, chain, causes); each module above
                     records its own steps where it decides
    semantics.py     semantics profiles (spec/profiles.md)
    engine.py        engine descriptions, build arguments, runtime flags (spec/engine.md)
    requests.py      request files: parsing, checks, batches (spec/tokenizer.md, CR-POL, CR-BATCH)
    tokenizer.py     the bytes-v1 tokenizer (spec/tokenizer.md sections 1 and 2)
    decode.py, jpeg.py   media decoding (spec/tokenizer.md section 3)
    hf_tokenizer.py, bounded_template.py   real tokenizers and chat templates (spec/hf-tokenizer.md)
    media_tokens.py  image token counts per runtime (spec/media-tokens.md)
    transcript.py    generated tokens from a backend's output (spec/RUNNING.md section 4)
    errors.py        InputError and the other exceptions of the oracle
    version.py       SPEC_VERSION, the version of the spec transcribed here
    peers.py, peer_common.py, peer_llama.py, peer_vllm.py, peer_sglang.py, peer_trtllm.py,
    peer_trtllm_keys.py  the peer profiles of OpenAI-compatible servers (spec/peer-profiles.md)
    peer_vllm_groups.py, peer_vllm_keys.py   vllm-apc's KV-cache groups (hybrid models), and the
                     block keys and free queue both vLLM pools share
    peer_sglang_hybrid.py   sglang-radix on sliding-window and Mamba models: where a match may
                     end, what a decoding request frees
    peer_profile.py  what a peer profile is, as data (PeerProfile: settings, rules, server API)
    peer_trace.py    the peer caches' decision trace (reference.trace.Step, recorded where they decide)
    traffic.py       a recorded trace's requests: hash-id tokens and page keys (spec/trace-replay.md)
    replay.py        traffic replayed through any profile at a capacity, and its summary
    replay_adapters.py  what lets the simulators replay on page keys and at real pool sizes
    replay_vllm.py   vllm-apc's pool for one request at a time, as the replay runs it

Public API:
    SPEC_VERSION, InputError, NeedsTranscript, OutOfScope, Unreported, DeploymentRejected,
    EngineConfig, load_engine, engine_from_build_args, RuntimeFlags,
    Rejection, validate_deployment, parse_request_file, ParsedFile, parse_generated,
    Simulator, simulate, transcript_tokens, PROFILE_NAMES, load_profile (spec/profiles.md)
"""

from .version import SPEC_VERSION  # noqa: E402
from .errors import DeploymentRejected, InputError, NeedsTranscript, OutOfScope, Unreported  # noqa: E402
from .engine import (EngineConfig, RuntimeFlags, engine_from_build_args,  # noqa: E402
                     engine_from_config, load_engine)
from .support import Rejection, validate_deployment  # noqa: E402
from .requests import ParsedFile, parse_generated, parse_request_file  # noqa: E402
from .simulator import Simulator, simulate  # noqa: E402
from .transcript import transcript_tokens  # noqa: E402
from .semantics import PROFILE_NAMES, load_profile  # noqa: E402

__all__ = [
    "SPEC_VERSION", "InputError", "NeedsTranscript", "OutOfScope", "Unreported", "DeploymentRejected",
    "EngineConfig", "RuntimeFlags", "engine_from_build_args", "engine_from_config", "load_engine",
    "Rejection", "validate_deployment", "ParsedFile", "parse_generated", "parse_request_file",
    "Simulator", "simulate", "transcript_tokens", "PROFILE_NAMES", "load_profile",
]
