"""Materialization onto an engine with a real tokenizer: each text position becomes a one-token
unit, and the tokens the engine's chat template writes around each message are accounted page
by page (conformance/materialize/hf_positions.py), so the page structure survives exactly.

The expected labels and widths below are derived by hand from the rendered chats, which are
spelled out in each test; the tokenizers are the vendored ones (spec/tokenizers/)."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

import reference
from conformance.cases.case import load_case
from conformance.materialize import NotExpressible, materialize_for, structure
from conformance.materialize.hf_positions import token_labels, with_target_widths
from conformance.materialize.layout import atoms_of
from conformance.materialize.units import write_units

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "cases"


def hf_engine(name: str, loader: str = "tokenizers-raw", P: int = 128):
    return reference.engine_from_build_args({"maxInputLen": 3072, "maxKVCacheCapacity": 4096, "maxKVPoolPages": 0,
                                             "tokensPerPage": P, "tokenizer": str(ROOT / "spec/tokenizers" / name),
                                             "tokenizerLoader": loader})


REQUEST = {"messages": [{"role": "system", "content": "ab"}, {"role": "user", "content": "c"}]}
T, S = ("template",), lambda m: ("text", m, None)


def widths(engine) -> list[int]:
    units = copy.deepcopy(REQUEST)
    write_units(units, engine, True)
    atoms = with_target_widths(atoms_of(REQUEST, True, True, None), token_labels(units, engine, True, True))
    return [a.width for a in atoms]


def test_labels_follow_the_rendered_chat():
    # Phi-3-mini renders <|system|>\nU1 U2<|end|>\n<|user|>\nU3<|end|>\n<|assistant|>\n and its specials'
    # rstrip eats each newline: 8 tokens, two of them message 0's units, one message 1's
    engine = hf_engine("phi-3-mini")
    units = copy.deepcopy(REQUEST)
    write_units(units, engine, True)
    assert token_labels(units, engine, True, True) == [T, S(0), S(0), T, T, S(1), T, T]


def test_a_template_without_a_bos_takes_no_position_for_it():
    # bytes-v1: BOS, role, a, b, end, role, c, end, assistant. Phi-3-mini writes no BOS: the first
    # template run has 1 token for bytes-v1's 2, every other run as many as bytes-v1
    assert widths(hf_engine("phi-3-mini")) == [0, 1, 1, 1, 1, 1, 1, 1, 1]


def test_newlines_after_the_specials_widen_the_template_runs():
    # Phi-3-vision under transformers-auto keeps each newline as its own token:
    # <|system|> \n | U U | <|end|> \n <|user|> \n | U | <|end|> \n <|assistant|>
    # runs of 2, 4 and 3 tokens where bytes-v1 has 2, 2 and 2 positions
    assert widths(hf_engine("phi-3-vision", "transformers-auto")) == [1, 1, 1, 1, 3, 1, 1, 2, 1]


def test_a_multi_turn_case_keeps_its_pages_on_a_real_tokenizer(tmp_path):
    """sections/pub/multi-turn-including is written for P = 4: request 0 is 29 = 7*4 + 1 tokens;
    on P = 128 it must be 7*128 + 1 = 897, with the same pages shared by the later turns."""
    case = load_case(CASES / "sections/pub/multi-turn-including.json")
    engine = hf_engine("phi-3-mini")
    made = materialize_for(case, engine.to_config(), tmp_path)
    src = reference.engine_from_build_args(case.engine_args)
    assert structure(case.doc, case.base_dir, src) == structure(made.doc, "/", engine)
    first = dict(made.doc, requests=made.doc["requests"][:1])
    assert reference.parse_request_file(first, "/", engine).requests[0].n == 897


def test_a_case_in_one_tokenizers_text_is_not_shown_to_another(tmp_path):
    case = load_case(CASES / "sections/tok/phi3-mini-transformers-auto.json")
    with pytest.raises(NotExpressible, match="tokenizes otherwise"):
        materialize_for(case, hf_engine("phi-3-mini", "tokenizers-raw", P=16).to_config(), tmp_path)
    with pytest.raises(NotExpressible, match="tokenizes otherwise"):
        materialize_for(case, hf_engine("phi-3-vision", "transformers-auto", P=16).to_config(), tmp_path)
