"""kvconform's reference oracle: an executable transcription of spec/context-reuse.md.

Stdlib only; one module per spec section (identity CR-ID, planning CR-PLAN, media CR-MEDIA,
publication CR-PUB, policy CR-POL, capacity CR-CAP, batching CR-BATCH, hybrid CR-HYB,
support CR-SUP, metrics CR-MET), plus the bytes-v1 tokenizer, media decoding, engine
descriptions and request files. Written to be read beside the spec, not for speed.

Public API:
    SPEC_VERSION, InputError, NeedsTranscript, OutOfScope, Unreported, DeploymentRejected,
    EngineConfig, load_engine, engine_from_build_args, RuntimeFlags,
    Rejection, validate_deployment, parse_request_file, ParsedFile, parse_generated,
    Simulator, simulate, transcript_tokens, PROFILE_NAMES, load_profile (spec/profiles.md)
"""

SPEC_VERSION = "2.0.0"

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
