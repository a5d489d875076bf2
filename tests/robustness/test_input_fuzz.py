"""Input fuzzing: request files, engine configs and case files drawn
from spec/schemas, valid and one mutation away from valid, fed to `kvconform validate`,
`kvconform simulate` and `python -m gpu_backend infer`.

Every outcome is a success or a one-line error naming the file and the JSON path with exit
code 2 (gpu_backend: 1 or 3 where a batch fails or the deployment is refused); never a
traceback, never exit 70 (the backend's internal error), never a hang (a Hypothesis deadline).
For request files the oracle and the backend must also agree on whether the file is valid,
except where the spec leaves it to the runtime (see notes/robustness-questions.md).

The commands run in-process (a subprocess costs ~100x more); a few true subprocess runs at the
end check the same at the process level. Budget: tests/robustness/conftest.py.
"""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.robustness import fixtures
from tests.robustness import harness
from tests.robustness import schemagen
from conformance.cases.schemas import read_json
from conformance import KvconformError

ROOT = fixtures.ROOT
_n = itertools.count()


def fuzz(budget, default: int):
    examples, derandomize = budget
    return settings(max_examples=examples or default, derandomize=derandomize, database=None, deadline=10_000,
                    suppress_health_check=list(HealthCheck), print_blob=True)


def strict_json(path) -> bool:
    """Whether the file is JSON at all (then every error must name a JSON path)."""
    try:
        read_json(path)
        return True
    except KvconformError:
        return False


def lora_left_to_the_runtime(doc, base_dir) -> bool:
    """Request files whose validity depends on the contents of adapter weight files: a listed
    file that exists but is not an adapter of this engine. Only a runtime that loads weights
    can tell; the oracle never reads weights (spec/engine.md section 2). Whether a lora_name is
    listed in available_lora_weights, and whether its path names a regular file (CR-BATCH-4),
    are decided by both and compared."""
    if not isinstance(doc, dict):
        return False
    available = doc.get("available_lora_weights")
    available = available if isinstance(available, dict) else {}
    return any(isinstance(v, str) and v not in ("lora/a.safetensors", "lora/b.safetensors")
               and os.path.isfile(os.path.join(base_dir, v)) for v in available.values())


def test_request_files(world, fuzz_budget):
    gen = schemagen.SchemaGen(fixtures.request_hints(world["paths"]))
    engine, config, req = str(world["engine"]), str(world["config"]), world["req"]
    seen = {"valid+ran": 0, "refused by both": 0}

    @fuzz(fuzz_budget, 120)
    @given(st.data())
    def check(data):
        doc = gen.valid(data, "request")
        doc.pop("_conformance", None)
        if data.draw(st.booleans(), label="near miss"):
            doc, _ = schemagen.mutate(data, doc)
        raw, damage = schemagen.file_bytes(data, doc)
        k = next(_n)
        f, out, prof = req / f"r{k}.json", req / f"r{k}.out.json", req / f"r{k}.prof.json"
        f.write_bytes(raw)
        parseable = strict_json(f)
        valid = harness.check_validate(harness.kvconform(["validate", str(f), "--engine-config", config]),
                                       str(f), parseable)
        harness.check_simulate(harness.kvconform(["simulate", "--engineConfig", config, "--inputFile", str(f),
                                                  "--profileOutputFile", str(prof), "--enableContextReuse"]),
                               [str(f), config], parseable)
        rc = harness.check_infer(harness.backend(["infer", "--engineDir", engine, "--inputFile", str(f),
                                                  "--outputFile", str(out), "--device", "cpu", "--checkInvariants",
                                                  "--enableContextReuse"]),
                                 str(f), str(out), config, parseable)
        ran = rc in (0, 1)
        if damage == "none" and not lora_left_to_the_runtime(doc, req):
            assert valid == ran, f"the oracle {'accepts' if valid else 'refuses'} the file, the backend exits {rc}"
        seen["valid+ran" if valid and ran else "refused by both" if not (valid or ran) else "other"] = 1
    check()
    assert seen["valid+ran"] and seen["refused by both"], "the generator must reach both outcomes"


