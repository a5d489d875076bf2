"""One validity rule for the token ids an engine description states (spec/engine.md section 2,
"Token ids"), on both sides: the oracle (`reference.engine.check_token_ids`, with
`engine_from_config`) and `kvconform validate` refuse exactly what the bundled backend refuses
(its own checks: gpu_backend/inputs.py and hf_prompt.HFText). The oracle once accepted
`vocab_size: 100` with a 32,011-id tokenizer and `eos_token_id: 1000000`, and validate said ok."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.cli import main as kvconform
from conformance.judge import oracle

ROOT = Path(__file__).resolve().parents[2]
TOKENIZERS = ROOT / "spec" / "tokenizers"
BASE = {"maxInputLen": 64, "maxKVCacheCapacity": 96, "maxKVPoolPages": 0, "tokensPerPage": 16}

# Phi-3-mini: 32,011 ids (TOK-HF-9), <|endoftext|> 32000 its EOS; Phi-3-vision: 32,045 ids and the
# image token <|image|> (32044): the counts spec/hf-tokenizer.md states for these files.
ENGINES = {
    "bytes-v1": BASE,
    "phi-3-mini": dict(BASE, tokenizer=str(TOKENIZERS / "phi-3-mini"), tokenizerLoader="tokenizers-raw"),
    "phi-3-vision": dict(BASE, maxInputLen=2048, maxKVCacheCapacity=2304, tokensPerPage=128, vision=True,
                         tokenizer=str(TOKENIZERS / "phi-3-vision"), tokenizerLoader="tokenizers-raw"),
}
EDITS = [   # (engine, edit of the description, refused?)
    ("bytes-v1", {}, False),
    ("bytes-v1", {"vocab_size": 100}, True),
    ("bytes-v1", {"eos_token_id": 1000000}, True),
    ("bytes-v1", {"eos_token_id": 5}, True),
    ("phi-3-mini", {}, False),
    ("phi-3-mini", {"vocab_size": 100}, True),
    ("phi-3-mini", {"vocab_size": 32064}, True),          # the model's embedding rows, not the id count
    ("phi-3-mini", {"eos_token_id": 1000000}, True),
    ("phi-3-mini", {"eos_token_id": 32011}, True),
    ("phi-3-mini", {"eos_token_id": 32010}, False),       # any id the tokenizer has
    ("phi-3-vision", {}, False),
    ("phi-3-vision", {"image_token_id": 32000}, True),
    ("phi-3-vision", {"vocab_size": 32011}, True),
]


def _description(name: str, edit: dict) -> dict:
    return {**oracle.derive_engine(ENGINES[name]).to_config(), **edit}


def _oracle_refuses(config: dict) -> str | None:
    try:
        oracle.check_token_ids(oracle.engine_from_config(config))
    except oracle.InputError as e:
        return e.path
    return None


def _backend_refuses(config: dict, folder: Path) -> str | None:
    from gpu_backend.errors import BackendInputError
    from gpu_backend.hf_prompt import EngineTextError, HFText
    from gpu_backend.engine_config import load_engine_config
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    try:
        cfg = load_engine_config(str(folder))
        if isinstance(cfg["tokenizer"], dict):
            HFText(str(folder), cfg)
    except BackendInputError as e:
        return e.path
    except EngineTextError as e:
        return e.path
    return None


@pytest.mark.parametrize("name, edit, refused", EDITS, ids=[f"{n}-{json.dumps(e)}" for n, e, _ in EDITS])
def test_the_oracle_and_the_backend_refuse_the_same_descriptions(tmp_path, name, edit, refused):
    config = _description(name, edit)
    mine, theirs = _oracle_refuses(config), _backend_refuses(config, tmp_path / "engine")
    assert (mine is not None) == refused, (mine, config)
    assert mine == theirs, f"the oracle refuses at {mine}, the backend at {theirs}"
    if edit:
        assert mine in (f"$.{k}" for k in edit) or not refused


@pytest.mark.parametrize("name, edit", [("phi-3-mini", {"vocab_size": 100}), ("phi-3-mini", {"eos_token_id": 1000000}),
                                        ("bytes-v1", {"eos_token_id": 1000000})])
def test_validate_refuses_them(tmp_path, capsys, name, edit):
    path = tmp_path / "engine.json"
    path.write_text(json.dumps(_description(name, edit)))
    assert kvconform(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"$.{next(iter(edit))}" in err and "Traceback" not in err, err
