"""The numerical reference (numerical_reference/, spec/RUNNING.md section 5, spec/engine.md
section 5): its float64 forward against an independent one, the judging bounds, the reference
command protocol, and outputs judged end to end (the bundled backend passes, a model that is
wrong the same way with and without reuse fails)."""
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conformance.adapters.faulty import FaultyAdapter
from conformance.cases.case import discover
from conformance.run.execute import run_case
from conformance.judge.numerical_judge import Bounds, check_outputs, judge_request
from conformance.judge.verdicts import Verdict, headline_note, summarize
from numerical_reference import reference_for
from numerical_reference.forward import ROW_BLOCK, Forward, audio_rows, image_rows, round_fp8_e4m3
from numerical_reference.layout import LayoutError, load_weights
from numerical_reference.scoring import Scored, Step
from numerical_reference.source import CommandReference, ReferenceUnavailable, WeightsReference
from tests.helpers.np_reference import NumpyModel  # the backend tests' own float64 forward
from gpu_backend import build_engine
from gpu_backend.request import parse_request_file

ROOT = Path(__file__).resolve().parents[2]
MEDIA = ROOT / "cases" / "media"

BUILD = dict(maxInputLen=40, maxKVCacheCapacity=48, maxKVPoolPages=0, tokensPerPage=4, maxBatchSize=2,
             vision=True, audio=True, loraAdapters=["a"])


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    built = {}

    def make(kind):
        if kind not in built:
            d = tmp_path_factory.mktemp(f"engine-{kind}")
            build_engine(d, dict(BUILD, model=kind, untiedEmbeddings=kind == "hybrid"))
            built[kind] = d
        return built[kind]
    return make


CONTENT = [{"type": "text", "text": "hi "}, {"type": "image", "image": "img_20x40.png"},
           {"type": "text", "text": "x"}, {"type": "audio", "audio": "audio_c_16k.wav"},
           {"type": "text", "text": "end"}]


@pytest.mark.parametrize("kind", ["attention", "recurrent", "hybrid"])
@pytest.mark.parametrize("lora", [False, True])
def test_the_forward_matches_an_independent_float64_forward(engines, kind, lora):
    """Two float64 forwards written apart (the backend tests' sequential one, the kit's blocked
    closed-form one) agree to rounding: both round keys and values to FP16 at the same points."""
    d = engines(kind)
    weights = load_weights(str(d))
    doc = {"requests": [{"messages": [{"role": "user", "content": CONTENT}]}],
           "available_lora_weights": {"a": f"{d}/lora/a.safetensors"}}
    if lora:
        doc["requests"][0]["lora_name"] = "a"
    r = parse_request_file(doc, engine=weights.cfg, base_dir=str(MEDIA), lora_check=lambda *a: None).requests[0]
    adapter = weights.adapter(f"{d}/lora/a.safetensors")[1] if lora else None
    model = Forward(weights, adapter)
    media = [(s.start, image_rows(weights, s.data) if s.modality == "image" else audio_rows(weights, s.data))
             for s in r.spans]
    assert len(media) == 2 and all(len(rows) > 0 for _, rows in media)
    got = model.logits(model.hidden(list(r.ids), media, "fp16"))
    want = NumpyModel(weights.cfg, f"{d}/model.safetensors", f"{d}/lora/a.safetensors" if lora else None).logits(
        list(r.ids), [(s.start, s.modality, s.data) for s in r.spans])
    assert got.shape == want.shape
    assert np.abs(got - want).max() < 1e-6


@pytest.mark.parametrize("kind", ["attention", "recurrent", "hybrid"])
def test_the_last_positions_alone_are_those_of_the_whole_forward(engines, kind):
    """The scorer asks only for the positions from the input's last on (`hidden(first=)`), and the
    last layer then works at those alone: its rows equal the whole forward's, for a prompt of
    several row blocks, a first position inside a block, on a block boundary and at the end, with
    keys and values rounded and exact. The whole forward of a prompt of two blocks also equals
    the independent sequential one."""
    d = engines(kind)
    weights = load_weights(str(d))
    model = Forward(weights)
    ids = [int(t) for t in np.random.default_rng(3).integers(0, 256, 2 * ROW_BLOCK + 90)]
    for kv_dtype in ("fp16", None):
        whole = model.hidden(ids, (), kv_dtype)
        for first in (0, 1, ROW_BLOCK - 7, ROW_BLOCK, len(ids) - 1):
            part = model.hidden(ids, (), kv_dtype, first)
            assert part.shape == whole[first:].shape
            assert np.abs(part - whole[first:]).max() < 1e-10, (kind, kv_dtype, first)
    short = ids[:ROW_BLOCK + 40]
    want = NumpyModel(weights.cfg, f"{d}/model.safetensors").logits(short)
    assert np.abs(model.logits(model.hidden(short, (), "fp16", 3)) - want[3:]).max() < 1e-6