def test_engine_configs(world, fuzz_budget):
    """config.json: schema-generated (sizes that do not fit the weights) and mutations of the real
    one (wrong types, missing keys, huge numbers, deep nesting) under validate, simulate, infer."""
    import os
    base = json.loads(world["config"].read_text())
    sizes = st.integers(0, 70) | st.integers(-3, 2 ** 40)
    gen = schemagen.SchemaGen({r"\$\.(max_input_len|max_kv_cache_capacity|tokens_per_page|kv_pool_pages|"
                               r"max_batch_size|num_kv_heads|head_dim)": sizes})
    request = world["req"] / "engine-fuzz-request.json"
    request.write_text(json.dumps({
        "apply_chat_template": False, "temperature": 0, "max_generate_length": 3, "batch_size": 2,
        "available_lora_weights": {"a": "lora/a.safetensors"},
        "requests": [{"messages": [{"role": "user", "content": [{"type": "text", "text": "abcdefgh"},
                                                               {"type": "image", "image": "../media/img_a_16x16.png"}]}],
                      "lora_name": "a"},
                     {"messages": [{"role": "user", "content": [{"type": "audio", "audio": "../media/audio_c_16k.wav"}]}],
                      "lora_name": "a"}]}))
    outcomes = set()

    @fuzz(fuzz_budget, 80)
    @given(st.data())
    def check(data):
        if data.draw(st.booleans(), label="from the schema"):
            doc = gen.valid(data, "engine")
        else:
            doc, _ = schemagen.mutate(data, base)
        raw, _ = schemagen.file_bytes(data, doc)
        d = world["root"] / f"engine{next(_n)}"
        d.mkdir()
        os.symlink(world["engine"] / "model.safetensors", d / "model.safetensors")
        os.symlink(world["engine"] / "lora", d / "lora")
        cfg = d / "config.json"
        cfg.write_bytes(raw)
        parseable = strict_json(cfg)
        harness.check_validate(harness.kvconform(["validate", str(cfg)]), str(cfg), parseable)
        harness.check_simulate(harness.kvconform(["simulate", "--engineConfig", str(cfg), "--inputFile", str(request),
                                                  "--profileOutputFile", str(d / "prof.json"), "--enableContextReuse"]),
                               [str(request), str(cfg)], parseable)
        outcomes.add(harness.check_infer(harness.backend(["infer", "--engineDir", str(d), "--inputFile", str(request),
                                                          "--outputFile", str(d / "out.json"), "--device", "cpu"]),
                                         str(request), str(d / "out.json"), str(cfg), parseable))
    check()
    assert 2 in outcomes


KINDS = ("case", "output", "profile", "predictions", "report", "capabilities", "engine", "request")


def test_every_kind_of_file(world, fuzz_budget):
    """`kvconform validate` on every kind of file the kit reads, told from content or by --kind
    (also the wrong --kind), including case files whose engine block has absurd sizes."""
    hints = fixtures.request_hints(world["paths"])
    hints[r"\$\._conformance\.engine\.(maxInputLen|maxKVCacheCapacity|maxKVPoolPages|tokensPerPage|maxBatchSize|"
          r"numLayers|hiddenSize|numHeads|numKVHeads|headDim|intermediateSize|stateSize|convKernel|loraRank)"] = \
        st.integers(0, 64) | st.sampled_from([2 ** 40, 10 ** 30])
    hints[r"\$\._conformance\.rules\[\d+\]"] = st.sampled_from(["CR-ID-1", "CR-PLAN-2", "CR-XX-9"])
    gen = schemagen.SchemaGen(hints)
    conformance = gen.schemas["request"]["$defs"]["conformance"]

    @fuzz(fuzz_budget, 200)
    @given(st.data())
    def check(data):
        kind = data.draw(st.sampled_from(KINDS))
        doc = gen.valid(data, "request" if kind == "case" else kind)
        if kind == "case":
            doc["_conformance"] = gen._gen(data, conformance, "request", ("_conformance",), 1)
        if data.draw(st.booleans(), label="near miss"):
            doc, _ = schemagen.mutate(data, doc)
        raw, _ = schemagen.file_bytes(data, doc)
        f = world["req"] / f"k{next(_n)}.json"
        f.write_bytes(raw)
        told = data.draw(st.sampled_from([None, kind, "case", "engine"]), label="--kind")
        argv = ["validate", str(f)] + (["--kind", told] if told else [])
        harness.check_validate(harness.kvconform(argv), str(f), strict_json(f))
    check()


