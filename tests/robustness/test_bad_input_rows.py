"""Bad input that used to run, overwrite or hang: each is refused up front with one line on
stderr naming the file (or flag) and the JSON path, exit 2, nothing written, nothing run.

- output paths inside the engine folder, equal to an input, equal to each other, or a folder
  (spec/engine.md section 3);
- `build` into a folder that holds something else (spec/engine.md section 1, `--force`);
- sizes above 2^31 - 1 and engines above 2^31 - 1 parameters (spec/RUNNING.md section 8,
  spec/engine.md section 1), one limit for build, validate, simulate and infer;
- a missing LoRA weight file (CR-BATCH-4), refused alike by the oracle and the backend;
- `--warmup` above its maximum (spec/engine.md section 3);
- duplicate JSON keys (refused) and unknown request keys (one warning each);
- and a batch that fails at run time says so on stderr, one line per batch.

Commands run in-process (tests/robustness/harness.py). "Nothing ran" is checked by making
the runtime's constructor fail: a refusal must come before it.
"""
from __future__ import annotations

import hashlib
import json
import os

import pytest

from tests.robustness import fixtures
from tests.robustness import harness
import gpu_backend.refusals
import gpu_backend.runtime
import reference
from gpu_backend import build_engine

TINY = {"maxInputLen": 16, "maxKVCacheCapacity": 24, "maxKVPoolPages": 0, "tokensPerPage": 4,
        "loraAdapters": ["a"]}
TINY_FLAGS = ["--maxInputLen", "16", "--maxKVCacheCapacity", "24", "--maxKVPoolPages", "0", "--tokensPerPage", "4"]
REQUEST = {"apply_chat_template": False, "temperature": 0, "max_generate_length": 2,
           "requests": [{"messages": [{"role": "user", "content": "abcd"}]}]}
LIMIT = 2 ** 31 - 1             # spec/RUNNING.md section 8, written out here, not imported


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("rows")
    build_engine(root / "engine", TINY)
    return root / "engine"


@pytest.fixture
def no_run(monkeypatch):
    """Any attempt to start the runtime is a test failure (the refusal must come first)."""
    def refuse(*args, **kwargs):
        raise AssertionError("the runtime was started")
    monkeypatch.setattr(gpu_backend.runtime.Runtime, "__init__", refuse)


def write(path, doc) -> str:
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return str(path)


def stamp(path) -> tuple:
    """Content hash and modification time: equal stamps mean the file was not rewritten."""
    st = os.stat(path)
    return hashlib.sha256(open(path, "rb").read()).hexdigest(), st.st_mtime_ns


def one_error(o: harness.Outcome, prefix: str) -> str:
    assert not o.crash, o.crash
    assert o.rc == 2, (o.rc, o.err)
    lines = o.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prefix}: error: "), o.err
    return lines[0]


def infer(engine, request, out, *extra) -> harness.Outcome:
    return harness.backend(["infer", "--engineDir", str(engine), "--inputFile", str(request),
                            "--outputFile", str(out), "--device", "cpu", *map(str, extra)])


# --- outputs -----------------------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["--outputFile", "--profileOutputFile", "--outputHiddenStates"])
@pytest.mark.parametrize("target", ["weights", "config", "lora in engine", "new file in engine", "request",
                                    "lora elsewhere", "media"])
