"""Each bug class that faulty backends written outside the project got through now has a case
that fails it: the bundled backend with the defect put in (a patch of one function, undone after
the test) fails the case, and the bundled backend passes it (the default suite runs it).

Classes: the generation prompt dropped after a final assistant message, indented block tags
without lstrip_blocks (tests/conformance/test_failure_messages.py, with the rule it names), a
rendering memo that ignores the template keywords, a JPEG's EXIF orientation applied, 0xFF fill
bytes before a marker not skipped.
"""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from conformance.adapters.inprocess import InprocessAdapter
from conformance.cases.case import load_case
from conformance.judge.verdicts import Verdict
from conformance.run.execute import run_case
from gpu_backend import chat_template, media

CASES = Path(__file__).resolve().parents[2] / "cases"


def verdict(case_path: str):
    adapter = InprocessAdapter(device="cpu")
    try:
        return run_case(load_case(CASES / case_path), adapter, adapter.capabilities())
    finally:
        adapter.close()


def drops_generation_prompt_after_assistant(monkeypatch):
    render = chat_template.ChatTemplate.render

    def patched(self, messages, add_generation_prompt, kwargs):
        last_is_answer = messages and messages[-1]["role"] == "assistant"
        return render(self, messages, add_generation_prompt and not last_is_answer, kwargs)
    monkeypatch.setattr(chat_template.ChatTemplate, "render", patched)


def memo_ignores_keywords(monkeypatch):
    render = chat_template.ChatTemplate.render
    seen = {}

    def patched(self, messages, add_generation_prompt, kwargs):
        key = (id(self), json.dumps(messages), add_generation_prompt)       # the keywords left out
        if key not in seen:
            seen[key] = render(self, messages, add_generation_prompt, kwargs)
        return seen[key]
    monkeypatch.setattr(chat_template.ChatTemplate, "render", patched)


def applies_exif_orientation(monkeypatch):
    import numpy as np
    from PIL import Image, ImageOps
    decode = media._decode_jpeg

    def patched(data, max_placeholders, count=None):
        decode(data, max_placeholders, count)                          # the same checks, then turned
        turned = ImageOps.exif_transpose(Image.open(io.BytesIO(data)))
        return np.array(turned.convert("RGB"), dtype=np.uint8)
    monkeypatch.setattr(media, "_decode_jpeg", patched)


def fill_bytes_not_skipped(monkeypatch):
    geometry = media._jpeg_geometry

    def patched(data):
        i = 2
        while i + 1 < len(data) and data[i] == 0xFF and data[i + 1] not in (0xDA, 0xD9):
            if data[i + 1] == 0xFF:
                raise media.MediaError(f"JPEG is malformed: no marker at byte {i}")
            i += 2 + int.from_bytes(data[i + 2:i + 4], "big")
        return geometry(data)
    monkeypatch.setattr(media, "_jpeg_geometry", patched)


@pytest.mark.parametrize("case_path, defect", [
    ("sections/tok/template-final-assistant.json", drops_generation_prompt_after_assistant),
    ("sections/tok/template-two-keyword-sets.json", memo_ignores_keywords),
    ("sections/media/jpeg-exif-orientation.json", applies_exif_orientation),
    ("sections/media/jpeg-fill-bytes.json", fill_bytes_not_skipped),
], ids=["final-assistant", "two-keyword-sets", "exif-orientation", "fill-bytes"])
def test_the_case_fails_the_defect_and_passes_the_bundled_backend(case_path, defect, monkeypatch):
    assert verdict(case_path).verdict == Verdict.PASS
    defect(monkeypatch)
    got = verdict(case_path)
    assert got.verdict == Verdict.FAIL, (got.verdict, got.reason)
    assert got.first_failure() is not None
