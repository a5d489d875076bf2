"""A case the kit cannot lay out on the engine under test is NOT_SUPPORTED with the reason, never
an ERROR: `sections/cap/hit-does-not-protect` on a 1-page pool once ended ERROR with
"ValueError: a pool of 1 pages cannot be filled ..."."""
from __future__ import annotations

from conformance.adapters.base import Engine
from conformance.adapters.reference import ReferenceAdapter
from conformance.cases.case import discover
from conformance.judge import oracle
from conformance.judge.verdicts import Verdict
from conformance.run.execute import run_case


def test_a_scenario_the_engine_cannot_hold_is_not_supported():
    config = oracle.derive_engine({"maxInputLen": 48, "maxKVCacheCapacity": 64, "maxKVPoolPages": 1,
                                   "tokensPerPage": 64}).to_config()
    assert config["kv_pool_pages"] == 1

    class OnePagePool(ReferenceAdapter):
        def fixed_engine(self):
            return Engine("fixed-one-page", config, None, fixed=True)
    adapter = OnePagePool()
    case = next(c for c in discover() if c.id == "sections/cap/hit-does-not-protect")
    result = run_case(case, adapter, adapter.capabilities())
    assert result.verdict == Verdict.NOT_SUPPORTED, result.reason
    assert "cannot be expressed on this engine" in result.reason and "a pool of 1 page(s)" in result.reason
    assert "max_input_len 48 at 64 tokens per page" in result.reason
