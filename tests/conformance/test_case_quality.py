"""The curated cases are what they say: ids match paths, and no batch fails by accident (a case
that runs into a length limit still PASSes, but no longer tests what its description says)."""
from __future__ import annotations

import pytest

from conformance.adapters import BuildRefused
from conformance.cases.case import CASES_DIR, bypass_replay_of, materialize, resolve_outputs, template_refs

from tests.helpers.cases import ALL_CASES

FAILING_RULES = {"CR-BATCH-5", "CR-CAP-8", "CR-SUP-8"}
MINE = [c for c in ALL_CASES if not c.id.startswith("golden/")]


@pytest.mark.parametrize("case", MINE, ids=lambda c: c.id)
def test_id_is_the_path(case):
    assert case.path.resolve() == (CASES_DIR / f"{case.id}.json").resolve()


@pytest.mark.parametrize("case", [c for c in MINE if not c.negative], ids=lambda c: c.id)
def test_no_batch_fails_by_accident(case, reference_adapter):
    try:
        engine = reference_adapter.engine_for(case.engine_args)
    except BuildRefused:
        pytest.skip("a refused build runs no request")
    doc = materialize(case.doc, case.base_dir, None)
    if template_refs(doc):  # resolve request by request, as the runner does batch by batch
        texts = {}
        for i in range(len(doc["requests"])):
            part = resolve_outputs(doc, texts, upto=i + 1)
            part = dict(bypass_replay_of(dict(part, requests=part["requests"][:i + 1])), batch_size=1)
            texts[i] = reference_adapter.start(engine, {}).run(part, case.base_dir).responses[i]["output_text"]
        doc = resolve_outputs(doc, texts)
    got = reference_adapter.start(engine, case.runtime).run(doc, case.base_dir)
    if got.outcome == "rejected":
        return
    failed = [r["request_idx"] for r in got.responses if r["finish_reason"] == "error"]
    assert not failed or FAILING_RULES & set(case.rules), f"requests {failed} fail: {got.responses[failed[0]]}"
