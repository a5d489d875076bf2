"""The peer oracle (reference/peers.py, spec/peer-profiles.md), as the rest of conformance/ reaches it.

The peer suite (conformance/peers/), the page maps of peer cases (conformance/report/pagemap.py)
and the parity suite's peer scenarios (conformance/parity/peer.py) read the peer profiles, their
settings, simulators and count rules from here: judge/ is the one room that imports `reference`.
The names are the oracle's own (reference.peers.__all__).
"""
from __future__ import annotations

from reference.peers import *  # noqa: F401,F403
from reference.peers import __all__  # noqa: F401