# --- regressions: each bug the fuzzing found, as a fixed example --------------------------------

def _doc(content, **top):
    return {"apply_chat_template": False, "temperature": 0, "max_generate_length": 2,
            "requests": [{"messages": [{"role": "user", "content": content}]}], **top}


REGRESSIONS = {
    # id: (file bytes, the JSON path both must name (None: not JSON), what was wrong before)
    "lone-surrogate-text": (json.dumps(_doc("ab\ud800cd")).encode(), "$.requests[0].messages[0].content",
                            "UnicodeEncodeError: traceback in validate/simulate, exit 70 in infer"),
    "lone-surrogate-item": (json.dumps(_doc([{"type": "text", "text": "\udfff"}])).encode(),
                            "$.requests[0].messages[0].content[0].text", "the same, in a text item"),
    "nul-in-media-path": (json.dumps(_doc([{"type": "image", "image": "a\u0000b.png"}])).encode(),
                          "$.requests[0].messages[0].content[0].image", "ValueError: exit 70 in infer"),
    "surrogate-in-media-path": (json.dumps(_doc([{"type": "audio", "audio": "\ud800.wav"}])).encode(),
                                "$.requests[0].messages[0].content[0].audio", "UnicodeEncodeError: exit 70 in infer"),
    "fifo-media": (json.dumps(_doc([{"type": "image", "image": "../media/fifo.png"}])).encode(),
                   "$.requests[0].messages[0].content[0].image", "infer hung forever opening a FIFO"),
    "dev-zero-media": (json.dumps(_doc([{"type": "audio", "audio": "/dev/zero"}])).encode(),
                       "$.requests[0].messages[0].content[0].audio", "infer read /dev/zero until memory ran out"),
    "deep-nesting": (b'{"requests": ' + b"[" * 100000 + b"]" * 100000 + b"}", None,
                     "RecursionError: exit 70 in infer"),
    "nan-temperature": (b'{"temperature": NaN, "requests": [{"messages": [{"role": "user", "content": "ab"}]}]}', None,
                        "NaN passed every range check; sampling then crashed (exit 70)"),
    "overflowing-float": (b'{"temperature": 1e400, "requests": [{"messages": [{"role": "user", "content": "ab"}]}]}',
                          None, "parsed as infinity: NaN probabilities, exit 70"),
    "5000-digit-integer": (b'{"batch_size": 1' + b"0" * 5000 + b', "requests": []}', None,
                           "ValueError from int(): traceback in validate"),
    "logit-bias-beyond-vocab": (json.dumps(_doc("ab", logit_bias={"400": 1.0})).encode(), "$.logit_bias",
                                "the oracle accepted a bias on a token the vocabulary does not have"),
}


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_regression_refused_by_all_three(world, name):
    raw, path, _ = REGRESSIONS[name]
    f, out = world["req"] / f"reg-{name}.json", world["req"] / f"reg-{name}.out.json"
    f.write_bytes(raw)
    config = str(world["config"])
    o = harness.kvconform(["validate", str(f), "--engine-config", config])
    assert harness.check_validate(o, str(f), path is not None) is False
    if path:
        assert f": {path}: " in o.err, o.err
    o = harness.kvconform(["simulate", "--engineConfig", config, "--inputFile", str(f),
                           "--profileOutputFile", str(world["req"] / f"reg-{name}.prof.json")])
    assert harness.check_simulate(o, [str(f), config], path is not None) == 2
    if path:
        assert f": {path}: " in o.err, o.err
    o = harness.backend(["infer", "--engineDir", str(world["engine"]), "--inputFile", str(f),
                         "--outputFile", str(out), "--device", "cpu"])
    assert harness.check_infer(o, str(f), str(out), config, path is not None) == 2
    if path:
        assert f": {path}: " in o.err, o.err


