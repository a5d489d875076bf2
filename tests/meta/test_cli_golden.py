"""`kvconform simulate` reproduces every golden case's hand-derived `expect` block, end to end:
engine directory, command-line flags, a transcript holding the case's `generated` tokens, and
the profile and predictions files it writes."""
import json
from pathlib import Path

import pytest

import reference
from conformance.cli import main
from reference.requests import parse_generated

GOLDEN = Path(__file__).resolve().parents[2] / "cases" / "golden"
CASES = [p for p in sorted(GOLDEN.glob("*.json")) if "negative" not in json.loads(p.read_text())["_conformance"]]
SWITCHES = {"enableContextReuse", "outputHiddenStates", "dumpProfile", "poisonFreshPages"}
FACTS = ("status", "input_tokens")


def cli_flags(runtime: dict) -> list[str]:
    out = []
    for key, value in runtime.items():
        if key in SWITCHES:
            out += [f"--{key}"] if value else []
        else:
            out += [f"--{key}", str(value)]
    return out


def transcript(generated: list) -> dict:
    responses = []
    for i, entry in enumerate(generated):
        ids = parse_generated(entry)
        responses.append({"request_idx": i, "batch_idx": 0, "output_text": "", "output_ids": ids, "finish_reason": "max-length"}
                         if ids is not None else {"request_idx": i, "batch_idx": 0, "output_text": "", "finish_reason": "error"})
    return {"responses": responses}


def with_adapter_files(doc: dict, engine_dir: Path) -> dict:
    """A case's adapter paths name files of its engine folder (the runner makes them absolute);
    the oracle needs them to exist (CR-BATCH-4) but never reads them, so empty files do."""
    weights = doc.get("available_lora_weights", {})
    for name, ref in weights.items():
        weights[name] = str(engine_dir / ref)
        (engine_dir / ref).parent.mkdir(parents=True, exist_ok=True)
        (engine_dir / ref).touch()
    return doc


def mismatches(expected, observed, where=""):
    if isinstance(expected, dict) and isinstance(observed, dict):
        return [m for k, v in expected.items() for m in mismatches(v, observed.get(k, "<absent>"), f"{where}.{k}")]
    return [] if expected == observed else [f"{where}: expected {expected!r}, observed {observed!r}"]


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_simulate_reproduces_the_golden_case(path, tmp_path, capsys):
    doc = json.loads(path.read_text())
    meta = doc["_conformance"]
    engine_dir = tmp_path / "engine"
    engine_dir.mkdir()
    (engine_dir / "config.json").write_text(json.dumps(reference.engine_from_build_args(meta["engine"]).to_config()))
    request_file = tmp_path / path.name
    text = path.read_text().replace('"../media/', f'"{GOLDEN.parent / "media"}/')
    request_file.write_text(json.dumps(with_adapter_files(json.loads(text), engine_dir)))
    argv = ["simulate", "--engineDir", str(engine_dir), "--inputFile", str(request_file),
            "--profileOutputFile", str(tmp_path / "prof.json"), "--outputFile", str(tmp_path / "pred.json"),
            *cli_flags(meta.get("runtime", {}))]
    if "generated" in meta:
        (tmp_path / "out.json").write_text(json.dumps(transcript(meta["generated"])))
        argv += ["--transcript", str(tmp_path / "out.json")]
    code = main(argv)
    err = capsys.readouterr().err
    expect = meta["expect"]
    predictions = json.loads((tmp_path / "pred.json").read_text())
    if "rejected" in expect:
        assert code == 3 and predictions["rejected"]["rule"] == expect["rejected"]["rule"], err
        assert not (tmp_path / "prof.json").exists()
        return
    failed = any(r.get("status") == "error" for r in expect.get("requests", []) if r)
    assert code == (1 if failed else 0), err
    profile = json.loads((tmp_path / "prof.json").read_text())
    problems = [m for section in ("context_cache", "prefill") if section in expect
                for m in mismatches(expect[section], profile.get(section, "<absent>"), section)]
    for i, (want, got) in enumerate(zip(expect.get("requests", []), predictions["responses"])):
        for key, value in (want or {}).items():
            observed = got[key] if key in FACTS else (got["context_cache"] or {}).get(key, "<absent>")
            problems += mismatches(value, observed, f"requests[{i}].{key}")
    assert not problems, f"{meta['id']}: kvconform simulate differs from the hand derivation:\n  " + "\n  ".join(problems)