@pytest.mark.parametrize("size,counter,count", [
    ((440, 456), "edge-llm/qwen-vl", 256),      # 601,920 samples, just above 2^19
    ((448, 2240), "edge-llm/internvl", 1282),   # 3,010,560 samples, above 2^21
])
def test_a_large_counted_image_has_the_references_rows(tmp_path, size, counter, count):
    """An image the counter resizes gives `count` rows from its samples linearly resampled
    (spec/engine.md section 5). The backend's rows equal the float64 reference's to float32
    rounding also for large images: a resampling whose source positions are single precision
    (torch's interpolate) is up to 1/8 of a sample off beyond 2^21 samples, and moved the first
    token's log-probability by 0.1 to 2.7 nats."""
    from gpu_backend.model import Model
    build_engine(tmp_path, dict(maxInputLen=2048, maxKVCacheCapacity=2304, maxKVPoolPages=0, tokensPerPage=16,
                                tokenizer=str(ROOT / "spec" / "tokenizers" / "phi-3-vision"), vision=True,
                                imageCounter=counter))
    weights = load_weights(str(tmp_path))
    model = Model(weights.cfg, str(tmp_path / "model.safetensors"), torch.device("cpu"))
    rgb = np.random.default_rng(1).integers(0, 256, (*size, 3), dtype=np.uint8)
    got = model.encode_media("image", rgb, count).double().numpy()
    want = image_rows(weights, rgb, count)
    assert got.shape == want.shape == (count, weights.cfg["hidden_size"])
    assert np.abs(got - want).max() < 1e-4


def test_fp8_rounding_is_torchs_e4m3():
    x = np.random.default_rng(0).normal(0, 30, 20000)
    x = np.concatenate([x, [0.0, 1e-4, -3e-3, 448.0, 500.0, -1000.0, 0.0625 * 1.0625]])
    want = torch.from_numpy(np.clip(x, -448, 448)).to(torch.float8_e4m3fn).to(torch.float64).numpy()
    assert np.array_equal(round_fp8_e4m3(x), want)


def _scored(rows, kv=0.001):
    """rows: [(backend token, its reference log-probability, reference top-1 token, its lp)]."""
    return Scored([Step(t, lp, [(top, top_lp), (t if t != top else top + 1, min(lp, top_lp) - 1.0)], kv)
                   for t, lp, top, top_lp in rows])


def _response(tokens_lps):
    return {"output_ids": [t for t, _ in tokens_lps],
            "logprobs": [[{"token_id": t, "logprob": lp}] for t, lp in tokens_lps]}


def test_the_bounds_follow_the_calibration():
    b = Bounds.for_request(0.002)          # N = 0.005 + 2 * 0.002, T = 0.01 + 4 * 0.002
    assert math.isclose(b.noise, 0.009) and math.isclose(b.tolerance, 0.018)
    assert b.near_tie == 0.05              # max(0.05, 2 N)
    assert math.isclose(Bounds.for_request(0.05).near_tie, 0.21)


@pytest.mark.parametrize("drift,verdict", [(0.004, None), (0.012, Verdict.QUALITY_WARNING), (0.03, Verdict.FAIL)])
def test_log_probability_drift_is_judged_in_three_bands(drift, verdict):
    scored = _scored([(65, -0.5, 65, -0.5), (66, -0.2, 66, -0.2)], kv=0.002)    # N 0.009, T 0.018
    found, facts = judge_request(0, _response([(65, -0.5), (66, -0.2 - drift)]), scored, "float64 reference")
    assert facts["steps"] == 2 and facts["logprob_steps"] == 2 and math.isclose(facts["worst_drift"], drift)
    assert [f.verdict for f in found] == ([] if verdict is None else [verdict])
    if verdict is not None:
        assert found[0].rule == "CR-OUT-2" and found[0].what == "responses[0].logprobs[1]"


