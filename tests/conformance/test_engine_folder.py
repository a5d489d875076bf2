"""A fixed engine folder is checked before any case runs (spec/RUNNING.md section 2): a
description that contradicts the folder's own config.json, an Edge-LLM folder given without its
description, and a folder that lacks a file its description names are bad input (exit 2), and
an exit-2 run leaves no report folder behind."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.cli import main as kvconform
from conformance.adapters.engines import fixed_engine
from conformance import KvconformError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bundled") / "engine"
    subprocess.run([sys.executable, "-m", "gpu_backend", "build", "--engineDir", str(folder), "--maxInputLen", "40",
                    "--maxKVCacheCapacity", "64", "--maxKVPoolPages", "0", "--tokensPerPage", "4"],
                   check=True, capture_output=True, cwd=ROOT)
    return folder


def run_line(capsys, *argv):
    code = kvconform([str(a) for a in argv])
    _, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.startswith("kvconform: error:")]
    return code, lines


def test_a_description_that_contradicts_the_folder_is_refused(bundled, tmp_path, capsys):
    other = json.loads((bundled / "config.json").read_text())
    other["max_batch_size"] = 8
    (tmp_path / "other.json").write_text(json.dumps(other))
    code, err = run_line(capsys, "run", "--backend", "command", "--executable", "/bin/true", "--engine-dir", bundled,
                         "--engine-config", tmp_path / "other.json", "--no-generated", "-k", "plan-kinds",
                         "--report", tmp_path / "r")
    assert code == 2 and len(err) == 1
    assert str(tmp_path / "other.json") in err[0] and str(bundled / "config.json") in err[0]
    assert "max_batch_size is 8" in err[0] and "is 1" in err[0]
    assert not (tmp_path / "r").exists(), "an exit-2 run leaves no report folder"


def edge_llm_folder(tmp_path: Path, **builder) -> Path:
    folder = tmp_path / "edge"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(ROOT / "spec" / "tokenizers" / "phi-3-mini" / name, folder / name)
    bc = {"max_input_len": 512, "spec_draft": False, "spec_base": False, "max_batch_size": 1, "max_lora_rank": 0,
          "max_kv_cache_capacity": 1024, "max_kv_pool_pages": 8, **builder}
    (folder / "config.json").write_text(json.dumps({
        "model": "phi3", "edgellm_version": "0.10.0", "vocab_size": 32064, "hidden_size": 3072,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 96,
        "kv_cache_dtype": "fp16", "builder_config": bc}))
    return folder


def test_an_edge_llm_folder_needs_its_description_and_says_how(tmp_path):
    folder = edge_llm_folder(tmp_path)
    with pytest.raises(KvconformError, match="kvconform describe --engine-dir"):
        fixed_engine(str(folder))
    assert kvconform(["describe", "--engine-dir", str(folder), "--output", str(tmp_path / "d.json")]) == 0
    engine = fixed_engine(str(folder), str(tmp_path / "d.json"))
    assert engine.config["max_kv_cache_capacity"] == 1024 and engine.config["tokenizer"]["profile"] == "hf"
    described = json.loads((tmp_path / "d.json").read_text())
    described["max_kv_cache_capacity"] = 2048
    (tmp_path / "wrong.json").write_text(json.dumps(described))
    with pytest.raises(KvconformError, match="max_kv_cache_capacity is 2048 .* builder_config.max_kv_cache_capacity "
                                             "is 1024"):
        fixed_engine(str(folder), str(tmp_path / "wrong.json"))


def test_a_folder_without_its_weights_is_refused_before_any_case(bundled, tmp_path, capsys):
    broken = tmp_path / "broken"
    broken.mkdir()
    shutil.copy(bundled / "config.json", broken / "config.json")
    code, err = run_line(capsys, "run", "--engine-dir", broken, "--no-generated", "-k", "plan-kinds",
                         "--report", tmp_path / "r")
    assert code == 2 and len(err) == 1 and "lacks its weights 'model.safetensors'" in err[0]
    assert not (tmp_path / "r").exists()


def test_a_description_naming_missing_tokenizer_files_is_refused(bundled, tmp_path):
    config = json.loads((bundled / "config.json").read_text())
    config.update(tokenizer={"profile": "hf", "files": "tokenizer", "loader": "tokenizers-raw"}, vocab_size=32011,
                  eos_token_id=32000, image_token_id=None)
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(b"")
    with pytest.raises(KvconformError, match="has no tokenizer.json"):
        fixed_engine(str(folder))


def test_a_config_link_that_loops_is_named_as_such(tmp_path, capsys):
    folder = tmp_path / "loop"
    folder.mkdir()
    os.symlink("config.json", folder / "config.json")
    with pytest.raises(KvconformError, match="leads nowhere"):
        fixed_engine(str(folder))
    code, err = run_line(capsys, "describe", "--engine-dir", folder)
    assert code == 2 and "leads nowhere" in err[0] and "no engine config" not in err[0]
