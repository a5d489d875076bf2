"""Messages that say what is wrong and what to do, in one line (the exit-code table of docs/verdicts.md)."""
from __future__ import annotations

import pytest

from conformance.cli import main as kvconform


def error_line(capsys, *argv) -> str:
    code = kvconform([str(a) for a in argv])
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.startswith("kvconform")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in out + err, (code, err)
    return lines[0]


def test_openai_without_a_profile_asks_for_one(capsys):
    line = error_line(capsys, "run", "--backend", "openai", "--base-url", "http://127.0.0.1:9")
    assert "needs --profile" in line and "None" not in line and "llama.cpp-server" in line


def test_a_peer_profile_for_a_request_file_backend_says_what_it_is(capsys):
    line = error_line(capsys, "run", "--profile", "vllm-apc", "--no-generated", "-k", "plan-kinds")
    assert "peer profile" in line and "--backend openai --base-url" in line and "kvconform-1" in line


@pytest.mark.parametrize("option", [["--api-key-env", "KEY"], ["--tokenizer", "spec/tokenizers/phi-3-mini"],
                                    ["--model", "m"]])
def test_a_server_option_on_the_default_backend_names_the_server_backend(capsys, option):
    line = error_line(capsys, "run", *option)
    assert "applies to --backend openai" in line and "--base-url" in line and "peer suite" not in line


def test_an_empty_api_key_variable_is_not_called_unset(capsys, monkeypatch):
    monkeypatch.setenv("EMPTY_KEY", "")
    line = error_line(capsys, "run", "--backend", "openai", "--base-url", "http://127.0.0.1:9", "--profile",
                      "llama.cpp-server", "--api-key-env", "EMPTY_KEY")
    assert "set but empty" in line
    monkeypatch.delenv("EMPTY_KEY")
    line = error_line(capsys, "run", "--backend", "openai", "--base-url", "http://127.0.0.1:9", "--profile",
                      "llama.cpp-server", "--api-key-env", "EMPTY_KEY")
    assert "is not set" in line


def test_campaign_help_lists_no_option_it_refuses(capsys):
    with pytest.raises(SystemExit):
        kvconform(["campaign", "--help"])
    out = capsys.readouterr().out
    for flag in ("--base-url", "--api-key-env", "--peer-setting", "--tokenizer", "openai"):
        assert flag not in out, flag


def test_run_help_gives_engine_dir_to_both_adapters_that_take_it(capsys):
    with pytest.raises(SystemExit):
        kvconform(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--engine-dir DIR command and inprocess adapters" in out
    assert "refused where it contradicts" in out


def _groups(command) -> dict[str, str]:
    """option -> the title of the --help group it is listed under."""
    import argparse
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return {flag: group.title for group in parser._action_groups for action in group._group_actions
            for flag in action.option_strings}


def test_run_help_lists_each_option_under_its_own_concern():
    from conformance.commands import campaign, run
    groups = _groups(run)
    where = {flag: groups[flag] for flag in ("--jobs", "--shard", "--executor", "--ray-address")}
    assert set(where.values()) == {"where the work runs"}, where
    assert groups["--timing"] == groups["--timing-fraction"] == groups["--fail-fast"] == "verdicts"
    assert groups["--case"] == groups["--rule"] == groups["--list"] == "case selection"
    assert groups["--examples"] == groups["--seed"] == "generated request sets"
    assert groups["--executable"] == groups["--engine-dir"] == groups["--capabilities"] != groups["--backend"]
    groups = _groups(campaign)
    assert groups["--jobs"] == groups["--executor"] == "where the work runs"
    assert groups["--variant"] == groups["--backend"] == "backend"


def test_the_radix_explanation_does_not_call_a_page_count_the_common_prefix():
    from reference import peers
    trace = peers.PeerTrace()
    sim = peers.simulator("sglang-radix", {"page_size": 16}, trace=trace)
    trace.begin(0)
    sim.commit(peers.PeerRequest(list(range(40))), [99])
    trace.begin(1)
    assert sim.predict(peers.PeerRequest(list(range(40)) + [7])) == 32
    head, steps = trace.explained(1)
    assert head.rule == "PEER-SGL-1" and "longest common prefix" not in head.why
    assert "= 16 * floor(32 / 16) = 32" in head.why and "whole pages of 16" in head.why
    assert [s.rule for s in steps] == ["PEER-SGL-3", "PEER-SGL-4", "PEER-SGL-1"]


def test_a_timeout_too_short_for_the_capabilities_probe_says_so(capsys, tmp_path):
    """`--timeout 1e-9` on the bundled CLI: the probe is killed at the deadline; the message said
    it "exited None"."""
    line = error_line(capsys, "run", "--backend", "command", "--no-generated", "-k", "golden/plan-kinds-p4",
                      "--report", tmp_path / "r", "--no-progress", "--timeout", "1e-9")
    assert "None" not in line and "did not finish within --timeout" in line, line