def test_a_token_that_is_not_the_references_argmax_fails_unless_near_tied():
    far = _scored([(65, -0.3, 65, -0.3), (70, -2.0, 71, -0.2)])                 # gap 1.8 nats
    found, _ = judge_request(3, {"output_ids": [65, 70]}, far, "float64 reference")
    assert [(f.rule, f.verdict, f.request) for f in found] == [("CR-OUT-1", Verdict.FAIL, 3)]
    near = _scored([(65, -0.3, 65, -0.3), (70, -0.70, 71, -0.68)])              # gap 0.02 < 0.05
    found, _ = judge_request(3, {"output_ids": [65, 70]}, near, "float64 reference")
    assert [(f.rule, f.verdict) for f in found] == [("CR-OUT-1", Verdict.QUALITY_WARNING)]


def test_a_reference_that_scores_fewer_tokens_than_were_generated_is_an_error(monkeypatch):
    """Outputs the reference did not score were not judged: ERROR, never a PASS (a stale or cut
    cached result, a reference command that skipped a step)."""
    from types import SimpleNamespace

    from conformance.judge import numerical_judge

    class Answers:
        kind, label = "weights", "float64 reference"

        def __init__(self, cut):
            self.cut = cut

        def score_all(self, engine_dir, engine, items, doc, base_dir):
            return [Scored([Step(t, -0.1, [(t, -0.1), (t + 1, -3.0)]) for t in forced[:len(forced) - self.cut]])
                    for _, _, forced in items]

    monkeypatch.setattr(numerical_judge.oracle, "transcript", lambda response, engine: response["output_ids"])
    doc, parsed = {"temperature": 0, "requests": [{}, {}]}, SimpleNamespace(requests=[object(), object()])
    responses = [{"output_ids": [65]}, {"output_ids": [65, 66, 67]}]
    for cut, want in ((0, []), (1, [(Verdict.ERROR, "responses[2].output_ids", 2)])):
        monkeypatch.setattr(numerical_judge, "reference_for", lambda manifest, cut=cut: Answers(cut))
        found, facts = check_outputs({}, None, None, doc, ".", parsed, [{}, {}], responses, offset=2)
        assert [(f.verdict, f.what, f.request) for f in found] == want
        assert facts["requests"] == (2 if cut == 0 else 0)


def test_without_a_declared_reference_outputs_are_compared_with_the_bypass_replay_only():
    assert reference_for(None) is None and reference_for({"numerical_reference": None}) is None
    assert isinstance(reference_for({"numerical_reference": {"source": "weights", "layout": "kvconform-weights-v1"}}),
                      WeightsReference)
    found, facts = check_outputs({}, None, None, {"temperature": 0, "requests": []}, ".", object(), [], [])
    assert found == [] and facts["requests"] == 0 and facts["source"] is None
    from conformance.judge.verdicts import CaseResult
    passed = CaseResult("x", [], True, "s", None)
    summary = summarize([passed])
    assert summary["headline"] == "CONFORMANT" and summary["reference_checked"] == 0
    assert "bypass replay only" in headline_note(summary)
    passed.details["reference"] = {"requests": 4}
    summary = summarize([passed])
    assert summary["reference_checked"] == 4 and headline_note(summary) == ""


def _case(case_id):
    return next(c for c in discover() if c.id == case_id)


def test_the_bundled_backend_passes_and_a_wrong_lora_scale_fails_against_the_reference():
    """golden/id-lora-isolation runs one adapter and the base model: the bundled backend agrees
    with the reference on every greedy request (each counted); a LoRA delta applied twice agrees
    with its own bypass replay but not with the weights."""
    case = _case("golden/id-lora-isolation")
    faulty = FaultyAdapter("wrong-lora-scale", device="cpu")
    from conformance.adapters import make_adapter
    bundled = make_adapter("inprocess", device="cpu")
    result = run_case(case, bundled, bundled.capabilities())
    assert result.verdict == Verdict.PASS, [f.line() for f in result.failures]
    facts = result.details["reference"]
    assert facts["source"] == "weights" and facts["requests"] == len(json.loads(case.path.read_text())["requests"])
    result = run_case(case, faulty, faulty.capabilities())
    assert result.verdict == Verdict.FAIL
    assert any(f.rule == "CR-OUT-1" and "float64 reference" in f.why for f in result.failures)


