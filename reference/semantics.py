"""Semantics profiles (spec/profiles.md): which variant of each version-dependent rule holds.

A profile is data (`spec/profiles/NAME.json`): a value for each switch below, and the rules
that do not hold in it. The oracle reads the profile named by the runtime flag
`semanticsProfile` (default `kvconform-1`, the spec's own rules) and consults it at the few
points where shipped Edge-LLM 0.10 and the documented promise part ways; everywhere else the
two profiles are the same rules.

    load_profile(name) -> Profile        (InputError for an unknown name)
    PROFILE_NAMES                        the profiles spec/profiles/ defines
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache

from .errors import InputError
from .identity import MediaSpan

PROFILES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "spec", "profiles")
DEFAULT = "kvconform-1"


@dataclass(frozen=True)
class Profile:
    name: str
    media_items: str           # per-item | merged-runs               (CR-ID-4, CR-MEDIA-1)
    media_digest: str          # content-geometry-modality | raw-bytes (CR-ID-4)
    media_trim: str            # same-item | any-media                 (CR-MEDIA-3)
    hybrid_media_trim: bool    #                                       (CR-HYB-7)
    tp_refusal: bool           #                                       (CR-SUP-9)
    prefill_section: str       # dump-profile | profile-output-file    (CR-MET-12)
    record_internals: str      # declared | mandatory                  (CR-MET-8 .. 10)
    excluded_rules: frozenset

    def holds(self, rule: str) -> bool:
        return rule not in self.excluded_rules


def _names() -> tuple[str, ...]:
    try:
        return tuple(sorted(f[:-5] for f in os.listdir(PROFILES_DIR) if f.endswith(".json")))
    except OSError:
        return (DEFAULT,)


PROFILE_NAMES = _names()


@lru_cache(maxsize=None)
def load_profile(name: str = DEFAULT) -> Profile:
    if name not in PROFILE_NAMES:
        raise InputError("$.semanticsProfile", f"unknown semantics profile {name!r} (known: {', '.join(PROFILE_NAMES)})")
    with open(os.path.join(PROFILES_DIR, name + ".json"), encoding="utf-8") as f:
        doc = json.load(f)
    return Profile(name=doc["name"], excluded_rules=frozenset(doc["excluded_rules"]), **doc["switches"])


def identity_spans(spans: list[MediaSpan], profile: Profile) -> list[MediaSpan]:
    """The media spans the page identity sees under `profile` (CR-ID-4, CR-MEDIA-1).

    `per-item`: the items as they are. `merged-runs` (0.10): each maximal run of adjacent
    placeholders of one modality is one span, and the k-th run of a modality takes the digest of
    the k-th item of that modality, so after two merged images the next run takes the second
    image's digest. `raw-bytes`: an item's digest is its samples' digest alone."""
    if profile.media_digest == "raw-bytes":
        spans = [s._replace(digest=s.content) for s in spans]
    if profile.media_items == "per-item" or len(spans) < 2:
        return spans
    runs: list[list] = []
    for s in spans:
        if runs and runs[-1][1] == s.start and runs[-1][2] == s.modality:
            runs[-1][1] = s.end
        else:
            runs.append([s.start, s.end, s.modality])
    digests = {m: [s.digest for s in spans if s.modality == m] for m in {s.modality for s in spans}}
    taken = {m: 0 for m in digests}
    out = []
    for start, end, modality in runs:
        k = taken[modality]
        taken[modality] += 1
        out.append(MediaSpan(start, end, digests[modality][k], modality, b""))
    return out
