"""The peer oracle (reference/peers.py, spec/peer-profiles.md), as the rest of conformance/ reaches it.

The peer suite (conformance/peers/), the page maps of peer cases (conformance/report/pagemap.py)
and the parity suite's peer scenarios (conformance/parity/peer.py) read the peer profiles, their
settings, simulators and count rules from here: judge/ is the one room that imports `reference`.
The names are the oracle's own (reference.peers.__all__, and vLLM's `FreeQueue`, which the parity
suite's free-queue scenarios drive alone).
"""
from __future__ import annotations

from reference.peers import *  # noqa: F401,F403
from reference.peers import __all__  # noqa: F401
from reference.peer_vllm_keys import FreeQueue  # noqa: F401  vLLM's free queue: the parity suite's queue scenarios
