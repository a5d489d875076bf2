"""Every faulty server variant (faulty_backends/servers.py) is caught by the peer suite, and its
first FAIL is explained by the peer oracle's own steps: the step that decided the count and the
chain of its causes (reference/peer_trace.py), which together name a rule of the variant's
`Violates:` line, as tests/conformance/test_catalogue_rules.py holds for the Edge-LLM variants.

Each variant's server runs the whole peer suite under the settings it is made for; the chain
is printed under the problems table, in summary.md and in the failing case's transcript."""
from __future__ import annotations

import json

import pytest

from conformance.judge.verdicts import Failure
from faulty_backends.servers import SERVER_VARIANTS
from reference.peers import PEER_PROFILES

from tests.helpers.peer_servers import PHI3, build_engine, build_vision_engine, run_peers, serving


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    folder = tmp_path_factory.mktemp("peer-variant-engines")
    out = {loader: build_engine(folder, loader) for loader in {p.tokenizer_loader for p in PEER_PROFILES.values()}}
    out["vision"] = build_vision_engine(folder, "transformers-auto")
    return out


@pytest.mark.parametrize("name", sorted(SERVER_VARIANTS))
def test_each_faulty_server_variant_fails_and_the_oracle_says_which_rule(name, engines, tmp_path, capsys):
    variant = SERVER_VARIANTS[name]
    engine, tokenizer = (engines["vision"] if variant.vision
                         else (engines[PEER_PROFILES[variant.profile].tokenizer_loader], PHI3))
    peer = variant.peer(engine)
    settings = [a for k, v in variant.settings for a in ("--peer-setting", f"{k}={v}")]
    settings += [a for case in variant.select for a in ("-k", case)]
    with serving(peer) as url:
        rc, report = run_peers(url, variant.profile, tmp_path, *settings, tokenizer=tokenizer)
    printed = capsys.readouterr().out
    assert rc == 1 and report["summary"]["headline"] == "NOT CONFORMANT"
    failing = [c for c in report["cases"] if c["verdict"] == "FAIL"]
    # caught by a case that checks the rule the variant breaks
    assert {r for c in failing for r in c["rules"]} & set(variant.rules), (name, [c["id"] for c in failing])
    assert all(c.get("rerun") and c.get("evidence") for c in failing)

    # the first FAIL: the oracle's deciding step and its chain name a rule the variant breaks
    first = Failure.from_json(next(f for f in failing[0]["failures"] if f["verdict"] == "FAIL"))
    assert first.chain, f"{name}: {first.line()}: no oracle steps"
    deciding = first.chain[-1]
    assert (deciding["rule"], deciding["why"]) == (first.rule, first.why), first.chain
    assert set(first.rules()) & set(variant.rules), (
        f"{name} on {failing[0]['id']}: the oracle's steps name {first.rules()}, the variant's docstring says it "
        f"breaks {list(variant.rules)}: " + " | ".join(first.chain_lines()))

    # printed like an Edge-LLM FAIL: under the problems, in summary.md, in the transcript
    assert f"why the oracle expects what {failing[0]['id']} missed" in printed
    assert first.chain_lines()[-1] in printed
    assert first.chain_lines()[-1] in (tmp_path / "report" / "summary.md").read_text()
    transcript = json.loads((tmp_path / "report" / failing[0]["evidence"] / "transcript.json").read_text())
    request = next(r for r in transcript["requests"] if r["request"] == first.request)
    assert request["why"] == first.why and request["oracle_steps"][-1]["rule"] == first.rule