def test_infer_never_writes_into_the_engine_or_over_an_input(tiny, tmp_path, no_run, flag, target):
    media = tmp_path / "img.png"
    media.write_bytes(b"not decoded: the refusal comes first")
    lora = tmp_path / "b.safetensors"
    lora.write_bytes(b"adapter weights")
    request = write(tmp_path / "in.json", dict(REQUEST, available_lora_weights={"b": "b.safetensors"},
                                               requests=[{"messages": [{"role": "user", "content": [
                                                   {"type": "image", "image": "img.png"}]}]}]))
    path = {"weights": tiny / "model.safetensors", "config": tiny / "config.json",
            "lora in engine": tiny / "lora" / "a.safetensors", "new file in engine": tiny / "new.json",
            "request": tmp_path / "in.json", "lora elsewhere": lora, "media": media}[target]
    before = {p: stamp(p) for p in (tiny / "model.safetensors", tiny / "config.json", tiny / "lora" / "a.safetensors",
                                    tmp_path / "in.json", lora, media)}
    args = {"--outputFile": tmp_path / "out.json", flag: path}
    o = harness.backend(["infer", "--engineDir", str(tiny), "--inputFile", request, "--device", "cpu",
                         *[str(x) for kv in args.items() for x in kv]])
    line = one_error(o, "gpu_backend")
    assert line.startswith(f"gpu_backend: error: {flag}: ") and str(path) in line, line
    assert {p: stamp(p) for p in before} == before
    assert not (tiny / "new.json").exists() and not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("flag", ["--outputFile", "--profileOutputFile", "--outputHiddenStates"])
def test_infer_refuses_a_directory_as_output_before_running(tiny, tmp_path, no_run, flag):
    request = write(tmp_path / "in.json", REQUEST)
    (tmp_path / "folder").mkdir()
    args = {"--outputFile": tmp_path / "out.json", flag: tmp_path / "folder"}
    o = harness.backend(["infer", "--engineDir", str(tiny), "--inputFile", request,
                         *[str(x) for kv in args.items() for x in kv]])
    line = one_error(o, "gpu_backend")
    assert line.startswith(f"gpu_backend: error: {flag}: ") and "is a directory" in line, line
    assert sorted(os.listdir(tmp_path)) == ["folder", "in.json"] and not os.listdir(tmp_path / "folder")


def test_simulate_refuses_predictions_over_the_profile(tiny, tmp_path):
    request = write(tmp_path / "in.json", REQUEST)
    same = tmp_path / "same.json"
    same.write_text('{"kept": true}\n')
    before = stamp(same)
    o = harness.kvconform(["simulate", "--engineDir", str(tiny), "--inputFile", request,
                           "--profileOutputFile", str(same), "--outputFile", str(same)])
    line = one_error(o, "kvconform")
    assert "--outputFile" in line and "--profileOutputFile" in line and str(same) in line, line
    assert stamp(same) == before


# --- build into an occupied folder ------------------------------------------------------------

def test_build_never_silently_replaces_another_engine(tmp_path):
    folder = tmp_path / "engine"
    assert harness.backend(["build", "--engineDir", str(folder), *TINY_FLAGS]).rc == 0
    files = ("config.json", "model.safetensors")
    first = {f: stamp(folder / f) for f in files}
    other = ["--maxInputLen", "8"] + TINY_FLAGS[2:]
    line = one_error(harness.backend(["build", "--engineDir", str(folder), *other]), "gpu_backend")
    assert line.startswith("gpu_backend: error: --engineDir: ") and "--force" in line, line
    assert {f: stamp(folder / f) for f in files} == first
    again = harness.backend(["build", "--engineDir", str(folder), *TINY_FLAGS])     # the same args: idempotent
    assert again.rc == 0 and again.err.startswith("gpu_backend: built ") and again.err.count("\n") == 1, again.err
    assert {f: stamp(folder / f)[0] for f in files} == {f: h for f, (h, _) in first.items()}
    assert harness.backend(["build", "--engineDir", str(folder), *other, "--force"]).rc == 0
    assert json.loads((folder / "config.json").read_text())["max_input_len"] == 8


