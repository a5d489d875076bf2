"""Chat templates are untrusted code (spec/hf-tokenizer.md TOK-HF-4, "Bounds"): the oracle and
the bundled backend render them in a worker process, bounded in time, memory and output, refuse
the same templates, and every path that meets a bad template says so in one line, exit 2."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import gpu_backend.chat_template as backend_template
import reference.bounded_template as oracle_template
from conformance.cli import main as kvconform

ROOT = Path(__file__).resolve().parents[2]
PHI3 = ROOT / "spec" / "tokenizers" / "phi-3-mini"
HOSTILE = {
    "loops 10^10 times": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "allocates 10 GB at once": "{{ 'x' * 10**10 }}",
    "doubles a string 40 times": "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                                 "{% endfor %}{{ ns.s | length }}",
    "writes 100 MB": "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
    "does not compile": "{% for %}",
    "raises": "{{ raise_exception('roles must alternate') }}",
    "is 2 MB long": "{# " + "x" * (2 << 20) + " #}",
    "is not a string": 42,
}


@pytest.fixture
def short_deadline(monkeypatch):
    monkeypatch.setattr(oracle_template, "DEADLINE_S", 1.5)
    monkeypatch.setattr(backend_template, "SECONDS", 1.5)


@pytest.mark.parametrize("what", sorted(HOSTILE))
def test_the_oracle_and_the_backend_refuse_the_same_templates_quickly(what, short_deadline):
    source, messages = HOSTILE[what], [{"role": "user", "content": "hi"}]
    start = time.monotonic()
    with pytest.raises(ValueError) as oracle_says:
        oracle_template.render(source, {"messages": messages, "add_generation_prompt": True})
    with pytest.raises(ValueError) as backend_says:
        backend_template.ChatTemplate(source, {}).render(messages, True, {})
    assert time.monotonic() - start < 8.0, "each is bounded by its deadline"
    for said in (str(oracle_says.value), str(backend_says.value)):
        assert "\n" not in said and said.startswith("the chat template")


def test_a_normal_template_renders_the_same_in_both(short_deadline):
    config = json.loads((PHI3 / "tokenizer_config.json").read_text())
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}]
    ours = oracle_template.render(config["chat_template"], {"messages": messages, "add_generation_prompt": True,
                                                            "eos_token": "<|endoftext|>", "bos_token": "<s>",
                                                            "unk_token": "<unk>", "pad_token": "<|endoftext|>",
                                                            "tools": None, "documents": None})
    theirs = backend_template.ChatTemplate(config["chat_template"], config).render(messages, True, {})
    assert ours == theirs and ours.startswith("<|system|>")


def tokenizer_with(folder: Path, template) -> Path:
    folder.mkdir(parents=True)
    shutil.copy(PHI3 / "tokenizer.json", folder / "tokenizer.json")
    config = json.loads((PHI3 / "tokenizer_config.json").read_text())
    config["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def phi3_engine(tmp_path_factory) -> Path:
    good = tmp_path_factory.mktemp("phi3") / "engine"
    subprocess.run([sys.executable, "-m", "gpu_backend", "build", "--engineDir", str(good), "--tokenizer", str(PHI3),
                    "--maxInputLen", "256", "--maxKVCacheCapacity", "512", "--maxKVPoolPages", "0",
                    "--tokensPerPage", "16"], check=True, capture_output=True, cwd=ROOT)
    return good


@pytest.fixture
def hf_engine(phi3_engine):
    def make(tmp_path: Path, tokenizer: Path) -> Path:
        """The bundled Phi-3 engine with `tokenizer` in its folder (named by a relative path)."""
        return _with_tokenizer(phi3_engine, tmp_path, tokenizer)
    return make


def _with_tokenizer(good: Path, tmp_path: Path, tokenizer: Path) -> Path:
    engine = tmp_path / "engine"
    shutil.copytree(good, engine)
    shutil.rmtree(engine / "tokenizer")
    shutil.copytree(tokenizer, engine / "tokenizer")
    return engine


def request_file(tmp_path: Path, text: str = "hello") -> Path:
    path = tmp_path / "in.json"
    path.write_text(json.dumps({"max_generate_length": 2, "top_k": 1,
                                "requests": [{"messages": [{"role": "user", "content": text}]}]}))
    return path


def one_line(err: str, *words) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("template, words", [
    ("{{ raise_exception('roles must alternate') }}", ("roles must alternate",)),
    ("{% for %}", ("does not compile",)),
    ({"not": "a template"}, ("must be a string",)),
])
def test_simulate_and_infer_refuse_a_bad_template_in_one_line(hf_engine, tmp_path, capsys, template, words):
    engine = hf_engine(tmp_path, tokenizer_with(tmp_path / "tok", template))
    request = request_file(tmp_path)
    code = kvconform(["simulate", "--engineConfig", str(engine / "config.json"), "--inputFile", str(request),
                      "--profileOutputFile", str(tmp_path / "p.json")])
    _, err = capsys.readouterr()
    assert code == 2
    one_line(err, str(request), *words)
    p = subprocess.run([sys.executable, "-m", "gpu_backend", "infer", "--engineDir", str(engine), "--inputFile",
                        str(request), "--outputFile", str(tmp_path / "o.json")], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert p.returncode == 2
    one_line(p.stderr, *words)


def test_simulate_loops_no_longer_than_the_deadline(hf_engine, tmp_path, capsys, short_deadline):
    engine = hf_engine(tmp_path, tokenizer_with(tmp_path / "tok", HOSTILE["loops 10^10 times"]))
    start = time.monotonic()
    code = kvconform(["simulate", "--engineConfig", str(engine / "config.json"), "--inputFile",
                      str(request_file(tmp_path)), "--profileOutputFile", str(tmp_path / "p.json")])
    assert code == 2 and time.monotonic() - start < 10
    one_line(capsys.readouterr().err, "did not finish within 1.5 s")


def test_build_refuses_a_template_that_does_not_compile_or_is_not_a_string(tmp_path):
    for k, template in enumerate(("{% if %}", 7)):
        tok = tokenizer_with(tmp_path / f"tok{k}", template)
        p = subprocess.run([sys.executable, "-m", "gpu_backend", "build", "--engineDir", str(tmp_path / f"e{k}"),
                            "--tokenizer", str(tok), "--maxInputLen", "64", "--maxKVCacheCapacity", "128",
                            "--maxKVPoolPages", "0"], capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert p.returncode == 2 and not (tmp_path / f"e{k}").exists()
        one_line(p.stderr, "--tokenizer", "chat template")


def test_simulate_finds_a_relative_tokenizer_from_any_folder(hf_engine, tmp_path, capsys, monkeypatch):
    engine = hf_engine(tmp_path, PHI3)
    assert json.loads((engine / "config.json").read_text())["tokenizer"]["files"] == "tokenizer"
    monkeypatch.chdir(tmp_path)
    code = kvconform(["simulate", "--engineConfig", str(engine / "config.json"), "--inputFile",
                      str(request_file(tmp_path)), "--profileOutputFile", str(tmp_path / "p.json")])
    assert code == 0, capsys.readouterr().err


def test_a_broken_tokenizer_json_is_one_line(hf_engine, tmp_path, capsys):
    tok = tokenizer_with(tmp_path / "tok", "{{ messages[0]['content'] }}")
    engine = hf_engine(tmp_path, tok)
    (engine / "tokenizer" / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "BPE"}}')
    code = kvconform(["simulate", "--engineConfig", str(engine / "config.json"), "--inputFile",
                      str(request_file(tmp_path)), "--profileOutputFile", str(tmp_path / "p.json")])
    assert code == 2
    one_line(capsys.readouterr().err, "tokenizer.json", "not a tokenizer")


def test_a_prompt_above_the_text_bound_is_refused_before_tokenizing(hf_engine, tmp_path, capsys):
    engine = hf_engine(tmp_path, PHI3)
    request = request_file(tmp_path, "hello world " * 200_000)          # 2.4 MB
    start = time.monotonic()
    code = kvconform(["simulate", "--engineConfig", str(engine / "config.json"), "--inputFile", str(request),
                      "--profileOutputFile", str(tmp_path / "p.json")])
    assert code == 2 and time.monotonic() - start < 5
    one_line(capsys.readouterr().err, "2400000 bytes", "1048576")
    p = subprocess.run([sys.executable, "-m", "gpu_backend", "infer", "--engineDir", str(engine), "--inputFile",
                        str(request), "--outputFile", str(tmp_path / "o.json")], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert p.returncode == 2
    one_line(p.stderr, "2400000 bytes", "1048576")


def test_the_openai_runner_refuses_a_looping_template_before_any_request(tmp_path, capsys, short_deadline):
    from tests.robustness.test_fake_servers import fake_server
    tok = tokenizer_with(tmp_path / "tok", HOSTILE["loops 10^10 times"])
    with fake_server("ok") as url:
        start = time.monotonic()
        code = kvconform(["run", "--backend", "openai", "--base-url", url, "--profile", "llama.cpp-server",
                          "--tokenizer", str(tok), "--report", str(tmp_path / "r")])
    assert code == 2 and time.monotonic() - start < 10
    one_line(capsys.readouterr().err, "--tokenizer", "did not finish")
    assert not (tmp_path / "r").exists()
