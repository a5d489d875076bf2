"""The peer suite: OpenAI-compatible servers judged against a peer profile (spec/peer-profiles.md).

`kvconform run --backend openai --base-url URL --profile P` drives a server through
conformance/adapters/openai.py, case by case (scenarios.py; each profile's own cases in
cases_*.py), predicts every reported count with the oracle (reference/peers.py), which records
why (its decision trace), and judges it (judge.py); runner.py writes the same report folder as
any other run.

What differs between profiles is data, read from the oracle's `PeerProfile` of each
(reference/peer_profile.py): its settings and where the server publishes them, how its server
is reset between cases, which of its endpoints cross-check the kit's tokenization, how a
request names a LoRA adapter, which cache keys it supports, its rules and its own cases.
"""
from __future__ import annotations

from ..judge.peer_oracle import PEER_PROFILES, PROFILES, SETTINGS

__all__ = ["PEER_PROFILES", "PROFILES", "SETTINGS"]
