"""What a peer profile is, as data: its settings, where its server publishes them, its rules,
its cache and the parts of its server's API the kit uses (spec/peer-profiles.md). Stdlib only.

Each profile's module (peer_llama, peer_vllm, peer_sglang, peer_trtllm) states its own
`PROFILE`; reference/peers.py lists them. Everything else that treats profiles differently (the
peer runner, the docs generators) reads these fields, so adding a setting or a profile touches
the spec, the profile's module, the bundled server's cache and the cases, nothing else.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from .peer_common import PeerProfileError

MAX_UNIT = 1 << 20
"""The largest block, page or pool size a setting may name (tokens); the peer suite also bounds
sizes by the server's own context length."""

KINDS = ("size", "count", "count0", "fraction", "bool", "choice", "version", "interval", "sizes")
"""What a setting's value may be: size (an integer 1..MAX_UNIT), count (an integer >= 1, or None:
unbounded), count0 (an integer >= 0), fraction (a number in [0, 1]), bool (true or false), choice
(one of the setting's `choices`), version (a release such as "0.33.0", "0.5.23.post1": numbers
separated by dots and any suffix), interval (an integer >= 0, or "dense"), sizes (a non-empty list
of sizes, or None: unset)."""

VERSION_PATTERN = re.compile(r"^v?\d+(\.\d+)+([.+\-]?[0-9A-Za-z.+\-]*)?$")


def version_tuple(version: str) -> tuple:
    """(0, 33, 0) for "0.33.0" or "v0.33.0" (a suffix such as "+cpu" or "rc1" is not compared)."""
    return tuple(int(part) for part in re.match(r"^v?(\d+(\.\d+)*)", version).group(1).split("."))


@dataclass(frozen=True)
class Published:
    """Where a server publishes a value (PEER-API-5): `GET path`, a JSON document whose `field`
    (dotted for a nested one) holds it, or for a Prometheus text the label `field` of the
    `metric` line. `convert` reads the raw value: int, bool, not (a negated bool), less_one (an
    integer count of which one is not usable). `note` says why a conversion is what it is."""
    path: str
    field: str
    metric: str | None = None
    convert: str = "int"
    note: str = ""

    def describe(self) -> str:
        what = f"{self.metric} {self.field}" if self.metric else self.field
        return f"GET {self.path} {what}" + (f" {self.note}" if self.note else "")


@dataclass(frozen=True)
class Setting:
    """One setting of a profile: its name, kind (KINDS), default (None: unset) and where the
    server publishes it (None: the user gives it with --peer-setting)."""
    name: str
    kind: str
    default: object
    published: Published | None = None
    choices: tuple = ()
    """The values a `choice` setting may take."""

    def check(self, value):
        """`value` if it fits the kind, else PeerProfileError naming what fits."""
        if self.kind == "choice":
            if value not in self.choices:
                raise PeerProfileError(f"setting {self.name} must be one of {', '.join(self.choices)} (the values "
                                       f"the profile defines), got {value!r}")
            return value
        if self.kind == "version":
            if not isinstance(value, str) or not VERSION_PATTERN.match(value):
                raise PeerProfileError(f"setting {self.name} must be a release such as 0.33.0 or 0.5.23, "
                                       f"got {value!r}")
            return value
        if self.kind == "interval" and value == "dense":
            return value
        if self.kind == "bool":
            if type(value) is not bool:
                raise PeerProfileError(f"setting {self.name} must be true or false, got {value!r}")
            return value
        if self.kind == "fraction":
            if type(value) not in (int, float) or not 0 <= value <= 1:
                raise PeerProfileError(f"setting {self.name} must be a number in [0, 1], got {value!r}")
            return float(value)
        if self.kind == "sizes":
            if value is None:
                return None
            if not isinstance(value, (list, tuple)) or not value or any(
                    type(v) is not int or not 1 <= v <= MAX_UNIT for v in value):
                raise PeerProfileError(f"setting {self.name} must be a non-empty list of integers 1..{MAX_UNIT}, "
                                       f"got {value!r}")
            return list(value)
        if self.kind == "count" and value is None:
            return None
        low = 0 if self.kind in ("count0", "interval") else 1
        high = MAX_UNIT if self.kind == "size" else None
        if type(value) is not int or value < low or (high is not None and value > high):
            bound = f"{low}..{high}" if high else f">= {low}"
            alternative = " or dense" if self.kind == "interval" else ""
            raise PeerProfileError(f"setting {self.name} must be an integer {bound}{alternative}, got {value!r}")
        return value