@pytest.mark.parametrize("temperature, top_p", [(5e-324, 0.8), (1e-300, 1.0), (1.0, 1e-300), (1e-40, 1e-300)])
def test_regression_extreme_sampling_values_run(world, temperature, top_p):
    """A temperature or top_p that float32 rounds to 0 made sampling divide by zero or keep no
    token (exit 70); they are valid numbers, so the file runs (the limit is greedy decoding)."""
    doc = _doc("abcdefgh", temperature=temperature, top_p=top_p, top_k=0, max_generate_length=4)
    f, out = world["req"] / f"t{next(_n)}.json", world["req"] / f"t{next(_n)}.out.json"
    f.write_text(json.dumps(doc))
    o = harness.backend(["infer", "--engineDir", str(world["engine"]), "--inputFile", str(f), "--outputFile", str(out),
                         "--device", "cpu"])
    assert harness.check_infer(o, str(f), str(out)) == 0


@pytest.mark.parametrize("key, value, path", [
    ("rope_theta", None, "$.rope_theta"), ("rope_theta", "x", "$.rope_theta"), ("weights", 1.5, "$.weights"),
    ("recurrent", 7, "$.recurrent"), ("lora_adapters", ["a"], "$.lora_adapters"),
    ("lora_adapters", {"a": {"rank": 4, "path": 3}}, "$.lora_adapters['a'].path"),
    ("deployment", {"action_runner": "yes"}, "$.deployment.action_runner"), ("vision", 5, "$.vision"),
    ("snapshot_slot_bytes", {"recurrent": 0}, "$.snapshot_slot_bytes.recurrent"),
])
def test_regression_engine_config_types(world, tmp_path, key, value, path):
    """A config.json key of the wrong type crashed the runtime deep in the model (exit 70)."""
    import os
    cfg = json.loads(world["config"].read_text())
    cfg[key] = value
    d = tmp_path / "engine"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    os.symlink(world["engine"] / "model.safetensors", d / "model.safetensors")
    os.symlink(world["engine"] / "lora", d / "lora")
    req = tmp_path / "r.json"
    req.write_text(json.dumps(_doc("abcd")))
    o = harness.backend(["infer", "--engineDir", str(d), "--inputFile", str(req), "--outputFile", str(tmp_path / "o"),
                         "--device", "cpu"])
    assert harness.check_infer(o, str(req), str(tmp_path / "o"), str(d / "config.json")) == 2
    assert f": {path}: " in o.err, o.err


@pytest.mark.parametrize("doc, kind, path", [
    ({"format": [], "layer_kinds": ["attention"]}, None, "$"),                        # unhashable format
    (None, "case", "$"), ([1, 2], "case", "$"), ({"requests": []}, "case", "$"),     # --kind case on non-cases
])
def test_regression_validate_kinds(tmp_path, doc, kind, path):
    """Tracebacks of validate: `format` holding a list, `--kind case` on a file that is not an
    object or has no _conformance block."""
    f = tmp_path / "f.json"
    f.write_text(json.dumps(doc))
    o = harness.kvconform(["validate", str(f)] + (["--kind", kind] if kind else []))
    assert harness.check_validate(o, str(f), True) is False
    assert f"{f}: {path}: " in o.err, o.err


def test_regression_case_engine_with_absurd_layer_count(tmp_path):
    """numLayers 10^30 made the oracle build a 10^30-entry layer list (MemoryError traceback). The
    oracle now refuses the build arguments (above 65536 layers); a case whose build is refused is
    itself valid (the backend's build must refuse it too), unless it expects a run."""
    import reference
    case = {"requests": [{"messages": [{"role": "user", "content": "ab"}]}],
            "_conformance": {"id": "x", "description": "d", "rules": ["CR-ID-1"],
                             "engine": {"maxInputLen": 8, "maxKVCacheCapacity": 12, "maxKVPoolPages": 0,
                                        "numLayers": 10 ** 30}}}
    with pytest.raises(reference.InputError) as e:
        reference.engine_from_build_args(case["_conformance"]["engine"])
    assert e.value.path == "$._conformance.engine.numLayers"
    f = tmp_path / "case.json"
    f.write_text(json.dumps(case))
    assert harness.check_validate(harness.kvconform(["validate", str(f)]), str(f), True) is True
    case["_conformance"]["negative"] = {"phase": "parse", "path": "$.requests[0]"}
    f.write_text(json.dumps(case))
    o = harness.kvconform(["validate", str(f)])
    assert harness.check_validate(o, str(f), True) is False and "does not build" in o.err


