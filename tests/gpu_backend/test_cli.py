"""The command lines (docs/ARCHITECTURE.md section 4): files, exit codes and one-line errors.

One test starts the real process (`python -m gpu_backend`, torch imported in two seconds); the
others call the same entry point in process, which returns the exit code the process exits with
(gpu_backend/__main__.py: `sys.exit(main())`) and prints the same lines.
"""
import contextlib
import io
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from gpu_backend.cli import main
from tests.helpers.backend import MEDIA, ROOT, schema_validator


def process(*args):
    """`python -m gpu_backend ARGS` in a process of its own."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "gpu_backend", *map(str, args)], capture_output=True, text=True,
                       env=env, timeout=120)
    assert "Traceback" not in p.stderr
    return p


def cli(*args):
    """The same command in process: its exit code and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def one_line_error(p, code):
    assert p.returncode == code, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_backend: "), p.stderr
    return lines[0]


@pytest.fixture(scope="module")
def cli_engine(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli") / "engine"
    p = cli("build", "--engineDir", d, "--maxInputLen", 40, "--maxKVCacheCapacity", 48, "--maxKVPoolPages", 0,
            "--tokensPerPage", 4, "--maxBatchSize", 2, "--vision", "--loraAdapters", "a,b")
    assert p.returncode == 0, p.stderr
    return d


def write(path, doc):
    path.write_text(json.dumps(doc))
    return path


DOC = {"apply_chat_template": False, "temperature": 0, "max_generate_length": 3, "num_logprobs": 2,
       "_conformance": {"ignored": True},
       "requests": [{"messages": [{"role": "user", "content": "abcdefgh"}], "_scenario": "ignored"},
                    {"messages": [{"role": "user", "content": [
                        {"type": "text", "text": "ab"}, {"type": "image", "image": str(MEDIA / "img_a_16x16.png")},
                        {"type": "text", "text": "cdefgh"}]}], "lora_name": "a"}]}


def with_adapters(doc, engine_dir):
    """The request file with its LoRA adapter named in available_lora_weights (CR-BATCH-4)."""
    return dict(doc, available_lora_weights={"a": str(engine_dir / "lora" / "a.safetensors")})


def test_build_and_infer_write_valid_files(cli_engine, tmp_path):
    schema_validator("engine").validate(json.loads((cli_engine / "config.json").read_text()))
    assert (cli_engine / "lora" / "b.safetensors").is_file()
    inp = write(tmp_path / "in.json", with_adapters(DOC, cli_engine))
    p = process("infer", "--engineDir", cli_engine, "--inputFile", inp, "--outputFile", tmp_path / "out.json",
                "--enableContextReuse", "--profileOutputFile", tmp_path / "prof.json", "--dumpProfile",
                "--poisonFreshPages", "--checkInvariants", "--warmup", 1, "--device", "cpu")
    assert p.returncode == 0, p.stderr
    out = json.loads((tmp_path / "out.json").read_text())
    prof = json.loads((tmp_path / "prof.json").read_text())
    schema_validator("output").validate(out)
    schema_validator("profile").validate(prof)
    assert [r["input_tokens"] for r in out["responses"]] == [8, 9]
    assert prof["context_cache"]["admitted_sequences"] == 3 and prof["prefill"]["total_runs"] == 2
    assert sorted(os.listdir(tmp_path)) == ["in.json", "out.json", "prof.json"]      # no temp files left


def test_hidden_states_file(cli_engine, tmp_path):
    from safetensors.torch import load_file
    inp = write(tmp_path / "in.json", with_adapters(DOC, cli_engine))
    p = cli("infer", "--engineDir", cli_engine, "--inputFile", inp, "--outputFile", tmp_path / "out.json",
            "--outputHiddenStates", tmp_path / "hs.safetensors", "--enableContextReuse",
            "--profileOutputFile", tmp_path / "prof.json")
    assert p.returncode == 0, p.stderr
    hs = load_file(tmp_path / "hs.safetensors")
    assert {k: tuple(v.shape) for k, v in hs.items()} == {"request_0": (8, 64), "request_1": (9, 64)}
    assert json.loads((tmp_path / "prof.json").read_text())["context_cache"]["lookup_bypass_sequences"] == 2


def test_capabilities(cli_engine):
    p = cli("capabilities")
    assert p.returncode == 0
    caps = json.loads(p.stdout)
    schema_validator("capabilities").validate(caps)
    assert caps["tokens_per_page"] == "any" and "tp" not in caps["features"]


def test_build_refusal(tmp_path):
    p = cli("build", "--engineDir", tmp_path / "e", "--maxInputLen", 8, "--maxKVCacheCapacity", 12,
            "--maxKVPoolPages", 5, "--tokensPerPage", 4, "--maxBatchSize", 2)
    assert "below the minimum 6" in one_line_error(p, 2)
    assert not (tmp_path / "e" / "config.json").exists()


@pytest.mark.parametrize("content, needle", [
    ("{not json", "in.json: $: not a JSON file"),
    (json.dumps({"requests": [{"messages": [{"role": "user", "content": [{"type": "image", "image": str(MEDIA / "bad_bomb.png")}]}]}]}),
     "in.json: $.requests[0].messages[0].content[0].image: image of 100000x100000"),
])
def test_bad_input_exit_2(cli_engine, tmp_path, content, needle):
    inp = tmp_path / "in.json"
    inp.write_text(content)
    p = cli("infer", "--engineDir", cli_engine, "--inputFile", inp, "--outputFile", tmp_path / "out.json",
            "--profileOutputFile", tmp_path / "prof.json", "--enableContextReuse")
    assert needle in one_line_error(p, 2)
    assert sorted(os.listdir(tmp_path)) == ["in.json"]


def test_usage_errors_exit_2(cli_engine, tmp_path):
    inp = write(tmp_path / "in.json", with_adapters(DOC, cli_engine))
    assert "unrecognized arguments" in one_line_error(cli("infer", "--engineDir", cli_engine, "--inputFile", inp,
                                                          "--outputFile", tmp_path / "o.json", "--bogus"), 2)
    line = one_line_error(cli("infer", "--engineDir", cli_engine, "--inputFile", inp, "--outputFile", inp), 2)
    assert "refusing to overwrite an input file" in line
    assert json.loads(inp.read_text()) == with_adapters(DOC, cli_engine)
    line = one_line_error(cli("infer", "--engineDir", tmp_path / "nothing", "--inputFile", inp,
                              "--outputFile", tmp_path / "o.json"), 2)
    assert "config.json" in line
    assert sorted(os.listdir(tmp_path)) == ["in.json"]


def test_deployment_rejected_exit_3(tmp_path):
    assert cli("build", "--engineDir", tmp_path / "e", "--maxInputLen", 8, "--maxKVCacheCapacity", 12,
               "--maxKVPoolPages", 0, "--tokensPerPage", 4, "--kvCacheDtype", "fp8").returncode == 0
    inp = write(tmp_path / "in.json", DOC)
    p = cli("infer", "--engineDir", tmp_path / "e", "--inputFile", inp, "--outputFile", tmp_path / "o.json",
            "--profileOutputFile", tmp_path / "p.json", "--enableContextReuse")
    assert "(FP16 KV only)" in one_line_error(p, 3)
    assert not (tmp_path / "o.json").exists() and not (tmp_path / "p.json").exists()


def test_failed_batch_exit_1_after_all_batches(cli_engine, tmp_path):
    doc = {"apply_chat_template": False, "temperature": 0, "max_generate_length": 2,
           "requests": [{"messages": [{"role": "user", "content": "abcd"}]},
                        {"messages": [{"role": "user", "content": "x" * 41}]},
                        {"messages": [{"role": "user", "content": "efgh"}], "save_system_prompt_kv_cache": True},
                        {"messages": [{"role": "user", "content": "ijkl"}]}]}
    inp = write(tmp_path / "in.json", doc)
    p = cli("infer", "--engineDir", cli_engine, "--inputFile", inp, "--outputFile", tmp_path / "o.json",
            "--profileOutputFile", tmp_path / "p.json", "--enableContextReuse")
    assert p.returncode == 1 and "Traceback" not in p.stderr
    out = json.loads((tmp_path / "o.json").read_text())
    assert [r["finish_reason"] for r in out["responses"]][1:3] == ["error", "error"]
    assert out["responses"][3]["finish_reason"] != "error"
    assert json.loads((tmp_path / "p.json").read_text())["context_cache"]["admitted_sequences"] == 2


def test_cuda_request_without_cuda_is_a_usage_error(cli_engine, tmp_path):
    import torch
    if torch.cuda.is_available():
        pytest.skip("a CUDA device exists here")
    inp = write(tmp_path / "in.json", with_adapters(DOC, cli_engine))
    p = cli("infer", "--engineDir", cli_engine, "--inputFile", inp, "--outputFile", tmp_path / "o.json",
            "--device", "cuda")
    assert "--device: cuda was requested" in one_line_error(p, 2)