@dataclass(frozen=True)
class Signature:
    """What tells a server of the profile's runtime apart (a run under the wrong --profile warns):
    GET `path` answers a JSON object with one of `keys`, or a text containing `text`."""
    path: str
    keys: tuple = ()
    text: str | None = None


@dataclass(frozen=True)
class PeerProfile:
    name: str
    runtime: str
    """The runtime whose rule the profile states, as its users call it."""
    version: str
    """The runtime version (or commit) whose behaviour the profile states; where versions differ,
    a setting or another profile version will select the behaviour."""
    section: str
    """Where spec/peer-profiles.md states it."""
    settings: tuple
    """Setting, in the order the report lists them."""
    count_rule: str
    """The rule that defines the reported count."""
    after_rule: str
    """The rule of what a finished request leaves cached."""
    key_rule: str | None
    """The rule of what keys a cache entry besides its tokens (salt, adapter, extra key)."""
    make: Callable
    """make(settings, trace) -> a fresh cache of the profile (predict, commit, reset)."""
    full_match: Callable
    """full_match(settings, n) -> the count of an n-token prompt that is cached whole: the cap."""
    tokenizer_loader: str
    """How the runtime reads a tokenizer folder (spec/hf-tokenizer.md TOK-HF-2)."""
    reset: str | None
    """The route (POST) that empties the server's cache between cases (PEER-API-4; `{slot}` is
    every slot in turn), or None: the server offers none, and every case runs under a cache salt
    of its own (`case_salt` in features)."""
    crosscheck: str | None
    """The server's own tokenization the kit compares with (PEER-TOK-1): `apply-template` (POST
    /apply-template, then POST /tokenize), `tokenize-messages` (POST /tokenize {messages}), None."""
    lora_field: str | None
    """The request field that names a LoRA adapter (`lora_request`: {"lora_name", "lora_int_id"});
    None: per-request adapters are not part of the profile."""
    features: frozenset
    """What its requests and responses carry: salt, lora, extra_key (cache keys), images (each
    image keys the blocks it overlaps: the peer suite's image cases run), read_bypass
    (prompt_logprobs skips the cache read), timings (native counts), case_salt (no reset)."""
    unit: str | None = None
    """The setting that is the block or page size, the boundary cases are laid out on."""
    unit_name: str = "token"
    """What that unit is called (block, page)."""
    cases: tuple = ()
    """The peer cases only this profile has (conformance/peers/scenarios.py builds them by id)."""
    case_rules: Callable | None = None
    """case_rules(case_id, settings) -> rules of the profile a shared case also depends on."""
    context: tuple = ()
    """Published: where the server says its context length, the first that answers."""
    adapters: Published | None = None
    """Where the server lists its LoRA adapters (name -> the path it loaded each from)."""
    signature: Signature | None = None
    report_hint: str = ""
    """How the server is made to report cached_tokens at all."""

    def setting(self, name: str) -> Setting:
        for s in self.settings:
            if s.name == name:
                return s
        raise PeerProfileError(f"{self.name} has no setting {name!r} (settings: "
                               f"{', '.join(s.name for s in self.settings) or 'none'})")

    def defaults(self) -> dict:
        return {s.name: s.default for s in self.settings}

    def check(self, settings: dict | None) -> dict:
        """The settings with defaults filled in; an unknown key or a bad value raises."""
        out = self.defaults()
        for key, value in (settings or {}).items():
            setting = self.setting(key)
            try:
                out[key] = setting.check(value)
            except PeerProfileError as e:
                raise PeerProfileError(f"{self.name} {e}") from None
        return out

    def published(self) -> dict:
        """Setting name -> where the server publishes it, for the settings it publishes."""
        return {s.name: s.published for s in self.settings if s.published is not None}
