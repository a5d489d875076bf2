"""One spelling per option across the `kvconform` commands: kebab-case, except where a command
mirrors Edge-LLM's `llm_inference` flag for flag (`simulate`); a changed spelling keeps working
for one release as a hidden alias with a one-line note (conformance/commands/options.py)."""
import argparse
import json
import re
from pathlib import Path

import pytest

import reference
from conformance import cli

MEDIA = Path(__file__).resolve().parents[2] / "cases" / "media"
MIRRORS_LLM_INFERENCE = {"simulate"}
KEBAB = re.compile(r"^--?[a-z0-9]+(-[a-z0-9]+)*$")


def visible_options() -> dict[str, set[str]]:
    """{command: the option strings its --help shows}."""
    out = {}
    for name, (module_name, _) in cli.COMMANDS.items():
        parser = argparse.ArgumentParser()
        __import__(module_name, fromlist=["add_arguments"]).add_arguments(parser)
        out[name] = {s for a in parser._actions if a.help != argparse.SUPPRESS for s in a.option_strings}
    return out


def test_every_visible_option_is_kebab_case_but_where_a_command_mirrors_llm_inference():
    options = visible_options()
    assert set(options) == set(cli.COMMANDS) and "--engine-dir" in options["validate"]
    odd = {name: sorted(s for s in found if not KEBAB.match(s))
           for name, found in options.items() if name not in MIRRORS_LLM_INFERENCE}
    assert not any(odd.values()), f"options not in kebab-case: {odd}"
    assert "--engineDir" in options["simulate"], "simulate mirrors llm_inference's spelling"


def engine_dir(tmp_path):
    config = reference.engine_from_build_args({"maxInputLen": 8, "maxKVCacheCapacity": 16, "maxKVPoolPages": 0,
                                               "tokensPerPage": 4}).to_config()
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


@pytest.mark.parametrize("old, new", [("--engineDir", "--engine-dir"), ("--engineConfig", "--engine-config")])
def test_validate_takes_its_former_spelling_with_a_one_line_note(old, new, tmp_path, capsys):
    folder = engine_dir(tmp_path)
    request = tmp_path / "r.json"
    image = {"type": "image", "image": str(MEDIA / "img_a_16x16.png")}
    request.write_text(json.dumps({"requests": [{"messages": [{"role": "user", "content": [image]}]}]}))
    target = folder if old == "--engineDir" else folder / "config.json"
    assert cli.main(["validate", str(request)]) == 0
    capsys.readouterr()
    assert cli.main(["validate", new, str(target), str(request)]) == 2     # an image, and no vision encoder
    out_new, err_new = capsys.readouterr()
    assert cli.main(["validate", old, str(target), str(request)]) == 2
    out_old, err_old = capsys.readouterr()
    note = f"kvconform: warning: {old} is deprecated and goes in the next release: use {new}"
    assert err_old.splitlines() == [note] + err_new.splitlines() and out_old == out_new
    assert cli.main(["validate", new, str(target), old, str(target), str(request)]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_describe_takes_its_former_spellings_and_help_shows_only_the_new_ones(tmp_path, capsys):
    folder = engine_dir(tmp_path)
    assert cli.main(["describe", "--engine-dir", str(folder)]) == 0
    new = capsys.readouterr()
    assert cli.main(["describe", "--engineDir", str(folder)]) == 0
    old = capsys.readouterr()
    assert old.out == new.out and old.err.splitlines()[0] == ("kvconform: warning: --engineDir is deprecated and "
                                                             "goes in the next release: use --engine-dir")
    assert cli.main(["describe", "--engineDir", str(folder), "--multimodalEngineDir", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert "--multimodalEngineDir is deprecated" in err and "--multimodal-engine-dir" in err
    with pytest.raises(SystemExit):
        cli.main(["describe", "--help"])
    shown = capsys.readouterr().out
    assert "--engine-dir" in shown and "--multimodal-engine-dir" in shown and "engineDir" not in shown
