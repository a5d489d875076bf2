"""Vision servers in the peer suite: image cases where the profile's runtime keys blocks by image
(vLLM: each image's digest and its offset in the block, PEER-VLLM-2), a server that leaves the
image out of the key caught, and a vision model judged on text only said so in the headline.

The server is the bundled one with a vision engine (the vendored Phi-3-vision tokenizer and its
`<|image|>` token beside a Qwen2-VL preprocessor_config.json, so a 16x16 image takes 4 tokens, as
vLLM's Qwen2-VL processor gives it); every count is the oracle's or derived here by hand.
"""
from __future__ import annotations

import base64

import pytest

from faulty_backends.servers import SERVER_VARIANTS
from gpu_backend.serve import RequestError, make_peer

from tests.helpers.peer_servers import ROOT, build_engine, build_vision_engine, run_peers, serving, vision_tokenizer

IMAGE_CASES = ["images/same-image", "images/another-image", "images/another-position", "images/across-boundary"]


@pytest.fixture(scope="module")
def vision(tmp_path_factory):
    return build_vision_engine(tmp_path_factory.mktemp("peer-vision-engines"), "transformers-auto")


def image(name: str) -> dict:
    data = (ROOT / "cases" / "media" / f"img_{name}_16x16.png").read_bytes()
    return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(data).decode()}}


def messages(name: str) -> list:
    return [{"role": "system", "content": "You are helpful. " + "one two three " * 10},
            {"role": "user", "content": [{"type": "text", "text": "Look: "}, image(name),
                                         {"type": "text", "text": " What is it? " + "four five " * 10}]}]


def test_the_bundled_server_keys_blocks_by_image_by_hand(vision):
    """A, then B of the same size at the same place (the same ids), then A: with B = 16, B reuses
    the whole blocks before the image's first token, A all of its whole blocks below N - 1."""
    peer = make_peer("vllm-apc", vision[0])
    ids = peer.handle("POST", "/tokenize", {"messages": messages("a")})[1]["tokens"]
    assert ids == peer.handle("POST", "/tokenize", {"messages": messages("b")})[1]["tokens"]
    image_token = peer.engine.text.image_token_id
    start, n = ids.index(image_token), len(ids)
    assert ids.count(image_token) == 4                      # 16x16 -> 56x56 -> (56 / 14)^2 / 2^2

    def cached(name):
        doc = peer.handle("POST", "/v1/chat/completions", {"messages": messages(name), "max_tokens": 1})[1]
        return doc["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert [cached("a"), cached("b"), cached("a")] == [0, 16 * (start // 16), 16 * ((n - 1) // 16)]


def test_the_bundled_vision_server_conforms_on_the_image_cases(vision, tmp_path):
    with serving(make_peer("vllm-apc", vision[0])) as url:
        rc, report = run_peers(url, "vllm-apc", tmp_path, "-k", "images", tokenizer=vision[1])
    assert rc == 0 and report["summary"]["headline"] == "CONFORMANT", report["cases"]
    assert [c["id"] for c in report["cases"]] == IMAGE_CASES
    assert all(c["verdict"] == "PASS" and c["details"]["judged_above_zero"] > 0 for c in report["cases"])
    across = report["cases"][3]["details"]["layout"]
    unit, start, length = across["unit"], across["image_start"], across["image_tokens"]
    assert start < (start // unit + 1) * unit < start + length, across     # the image straddles a boundary
    assert "vision_text_only" not in report["summary"]


def test_an_image_ignoring_server_is_not_conformant(vision, tmp_path):
    """Keyed by token ids alone, another image of the same size reuses the first one's blocks."""
    variant = SERVER_VARIANTS["vllm-image-ignored"]
    with serving(variant.peer(vision[0])) as url:
        rc, report = run_peers(url, "vllm-apc", tmp_path, "-k", "images", tokenizer=vision[1])
    verdicts = {c["id"]: c["verdict"] for c in report["cases"]}
    assert rc == 1 and report["summary"]["headline"] == "NOT CONFORMANT"
    assert verdicts["images/another-image"] == verdicts["images/across-boundary"] == "FAIL", verdicts
    first = next(f for f in report["cases"][1]["failures"] if f["verdict"] == "FAIL")
    assert "PEER-VLLM-2" in {step["rule"] for step in first["chain"]}, first


def test_a_vision_model_under_a_profile_without_image_keys_is_judged_on_text_only(vision, tmp_path):
    """Before, such a run was CONFORMANT with no word that no image was ever sent."""
    with serving(make_peer("sglang-radix", vision[0])) as url:
        rc, report = run_peers(url, "sglang-radix", tmp_path, "-k", "reuse/replay", tokenizer=vision[1])
    assert rc == 0 and report["summary"]["headline"] == "CONFORMANT"
    first = (tmp_path / "report" / "summary.md").read_text().splitlines()[0]
    assert ("a vision model (Qwen2VLImageProcessor) judged on text only: the sglang-radix profile does not state "
            "how its runtime keys cached blocks by image") in first, first


def test_a_selection_without_image_cases_is_text_only(vision, tmp_path):
    with serving(make_peer("vllm-apc", vision[0])) as url:
        rc, report = run_peers(url, "vllm-apc", tmp_path, "-k", "reuse/replay", tokenizer=vision[1])
    assert rc == 0 and "judged on text only: no image case ran" in \
        (tmp_path / "report" / "summary.md").read_text().splitlines()[0]


def test_an_image_processor_the_kit_cannot_count_leaves_the_image_cases_unjudged(vision, tmp_path):
    folder = vision_tokenizer(tmp_path / "siglip", {"image_processor_type": "SiglipImageProcessor"})
    with serving(make_peer("vllm-apc", vision[0])) as url:
        rc, report = run_peers(url, "vllm-apc", tmp_path, "-k", "images", tokenizer=folder)
    assert {c["verdict"] for c in report["cases"]} == {"NOT_SUPPORTED"}
    assert "the model's image processor is SiglipImageProcessor" in report["cases"][0]["reason"]
    assert rc == 1 and report["summary"]["headline"] == "NOTHING JUDGED"
    assert "judged on text only: the model's image processor is SiglipImageProcessor" in \
        (tmp_path / "report" / "summary.md").read_text().splitlines()[0]


def test_the_bundled_server_refuses_images_it_would_not_key(vision, tmp_path):
    """An image under a profile that does not key images, or sent to a text engine, is HTTP 400,
    never cached as if it were text."""
    body = {"messages": messages("a"), "max_tokens": 1}
    with pytest.raises(RequestError, match="takes no image input"):
        make_peer("sglang-radix", vision[0]).handle("POST", "/v1/chat/completions", body)
    with pytest.raises(RequestError, match="the model takes no images"):
        make_peer("vllm-apc", build_engine(tmp_path, "transformers-auto")).handle("POST", "/v1/chat/completions", body)