def test_error_lines_escape_control_characters(tmp_path):
    """A newline in a media path used to split the error over two lines."""
    f = tmp_path / "nl.json"
    f.write_text(json.dumps(_doc([{"type": "image", "image": "a\nb.png"}])))
    o = harness.kvconform(["validate", str(f)])
    assert o.rc == 2 and len(o.lines()) == 1 and "a\\nb.png" in o.err, o.err


# --- true subprocesses ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["deep-nesting", "lone-surrogate-text", "nan-temperature", "fifo-media"])
def test_subprocess_outcomes(world, name):
    """The same, as a user runs it: a separate process, exit code 2, one line, no traceback, in time."""
    raw, path, _ = REGRESSIONS[name]
    f = world["req"] / f"sub-{name}.json"
    f.write_bytes(raw)
    out = world["req"] / f"sub-{name}.out.json"
    runs = [[sys.executable, "-m", "conformance.cli", "validate", str(f)],
            [sys.executable, "-m", "gpu_backend", "infer", "--engineDir", str(world["engine"]), "--inputFile", str(f),
             "--outputFile", str(out), "--device", "cpu"]]
    for argv in runs:
        p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert p.returncode == 2, (argv, p.stderr)
        lines = [x for x in p.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and "Traceback" not in p.stderr and str(f) in lines[0], p.stderr
        if path:
            assert f": {path}: " in lines[0]
    assert not out.exists()


def test_regression_page_size_beyond_32_bits(world, tmp_path):
    """tokens_per_page 2^53 + 1 in a hand-written description: the oracle's page keys encode P
    in 32 bits (struct.error traceback in simulate); both sides now refuse it at its path."""
    import os
    cfg = dict(json.loads(world["config"].read_text()), tokens_per_page=2 ** 53 + 1)
    d = tmp_path / "engine"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    os.symlink(world["engine"] / "model.safetensors", d / "model.safetensors")
    req = tmp_path / "r.json"
    req.write_text(json.dumps(_doc("abcd")))
    config = str(d / "config.json")
    o = harness.kvconform(["simulate", "--engineConfig", config, "--inputFile", str(req),
                           "--profileOutputFile", str(tmp_path / "p.json")])
    assert harness.check_simulate(o, [str(req), config], True) == 2 and ": $.tokens_per_page: " in o.err, o.err
    o = harness.backend(["infer", "--engineDir", str(d), "--inputFile", str(req), "--outputFile", str(tmp_path / "o"),
                         "--device", "cpu"])
    assert harness.check_infer(o, str(req), str(tmp_path / "o"), config) == 2 and ": $.tokens_per_page: " in o.err


def test_regression_simulate_without_a_needed_transcript_names_the_request(world, tmp_path):
    """Counts that depend on generated tokens (a decode-end publication) cannot be predicted
    without --transcript: the one-line error now names the request's JSON path (it named none)."""
    f = tmp_path / "needs.json"
    f.write_text(json.dumps({"apply_chat_template": False, "max_generate_length": 6,
                             "requests": [{"messages": [{"role": "user", "content": "abc"}]},
                                          {"messages": [{"role": "user", "content": "abcdefgh"}]}]}))
    config = str(world["config"])
    o = harness.kvconform(["simulate", "--engineConfig", config, "--inputFile", str(f), "--enableContextReuse",
                           "--profileOutputFile", str(tmp_path / "p.json")])
    assert harness.check_simulate(o, [str(f)], True) == 2 and ": $.requests[0]: " in o.err and "transcript" in o.err
