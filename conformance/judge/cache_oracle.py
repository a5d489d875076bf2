"""The oracle's context cache below the request level, for the parity suite's cache scenarios.

Edge-LLM's own unit tests drive its context-cache manager step by step (acquire, publish,
release, grow, plan an eviction) and read the state in between. The parity suite's cache
scenarios (conformance/parity/cache.py, docs/parity.md section 2) drive the oracle's own
classes and section functions the same way; this module is their one door into `reference`,
re-exporting them under the oracle's names; the identity scenarios read the page keys of
reference/identity.py the way Edge-LLM's block-hash tests read hashBlock. Nothing here decides
anything.
"""
from __future__ import annotations

from reference.capacity import DRAFT, PAGES, PARTIAL_KV, POOL_NAMES, RECURRENT, ContextCache  # noqa: F401
from reference.identity import TokenHistory, adapter_root  # noqa: F401
from reference.hybrid import plan_checkpoint, publish_captures, reserve_captures, restore_pins  # noqa: F401
from reference.metrics import Metrics  # noqa: F401
from reference.planning import cold_plan, plan_vanilla  # noqa: F401
from reference.publication import COMMITTED, EXISTING, PREFILL_END, publish_pages  # noqa: F401
from reference.sequence import Sequence  # noqa: F401
from reference.speculative import paired_lookup, plan_paired, publish_pairs  # noqa: F401
