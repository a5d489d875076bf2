"""`kvconform validate` and `kvconform simulate`: exit codes, one-line errors naming the file
and the JSON path, never a traceback."""
import json
import os
from pathlib import Path

import pytest

import reference
from conformance.cli import main

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "cases"
GOLDEN = CASES / "golden"
MEDIA = CASES / "media"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def kv(capsys, *argv):
    """Run the CLI in-process: (exit code, stdout, stderr lines)."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, [line for line in err.splitlines() if line]


def one_line_error(lines, file, path=None):
    assert len(lines) == 1, f"expected one error line, got {lines}"
    assert lines[0].startswith(f"kvconform: error: {file}: "), lines[0]
    if path:
        assert f": {path}: " in lines[0], f"{lines[0]!r} does not name {path}"


def write(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return path


def request(*contents, **top):
    return {"apply_chat_template": False, "max_generate_length": 1, **top,
            "requests": [{"messages": [{"role": "user", "content": c}]} for c in contents]}


# -- validate ----------------------------------------------------------------------------------

def test_every_committed_case_validates(capsys):
    files = sorted(p for p in CASES.rglob("*.json") if "media" not in p.relative_to(CASES).parts)
    code, out, err = kv(capsys, "validate", *files)
    assert code == 0, "\n".join(err)
    assert len(out.splitlines()) == len(files)


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*/valid/*.json")), ids=lambda p: f"{p.parts[-3]}/{p.stem}")
def test_valid_fixtures(capsys, path):
    code, out, err = kv(capsys, "validate", "--kind", path.parts[-3], path)
    assert code == 0, err


@pytest.mark.parametrize("path", sorted(p for p in FIXTURES.glob("*/invalid/*.json") if p.name != "expected_paths.json"),
                         ids=lambda p: f"{p.parts[-3]}/{p.stem}")
def test_invalid_fixtures(capsys, path):
    expected = json.loads((path.parent / "expected_paths.json").read_text())[path.name]
    code, out, err = kv(capsys, "validate", "--kind", path.parts[-3], path)
    assert code == 2
    assert any(line.startswith(f"kvconform: error: {path}: {expected}: ") for line in err), (expected, err)


def test_kinds_are_told_from_content(capsys):
    files = [FIXTURES / "request" / "valid" / "minimal.json", FIXTURES / "request" / "valid" / "case.json",
             FIXTURES / "engine" / "valid" / "hybrid.json", FIXTURES / "output" / "valid" / "minimal.json",
             FIXTURES / "profile" / "valid" / "prefill_only.json", FIXTURES / "predictions" / "valid" / "run.json",
             FIXTURES / "capabilities" / "valid" / "bundled.json", FIXTURES / "report" / "valid" / "run.json"]
    code, out, err = kv(capsys, "validate", *files)
    assert code == 0, err
    kinds = [line.rsplit("(", 1)[1].rstrip(")") for line in out.splitlines()]
    assert kinds == ["request", "case", "engine", "output", "profile", "predictions", "capabilities", "report"]


@pytest.mark.parametrize("name, content, message", [
    ("malformed.json", '{"requests": [', "invalid JSON at line 1"),
    ("utf8.json", b'{"requests": "\xff\xfe"}', "not valid UTF-8"),
    ("deep.json", "[" * 100000 + "]" * 100000, "nested too deeply"),
    ("scalar.json", "42", "cannot tell what kind"),
])
def test_unreadable_files(capsys, tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    code, out, err = kv(capsys, "validate", path)
    assert code == 2
    one_line_error(err, path)
    assert message in err[0]


def test_missing_file_and_directory(capsys, tmp_path):
    code, out, err = kv(capsys, "validate", tmp_path / "nope.json", tmp_path)
    assert code == 2 and len(err) == 2
    assert err[0] == f"kvconform: error: {tmp_path / 'nope.json'}: file not found"
    assert err[1].startswith(f"kvconform: error: {tmp_path}: is a directory")


@pytest.mark.parametrize("doc, path", [
    (request("abcd", context_cache_lookup_policy="sometimes"), "$.context_cache_lookup_policy"),
    (request("abcd", context_cache_commit_policy="all"), "$.context_cache_commit_policy"),
    (dict(request("abcd", "efgh", batch_size=2, available_lora_weights={"a": "x", "b": "y"}),
          requests=[{"messages": [{"role": "user", "content": "ab"}], "lora_name": "a"},
                    {"messages": [{"role": "user", "content": "ab"}], "lora_name": "b"}]), "$.requests[1].lora_name"),
    (request([{"type": "text", "text": "ab"}, {"type": "image", "image": str(MEDIA / "missing.png")}]),
     "$.requests[0].messages[0].content[1].image"),
    (request([{"type": "image", "image": str(MEDIA / "bad_bomb.png")}]), "$.requests[0].messages[0].content[0].image"),
    (dict(request("ab"), requests=[{"messages": [{"role": "user", "content": "ab"}], "lora_name": "z"}]), "$.requests[0].lora_name"),
])
def test_request_semantic_errors(capsys, tmp_path, doc, path):
    for ref in doc.get("available_lora_weights", {}).values():    # present, so the error is the one named
        (tmp_path / ref).touch()
    file = write(tmp_path, "r.json", doc)
    code, out, err = kv(capsys, "validate", file)
    assert code == 2
    one_line_error(err, file, path)


def test_engine_dependent_checks(capsys, tmp_path):
    engine = reference.engine_from_build_args({"maxInputLen": 3, "maxKVCacheCapacity": 8, "maxKVPoolPages": 0,
                                               "tokensPerPage": 4}).to_config()
    (tmp_path / "config.json").write_text(json.dumps(engine))
    file = write(tmp_path, "r.json", request([{"type": "image", "image": str(MEDIA / "img_a_16x16.png")}]))
    assert kv(capsys, "validate", file)[0] == 0
    code, out, err = kv(capsys, "validate", "--engine-dir", tmp_path, file)
    assert code == 2
    one_line_error(err, file, "$.requests[0].messages[0].content[0].image")
    assert "no vision encoder" in err[0]


def golden_doc(name):
    return json.loads((GOLDEN / f"{name}.json").read_text())


@pytest.mark.parametrize("edit, path", [
    (lambda m: m.update(rules=["CR-PLAN-99"]), "$._conformance.rules[0]"),
    (lambda m: m["engine"].update(maxKVPoolPages=1), "$._conformance.engine.maxKVPoolPages"),
    (lambda m: m["expect"].update(requests=[None]), "$._conformance.expect.requests"),
    (lambda m: m.update(generated=["X"]), "$._conformance.generated"),
    (lambda m: m.update(negative={"phase": "parse", "path": "$.requests[0]"}), "$._conformance.negative"),
])
def test_case_block_errors(capsys, tmp_path, edit, path):
    doc = golden_doc("plan-kinds-p4")
    edit(doc["_conformance"])
    file = write(tmp_path, "c.json", doc)
    code, out, err = kv(capsys, "validate", file)
    assert code == 2
    assert any(f": {path}: " in line for line in err), err


def test_negative_case_must_fail_where_it_says(capsys, tmp_path):
    doc = golden_doc("neg-mixed-lora")
    doc["_conformance"]["negative"]["path"] = "$.requests[0].lora_name"
    file = write(tmp_path, "c.json", doc)
    code, out, err = kv(capsys, "validate", file)
    assert code == 2
    one_line_error(err, file, "$._conformance.negative.path")
    assert "fails at $.requests[1].lora_name" in err[0]


# -- simulate ----------------------------------------------------------------------------------

def case_engine(tmp_path, name):
    doc = golden_doc(name)
    config = reference.engine_from_build_args(doc["_conformance"]["engine"]).to_config()
    engine_dir = tmp_path / "engine"
    engine_dir.mkdir()
    (engine_dir / "config.json").write_text(json.dumps(config))
    request_file = tmp_path / f"{name}.json"
    request_file.write_text(json.dumps(doc))
    return doc, engine_dir, request_file


def test_simulate_reproduces_a_golden_case(capsys, tmp_path):
    doc, engine_dir, request_file = case_engine(tmp_path, "pub-canonical-projection")
    code, out, err = kv(capsys, "simulate", "--engineDir", engine_dir, "--inputFile", request_file,
                        "--profileOutputFile", tmp_path / "prof.json", "--outputFile", tmp_path / "pred.json",
                        "--enableContextReuse", "--contextCacheMaxRecords", "2", "--dumpProfile")
    assert code == 0, err
    profile = json.loads((tmp_path / "prof.json").read_text())
    expect = doc["_conformance"]["expect"]
    assert profile["prefill"] == expect["prefill"]
    for key, value in expect["context_cache"].items():
        assert profile["context_cache"][key] == value or all(profile["context_cache"][key][k] == v for k, v in value.items())
    predictions = json.loads((tmp_path / "pred.json").read_text())
    assert predictions["input_file"] == str(request_file.resolve()) and predictions["rejected"] is None
    assert kv(capsys, "validate", tmp_path / "prof.json", tmp_path / "pred.json")[0] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["engine", "pred.json", "prof.json", "pub-canonical-projection.json"]


def test_simulate_writes_one_line_per_response_and_survives_a_file_name_that_is_not_utf8(capsys, tmp_path):
    """The outputs are indented down to the items of top-level lists, one line each. A request
    file whose name is not UTF-8 puts a lone surrogate into `input_file`, which orjson cannot
    write: json writes that value instead (escaped), and the file is still JSON."""
    doc, engine_dir, request_file = case_engine(tmp_path, "pub-canonical-projection")
    odd = tmp_path / os.fsdecode(b"in-\xff.json")
    odd.write_bytes(request_file.read_bytes())
    code, out, err = kv(capsys, "simulate", "--engineDir", engine_dir, "--inputFile", odd,
                        "--profileOutputFile", tmp_path / "prof.json", "--outputFile", tmp_path / "pred.json",
                        "--enableContextReuse", "--contextCacheMaxRecords", "2", "--dumpProfile")
    assert code == 0, err
    text = (tmp_path / "pred.json").read_text(encoding="utf-8")
    predictions = json.loads(text)
    assert predictions["input_file"] == os.path.abspath(odd) and "\\udcff" in text
    lines = [line.removesuffix(",") for line in text.splitlines()]
    assert lines[:2] == ["{", '  "format": "kvconform-predictions-v1"']
    assert len(predictions["responses"]) > 1
    for response in predictions["responses"]:
        assert "    " + json.dumps(response, separators=(",", ":")) in lines
    assert kv(capsys, "validate", tmp_path / "prof.json", tmp_path / "pred.json")[0] == 0


def test_simulate_on_a_bare_config(capsys, tmp_path):
    doc, engine_dir, request_file = case_engine(tmp_path, "plan-kinds-p4")
    code, out, err = kv(capsys, "simulate", "--engineConfig", engine_dir / "config.json", "--inputFile", request_file,
                        "--profileOutputFile", tmp_path / "out" / "prof.json", "--enableContextReuse")
    assert code == 0, err
    cc = json.loads((tmp_path / "out" / "prof.json").read_text())["context_cache"]
    assert cc["plans"] == doc["_conformance"]["expect"]["context_cache"]["plans"]


def test_simulate_refused_deployment(capsys, tmp_path):
    doc, engine_dir, request_file = case_engine(tmp_path, "sup-2-fp8")
    code, out, err = kv(capsys, "simulate", "--engineDir", engine_dir, "--inputFile", request_file,
                        "--profileOutputFile", tmp_path / "prof.json", "--outputFile", tmp_path / "pred.json",
                        "--enableContextReuse")
    assert code == 3
    assert err == ["kvconform: deployment refused (CR-SUP-2): " + reference.validate_deployment(
        reference.load_engine(str(engine_dir)), reference.RuntimeFlags(enable_context_reuse=True)).message]
    assert json.loads((tmp_path / "pred.json").read_text())["rejected"]["rule"] == "CR-SUP-2"
    assert not (tmp_path / "prof.json").exists()


def test_simulate_failed_batch_exits_1(capsys, tmp_path):
    doc, engine_dir, request_file = case_engine(tmp_path, "batch-legacy-capture")
    code, out, err = kv(capsys, "simulate", "--engineDir", engine_dir, "--inputFile", request_file,
                        "--profileOutputFile", tmp_path / "prof.json", "--outputFile", tmp_path / "pred.json",
                        "--enableContextReuse")
    assert code == 1
    assert err == ["kvconform: batch 1 fails (CR-SUP-8): " + reference.support.LEGACY_CAPTURE_MESSAGE]
    statuses = [r["status"] for r in json.loads((tmp_path / "pred.json").read_text())["responses"]]
    assert statuses == ["ok", "error", "ok"]


def test_simulate_needs_a_transcript_then_takes_one(capsys, tmp_path):
    doc, engine_dir, request_file = case_engine(tmp_path, "pub-decode-end-p4")
    args = ["simulate", "--engineDir", engine_dir, "--inputFile", request_file, "--profileOutputFile",
            tmp_path / "prof.json", "--enableContextReuse"]
    code, out, err = kv(capsys, *args)
    assert code == 2
    one_line_error(err, request_file)
    assert "request 0" in err[0] and "transcript" in err[0]
    transcript = write(tmp_path, "out.json", {"responses": [
        {"request_idx": 0, "batch_idx": 0, "output_text": "XY", "finish_reason": "end-of-sequence"},
        {"request_idx": 1, "batch_idx": 1, "output_text": "", "finish_reason": "end-of-sequence", "output_ids": [257]}]})
    code, out, err = kv(capsys, *args, "--transcript", transcript)
    assert code == 0, err
    cc = json.loads((tmp_path / "prof.json").read_text())["context_cache"]
    assert cc["publications"] == {"attempts": 3, "committed": 2, "existing": 1, "successful_endpoints": 3}


def test_simulate_bad_inputs(capsys, tmp_path):
    doc, engine_dir, request_file = case_engine(tmp_path, "plan-kinds-p4")
    base = ["--profileOutputFile", tmp_path / "prof.json"]
    code, out, err = kv(capsys, "simulate", "--engineDir", tmp_path / "none", "--inputFile", request_file, *base)
    assert code == 2
    one_line_error(err, tmp_path / "none" / "config.json")
    bad_request = write(tmp_path, "bad.json", request("ab", context_cache_lookup_policy="x"))
    code, out, err = kv(capsys, "simulate", "--engineDir", engine_dir, "--inputFile", bad_request, *base)
    assert code == 2
    one_line_error(err, bad_request, "$.context_cache_lookup_policy")
    short = write(tmp_path, "short.json", {"responses": []})
    code, out, err = kv(capsys, "simulate", "--engineDir", engine_dir, "--inputFile", request_file, "--transcript", short, *base)
    assert code == 2
    one_line_error(err, short, "$.responses")
    code, out, err = kv(capsys, "simulate", "--engineDir", engine_dir, "--inputFile", request_file,
                        "--profileOutputFile", request_file)
    assert code == 2 and "overwrite" in err[0]
    assert json.loads(request_file.read_text()) == doc


def test_relative_paths_resolve_from_the_real_file_through_a_symlink(capsys, tmp_path):
    """tests/test_cases is a symlink to cases/: a case's `../../../spec/tokenizers/...` names a
    folder from the case's real place, as the operating system opens it; a lexical join of the
    linked path named tests/spec/... and failed with a traceback."""
    linked = ROOT / "tests" / "test_cases" / "sections" / "neg" / "aspect-limit-edge-llm-qwen-vl.json"
    assert os.path.islink(ROOT / "tests" / "test_cases")
    code, out, err = kv(capsys, "validate", linked)
    assert code == 0, err
    # the same through a link to the file's folder made here
    os.symlink(CASES / "sections" / "neg", tmp_path / "neg")
    code, out, err = kv(capsys, "validate", tmp_path / "neg" / "aspect-limit-edge-llm-qwen-vl.json")
    assert code == 0, err
    # and an engine description whose tokenizer folder sits beside its real file
    engine_dir = tmp_path / "real" / "engine"
    engine_dir.mkdir(parents=True)
    os.symlink(ROOT / "spec" / "tokenizers" / "phi-3-vision", engine_dir / "tok")
    config = {"format": "kvconform-engine-v1", "model": "attention", "layer_kinds": ["attention"],
              "hidden_size": 32, "num_attention_heads": 2, "num_kv_heads": 1, "head_dim": 16,
              "intermediate_size": 32, "tokens_per_page": 128, "max_input_len": 256,
              "max_kv_cache_capacity": 512, "max_batch_size": 1, "kv_pool_pages": 4,
              "vocab_size": 32045, "eos_token_id": 32000,
              "tokenizer": {"profile": "hf", "files": "tok", "loader": "tokenizers-raw"},
              "rope_theta": 10000.0, "tie_embeddings": True, "recurrent": None, "vision": None, "audio": None,
              "image_token_id": None, "audio_token_id": None, "kv_cache_dtype": "fp16", "lora_adapters": {},
              "deployment": {"spec_decode": None, "action_runner": False, "block_diffusion": False,
                             "vision_bidirectional": False}, "seed": 0, "weights": "model.safetensors"}
    (engine_dir / "config.json").write_text(json.dumps(config))
    (tmp_path / "elsewhere" / "deep").mkdir(parents=True)
    os.symlink(engine_dir / "config.json", tmp_path / "elsewhere" / "deep" / "engine.json")
    code, out, err = kv(capsys, "validate", tmp_path / "elsewhere" / "deep" / "engine.json")
    assert code == 0, err


@pytest.mark.parametrize("model", ["qwen2.5", "qwen3"])
def test_the_committed_qwen_folders_point_to_the_fetch_tool(capsys, tmp_path, model):
    """spec/tokenizers/qwen2.5 and qwen3 hold tokenizer_config.json only: naming one says where
    tokenizer.json comes from (it read 'not a tokenizer the tokenizers library reads: No such file')."""
    import subprocess
    import sys
    folder = ROOT / "spec" / "tokenizers" / model
    assert not (folder / "tokenizer.json").exists() and (folder / "tokenizer_config.json").is_file()
    config = {"format": "kvconform-engine-v1", "model": "attention", "layer_kinds": ["attention"],
              "hidden_size": 32, "num_attention_heads": 2, "num_kv_heads": 1, "head_dim": 16,
              "intermediate_size": 32, "tokens_per_page": 128, "max_input_len": 256,
              "max_kv_cache_capacity": 512, "max_batch_size": 1, "kv_pool_pages": 4,
              "vocab_size": 151669, "eos_token_id": 151645,
              "tokenizer": {"profile": "hf", "files": str(folder), "loader": "tokenizers-raw"},
              "rope_theta": 10000.0, "tie_embeddings": True, "recurrent": None, "vision": None, "audio": None,
              "image_token_id": None, "audio_token_id": None, "kv_cache_dtype": "fp16", "lora_adapters": {},
              "deployment": {"spec_decode": None, "action_runner": False, "block_diffusion": False,
                             "vision_bidirectional": False}, "seed": 0, "weights": "model.safetensors"}
    code, out, err = kv(capsys, "validate", write(tmp_path, "engine.json", config))
    assert code == 2 and len(err) == 1 and "tools/fetch_qwen_tokenizer.py" in err[0], err
    built = subprocess.run([sys.executable, "-m", "gpu_backend", "build", "--engineDir", str(tmp_path / "e"),
                            "--maxInputLen", "40", "--maxKVCacheCapacity", "48", "--maxKVPoolPages", "0",
                            "--tokenizer", str(folder)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert built.returncode == 2 and "tools/fetch_qwen_tokenizer.py" in built.stderr, built.stderr