def test_the_reference_command_answers_what_the_kit_computes(engines, tmp_path):
    """`python -m numerical_reference` as a manifest's reference command gives the kit's own
    steps, and a command that fails makes the file unjudgeable (ReferenceUnavailable), not a PASS."""
    from conformance.judge import oracle
    from reference.engine import resolve_paths
    d = engines("attention")
    engine = oracle.engine_of(resolve_paths(json.loads((d / "config.json").read_text()), str(d)))
    doc = {"temperature": 0, "requests": [{"messages": [{"role": "user", "content": "abcdefgh"}], "lora_name": "a"}],
           "available_lora_weights": {"a": f"{d}/lora/a.safetensors"}}
    parsed = oracle.parse(doc, str(MEDIA), engine, oracle.flags_of({}))
    items = [(parsed.requests[0], doc["requests"][0], [72, 73, 74])]
    want = WeightsReference().score_all(str(d), engine, items, doc, str(MEDIA))
    got = CommandReference(f"{sys.executable} -m numerical_reference").score_all(str(d), engine, items, doc,
                                                                                   str(MEDIA))
    assert [s.to_json() for s in got[0].steps] == [s.to_json() for s in want[0].steps]
    assert len(want[0].steps) == 3 and all(s.kv_shift >= 0 for s in want[0].steps)
    with pytest.raises(ReferenceUnavailable):
        CommandReference(f"{sys.executable} -c 'import sys; sys.exit(3)'").score_all(str(d), engine, items, doc,
                                                                                    str(MEDIA))


def test_a_folder_outside_the_layout_is_refused(engines, tmp_path):
    d = engines("attention")
    (tmp_path / "config.json").write_text((d / "config.json").read_text())
    with pytest.raises(LayoutError, match="no weights file"):
        load_weights(str(tmp_path))
    from safetensors.numpy import save_file
    save_file({"embed": np.zeros((3, 3), np.float32)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(LayoutError, match="must have shape"):
        load_weights(str(tmp_path))


def test_the_reference_command_refuses_bad_input_with_one_line(tmp_path, engines):
    d = engines("attention")
    bad = tmp_path / "in.json"
    bad.write_text(json.dumps({"requests": [{"messages": [{"role": "user", "content": "ab"}],
                                             "teacher_forced_ids": ["x"]}]}))
    done = subprocess.run([sys.executable, "-m", "numerical_reference", "--engineDir", str(d), "--inputFile",
                           str(bad), "--outputFile", str(tmp_path / "out.json")], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode == 2 and "teacher_forced_ids" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out.json").exists()



def test_the_former_module_name_still_runs_the_reference_command_and_says_it_is_deprecated(tmp_path, engines):
    """`python -m conformance.numerics` (the name manifests used before numerical_reference/)
    keeps working for one release, with a one-line note."""
    d = engines("attention")
    doc = {"temperature": 0, "requests": [{"messages": [{"role": "user", "content": "ab"}],
                                           "teacher_forced_ids": [72, 73]}]}
    (tmp_path / "in.json").write_text(json.dumps(doc))

    def run(module, out):
        return subprocess.run([sys.executable, "-m", module, "--engineDir", str(d), "--inputFile",
                               str(tmp_path / "in.json"), "--outputFile", str(tmp_path / out)],
                              capture_output=True, text=True, cwd=ROOT)
    old, new = run("conformance.numerics", "old.json"), run("numerical_reference", "new.json")
    assert old.returncode == new.returncode == 0, old.stderr + new.stderr
    assert old.stderr.strip().splitlines() == ["python -m conformance.numerics is deprecated: use python -m "
                                               "numerical_reference"] and new.stderr == ""
    assert json.loads((tmp_path / "old.json").read_text()) == json.loads((tmp_path / "new.json").read_text())

class _NoExplain:
    def output(self, i, detail):
        return detail


@pytest.mark.parametrize("drift,verdict", [(0.01, None), (0.05, Verdict.QUALITY_WARNING), (0.2, Verdict.FAIL)])
def test_drift_from_the_bypass_replay_beyond_the_tolerance_is_a_fail(drift, verdict):
    """Without a reference, agreeing tokens whose log-probabilities drift from the bypass run by
    more than 0.02 are a QUALITY_WARNING, by more than 0.1 a FAIL (spec/RUNNING.md section 5)."""
    from conformance.judge.compare import compare_outputs

    def response(lps):
        return {"request_idx": 0, "batch_idx": 0, "output_ids": [97, 98], "output_text": "ab",
                "finish_reason": "max-length",
                "logprobs": [[{"token_id": t, "token": chr(t), "bytes": [t], "logprob": lp}] for t, lp in lps]}
    found = compare_outputs([response([(97, -0.1), (98, -0.3 - drift)])], [response([(97, -0.1), (98, -0.3)])],
                            _NoExplain(), ids=True)
    assert [(f.rule, f.verdict) for f in found] == ([] if verdict is None else [("CR-OUT-2", verdict)])