def test_build_refuses_a_folder_that_holds_no_engine(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    line = one_error(harness.backend(["build", "--engineDir", str(folder), *TINY_FLAGS]), "gpu_backend")
    assert line.startswith("gpu_backend: error: --engineDir: ") and "--force" in line, line
    assert os.listdir(folder) == ["notes.txt"] and (folder / "notes.txt").read_text() == "keep me"


# --- size limits ------------------------------------------------------------------------------

def test_one_size_limit_for_build_validate_simulate_and_infer(tiny, tmp_path):
    too_big = LIMIT + 1
    line = one_error(harness.backend(["build", "--engineDir", str(tmp_path / "b"), "--maxInputLen", "16",
                                      "--maxKVCacheCapacity", str(too_big), "--maxKVPoolPages", "0",
                                      "--tokensPerPage", "2048"]), "gpu_backend")
    assert "--maxKVCacheCapacity" in line and not (tmp_path / "b").exists()
    with pytest.raises(reference.InputError) as e:          # a case's engine block: the same refusal
        reference.engine_from_build_args({**TINY, "maxKVCacheCapacity": too_big, "tokensPerPage": 2048})
    assert e.value.path.endswith(".maxKVCacheCapacity")
    # at the limit the build is accepted (the pool is sized at run time, not at build time)
    assert harness.backend(["build", "--engineDir", str(tmp_path / "at"), "--maxInputLen", "16",
                            "--maxKVCacheCapacity", str(LIMIT), "--maxKVPoolPages", "0",
                            "--tokensPerPage", str(2 ** 24)]).rc == 0

    config = json.loads((tiny / "config.json").read_text())
    big = tmp_path / "big"
    big.mkdir()
    for f in ("model.safetensors", "lora"):
        os.symlink(tiny / f, big / f)
    write(big / "config.json", dict(config, max_kv_cache_capacity=too_big))
    request = write(tmp_path / "in.json", REQUEST)
    where = f"{big / 'config.json'}: $.max_kv_cache_capacity: "
    assert where in one_error(harness.kvconform(["validate", str(big / "config.json")]), "kvconform")
    assert where in one_error(harness.kvconform(["simulate", "--engineDir", str(big), "--inputFile", request,
                                                 "--profileOutputFile", str(tmp_path / "p.json")]), "kvconform")
    assert where in one_error(infer(big, request, tmp_path / "o.json"), "gpu_backend")
    assert sorted(os.listdir(tmp_path)) == ["at", "big", "in.json"]
    write(big / "config.json", dict(config, max_kv_cache_capacity=LIMIT))
    assert harness.kvconform(["validate", str(big / "config.json")]).rc == 0


def test_a_huge_engine_is_refused_before_anything_is_allocated(tmp_path):
    folder = tmp_path / "huge"
    o = harness.backend(["build", "--engineDir", str(folder), *TINY_FLAGS, "--hiddenSize", str(LIMIT)])
    line = one_error(o, "gpu_backend")
    assert line.startswith("gpu_backend: error: --hiddenSize: ") and "parameters" in line, line
    assert not folder.exists()
    with pytest.raises(reference.InputError, match="parameters"):
        reference.engine_from_build_args({**TINY, "hiddenSize": LIMIT})


@pytest.mark.parametrize("args", [
    {},
    {"untiedEmbeddings": True, "vision": True, "audio": True, "loraAdapters": ["a", "b"], "loraRank": 3},
    {"model": "hybrid", "numLayers": 3, "stateSize": 5, "convKernel": 3, "loraAdapters": ["a"]},
    {"model": "recurrent", "numLayers": 1, "numHeads": 3, "numKVHeads": 1, "headDim": 5, "intermediateSize": 7,
     "hiddenSize": 9, "audio": True},
])
def test_the_parameter_count_is_what_a_build_writes(tmp_path, args):
    """The documented count (spec/engine.md section 1) equals the tensors a build writes; the
    oracle's transcription and the backend's own agree with it."""
    from safetensors.numpy import load_file
    from gpu_backend.engine_build import parameter_count
    build = {**TINY, **args, "maxKVPoolPages": 0}
    cfg = build_engine(tmp_path / "e", build)
    files = [tmp_path / "e" / "model.safetensors"] + [tmp_path / "e" / "lora" / f"{n}.safetensors"
                                                      for n in cfg["lora_adapters"]]
    written = sum(t.size for f in files for t in load_file(f).values())
    assert parameter_count(cfg) == written
    assert reference.engine.parameter_count(reference.engine_from_build_args(build).to_config()) == written


# --- LoRA weight files ------------------------------------------------------------------------

@pytest.mark.parametrize("ref", ["missing/a.safetensors", "."])
def test_a_missing_lora_weight_file_is_refused_alike(tiny, tmp_path, ref):
    """CR-BATCH-4: validate (with and without an engine), simulate and infer refuse it at the
    same JSON path; the oracle decides from metadata, as the backend does before loading."""
    request = write(tmp_path / "in.json", dict(REQUEST, available_lora_weights={"a": ref},
                                               requests=[dict(REQUEST["requests"][0], lora_name="a")]))
    where = f"{request}: $.available_lora_weights.a: "
    for argv in (["validate", request, "--engine-dir", str(tiny)], ["validate", request],
                 ["simulate", "--engineDir", str(tiny), "--inputFile", request,
                  "--profileOutputFile", str(tmp_path / "p.json")]):
        assert where in one_error(harness.kvconform(argv), "kvconform")
    assert where in one_error(infer(tiny, request, tmp_path / "o.json"), "gpu_backend")
    assert sorted(os.listdir(tmp_path)) == ["in.json"]


# --- warmup -----------------------------------------------------------------------------------

def test_warmup_is_bounded_alike(tiny, tmp_path, no_run):
    request = write(tmp_path / "in.json", REQUEST)
    line = one_error(harness.kvconform(["simulate", "--engineDir", str(tiny), "--inputFile", request,
                                        "--profileOutputFile", str(tmp_path / "p.json"), "--warmup", "1000000000"]),
                     "kvconform")
    assert "--warmup" in line and "1000" in line
    line = one_error(infer(tiny, request, tmp_path / "o.json", "--warmup", 1000000000), "gpu_backend")
    assert line.startswith("gpu_backend: error: --warmup: ")
    assert sorted(os.listdir(tmp_path)) == ["in.json"]
    # the bound is the same number on both sides: the largest value each accepts
    assert harness.kvconform(["simulate", "--engineDir", str(tiny), "--inputFile", request,
                              "--profileOutputFile", str(tmp_path / "p.json"), "--warmup", "1000"]).rc == 0
    assert one_error(harness.kvconform(["simulate", "--engineDir", str(tiny), "--inputFile", request,
                                        "--profileOutputFile", str(tmp_path / "p.json"), "--warmup", "1001"]),
                     "kvconform")
    assert gpu_backend.refusals.MAX_WARMUP == 1000
    with pytest.raises(reference.InputError):
        reference.RuntimeFlags.from_case_runtime({"warmup": 1001})


# --- duplicate and unknown keys ---------------------------------------------------------------

DUPLICATES = [
    ('{"temperature": 0, "temperature": 1, "requests": [{"messages": [{"role": "user", "content": "ab"}]}]}',
     "$", "temperature"),
    ('{"requests": [{"lora_name": "a", "messages": [{"role": "user", "content": "ab"}], "lora_name": "a"}]}',
     "$.requests[0]", "lora_name"),
    ('{"requests": [{"messages": [{"role": "user", "content": "ab", "role": "system"}]}]}',
     "$.requests[0].messages[0]", "role"),
    ('{"requests": [{"messages": [{"role": "user", "content": [{"type": "text", "text": "a", "text": "b"}]}]}]}',
     "$.requests[0].messages[0].content[0]", "text"),
]


@pytest.mark.parametrize("text, where, key", DUPLICATES)
def test_duplicate_keys_are_refused_by_kit_and_backend(tiny, tmp_path, text, where, key):
    request = write(tmp_path / "in.json", text)
    expected = f"{request}: {where}: duplicate key '{key}'"
    assert expected in one_error(harness.kvconform(["validate", request]), "kvconform")
    assert expected in one_error(harness.kvconform(["simulate", "--engineDir", str(tiny), "--inputFile", request,
                                                    "--profileOutputFile", str(tmp_path / "p.json")]), "kvconform")
    assert expected in one_error(infer(tiny, request, tmp_path / "o.json"), "gpu_backend")
    assert sorted(os.listdir(tmp_path)) == ["in.json"]


def test_a_duplicate_key_in_an_engine_config_is_refused(tiny, tmp_path):
    engine = tmp_path / "engine"
    engine.mkdir()
    for f in ("model.safetensors", "lora"):
        os.symlink(tiny / f, engine / f)
    text = (tiny / "config.json").read_text()
    write(engine / "config.json", text.replace('"max_input_len": 16,', '"max_input_len": 16, "max_input_len": 8,'))
    request = write(tmp_path / "in.json", REQUEST)
    expected = f"{engine / 'config.json'}: $: duplicate key 'max_input_len'"
    assert expected in one_error(harness.kvconform(["validate", str(engine / "config.json")]), "kvconform")
    assert expected in one_error(infer(engine, request, tmp_path / "o.json"), "gpu_backend")


def test_unknown_keys_are_ignored_with_one_warning_each(tiny, tmp_path):
    doc = dict(REQUEST, max_generate_lenght=9, _policy_switch={"never": "warned about"},
               requests=[{"messages": [{"role": "user", "content": [{"type": "text", "text": "abcd", "txt": 1}],
                                        "_note": "never warned about"}],
                          "stpo": "x", "_scenario": "never warned about"}])
    request = write(tmp_path / "in.json", doc)
    expected = [f"{request}: $.max_generate_lenght: unknown key ignored (did you mean max_generate_length?)",
                f"{request}: $.requests[0].stpo: unknown key ignored (did you mean stop?)",
                f"{request}: $.requests[0].messages[0].content[0].txt: unknown key ignored (did you mean text?)"]
    runs = {"kvconform": [harness.kvconform(["validate", request, "--engine-dir", str(tiny)]),
                          harness.kvconform(["simulate", "--engineDir", str(tiny), "--inputFile", request,
                                             "--profileOutputFile", str(tmp_path / "p.json")])],
            "gpu_backend": [infer(tiny, request, tmp_path / "o.json")]}
    for prefix, outcomes in runs.items():
        for o in outcomes:
            assert o.rc == 0 and not o.crash, (o.rc, o.err)
            assert o.err.splitlines() == [f"{prefix}: warning: {line}" for line in expected], o.err


def test_a_misplaced_key_names_where_it_belongs(tiny, tmp_path):
    doc = dict(REQUEST, requests=[dict(REQUEST["requests"][0], max_generate_lenght=3)])
    request = write(tmp_path / "in.json", doc)
    o = harness.kvconform(["validate", request])
    assert o.rc == 0 and o.err.splitlines() == [
        f"kvconform: warning: {request}: $.requests[0].max_generate_lenght: unknown key ignored "
        "(did you mean max_generate_length? a key of the top level)"], o.err


def test_the_backend_keeps_its_own_list_of_known_keys():
    """gpu_backend may not read the kit's schema (independence), so its list is checked here."""
    from gpu_backend import request as backend
    schema = json.loads((fixtures.ROOT / "spec" / "schemas" / "request.schema.json").read_text())
    defs = schema["$defs"]
    assert set(backend.TOP_KEYS) == {k for k in schema["properties"] if not k.startswith("_")}   # kit metadata
    assert set(backend.REQUEST_KEYS) == set(defs["request"]["properties"])
    assert set(backend.MESSAGE_KEYS) == set(defs["message"]["properties"])
    assert {t: set(k) for t, k in backend.ITEM_KEYS.items()} == {
        b["properties"]["type"]["const"]: set(b["properties"]) for b in defs["item"]["oneOf"]}


# --- failed batches ---------------------------------------------------------------------------

def test_each_failed_batch_is_named_on_stderr(tiny, tmp_path):
    doc = dict(REQUEST, requests=[{"messages": [{"role": "user", "content": "abcd"}]},
                                  {"messages": [{"role": "user", "content": "x" * 17}]},
                                  {"messages": [{"role": "user", "content": "efgh"}]}])
    request = write(tmp_path / "in.json", doc)
    o = infer(tiny, request, tmp_path / "o.json")
    assert o.rc == 1 and not o.crash, o.err
    lines = o.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_backend: batch 1 failed: ") and "17" in lines[0], o.err
    out = json.loads((tmp_path / "o.json").read_text())
    assert [r["finish_reason"] == "error" for r in out["responses"]] == [False, True, False]
