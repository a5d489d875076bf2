#!/usr/bin/env python3
"""Write the runner's curated cases: cases/{llm,vlm}_context_reuse.json and
cases/sections/<section>/*.json.

    python tools/make_cases.py            # rewrite them (they are committed)
    python tools/make_cases.py --check    # exit 1 if a committed case differs from what this writes

Each file it writes starts with `"_generated_by": "tools/make_cases.py ..."`: change a case here,
never in its JSON.

The cases complement the oracle's golden cases (cases/golden/, hand-derived counts,
mostly one generated token): they decode greedily for several tokens, so every case also
checks CR-OUT-1 against a bypass replay, and they cover what needs a whole scenario: page
boundaries at k*P-1, k*P, k*P+1, exact replays, multi-turn conversations that feed generated
answers back (`{{output:K}}`, spec/RUNNING.md section 4), LoRA isolation, policy combinations,
record limits, pool pressure, batching, hybrid and recurrent endpoints, malformed inputs.
No case states an expected count except where derived by hand in its description (`expect`):
the oracle computes every count.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "cases"
sys.path.insert(0, str(ROOT))

from conformance.cases import scenarios  # noqa: E402
from reference import engine_from_build_args  # noqa: E402
from reference.hybrid import slot_sizes  # noqa: E402

GREEDY = {"top_k": 1, "apply_chat_template": False, "max_generate_length": 4, "num_logprobs": 2}
REUSE = {"enableContextReuse": True, "dumpProfile": True}
TEXT4 = {"maxInputLen": 40, "maxKVCacheCapacity": 48, "maxKVPoolPages": 0, "tokensPerPage": 4}
TEXT8 = {"maxInputLen": 64, "maxKVCacheCapacity": 80, "maxKVPoolPages": 0, "tokensPerPage": 8}
VISION4 = dict(TEXT4, vision=True)
LONG4 = {"maxInputLen": 96, "maxKVCacheCapacity": 112, "maxKVPoolPages": 0, "tokensPerPage": 4}
STOPS = [chr(c) for c in range(32, 127, 3)]  # every third printable character: generation stops soon
DOC = "the quick brown fox jumps over the lazy dog while five wizards box quickly"


def user(*parts, system: str | None = None, lora: str | None = None) -> dict:
    content = parts[0] if len(parts) == 1 and isinstance(parts[0], str) else [
        {"type": "text", "text": p} if isinstance(p, str) else p for p in parts]
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": content}]
    return {"messages": messages, **({"lora_name": lora} if lora else {})}


def turns(*messages: tuple[str, str]) -> dict:
    return {"messages": [{"role": r, "content": c} for r, c in messages]}


def image(name: str, up: int = 2) -> dict:
    return {"type": "image", "image": "../" * up + f"media/{name}"}


def audio(name: str, up: int = 2) -> dict:
    return {"type": "audio", "audio": "../" * up + f"media/{name}"}


def hybrid_runtime(engine: dict, recurrent_slots: int = 8, partial_slots: int = 8) -> dict:
    r, p = slot_sizes(engine_from_build_args(engine))
    out = dict(REUSE, contextCacheRecurrentSnapshotPoolBytes=r * recurrent_slots)
    if engine.get("model") == "hybrid":
        out["contextCachePartialKVSnapshotPoolBytes"] = p * partial_slots
    return out


def fact(plan: str, matched: int, reused: int | None = None, **more) -> dict:
    """A hand-derived per-request expectation (`expect.requests`): it checks the oracle itself."""
    return {"plan": plan, "matched_tokens": matched, "reused_tokens": matched if reused is None else reused, **more}


MISS = fact("no_reusable_prefix", 0)


def case(cid: str, description: str, rules: list[str], requests: list[dict], engine: dict = TEXT4,
         runtime: dict | None = None, settings: dict | None = None, **meta) -> dict:
    doc = dict(GREEDY if settings is None else settings)
    doc["requests"] = requests
    block = {"id": cid, "description": description, "rules": rules}
    if meta.get("requires"):
        block["requires"] = meta.pop("requires")
    block["engine"] = engine
    block["runtime"] = REUSE if runtime is None else runtime
    block.update(meta)
    doc["_conformance"] = block
    return doc


# --- the two Edge-LLM-format cases ---------------------------------------------------------------

def edge_llm_cases() -> dict[str, dict]:
    words = ("Context reuse keeps the KV cache of a repeated prefix so the runtime skips its prefill. "
             "The cache is content addressed, page aligned and isolated by LoRA adapter. ")
    context = (words * 2) + "Question: which company builds TensorRT Edge-LLM? Output: NVIDIA\nOutput:"
    prefix = context[:300]  # a strict prefix of at least two 128-token pages
    llm = {
        "batch_size": 1, "top_k": 1, "num_logprobs": 1, "max_generate_length": 2,
        "apply_chat_template": False, "add_generation_prompt": False,
        "context_cache_commit_policy": "prefill_state_only",
        "requests": [user(context), user(prefix), user(context)],
        "_conformance": {
            "id": "llm_context_reuse",
            "description": "Edge-LLM's llm_context_reuse.json in bytes-v1 with P = 128: a long context A, a strict "
                           "prefix B of A spanning two pages, then A again. B reuses A's first two pages; the "
                           "second A (the consumer) reuses what A (the producer) published and must generate "
                           "exactly what the producer generated (and what a bypass replay generates).",
            "rules": ["CR-PLAN-1", "CR-PUB-3", "CR-BATCH-3", "CR-OUT-1", "CR-MET-12"],
            "engine": {"maxInputLen": 512, "maxKVCacheCapacity": 640, "maxKVPoolPages": 64, "tokensPerPage": 128},
            "runtime": REUSE,
            # by hand: no template, one byte per token; neither length is a multiple of 128
            "expect": {"requests": [dict(MISS, input_tokens=len(context)),
                                    fact("standard", len(prefix) // 128 * 128, input_tokens=len(prefix)),
                                    fact("standard", len(context) // 128 * 128, input_tokens=len(context))],
                       "prefill": {"reused_tokens": len(prefix) // 128 * 128 + len(context) // 128 * 128}},
        },
    }
    a, b = image("img_j_a_32x48.jpg", 0), image("img_j_b_48x32.jpg", 0)

    def vq(scenario, *parts):
        return {"_scenario": scenario, "messages": [{"role": "user", "content": [
            p if isinstance(p, dict) else {"type": "text", "text": p} for p in parts]}]}
    describe, compare = "Describe what you see in this image briefly.", "Compare these two images briefly."
    vlm = {
        "batch_size": 1, "temperature": 1.0, "top_p": 1.0, "top_k": 1, "max_generate_length": 64,
        "context_cache_commit_policy": "prefill_state_only",
        "requests": [
            vq("First request with image A (cold start, populates cache)", a, describe),
            vq("Same image A, different question (cache hit on image prefix)", a, "What colors are dominant in this image?"),
            vq("Different image B, same question as request 1 (cache miss despite identical text)", b, describe),
            vq("Image B again, different question (cache hit on image B prefix)", b, "Is this animal in a zoo or in the wild?"),
            vq("Multi-image request: A + B together (cache miss \u2014 different token layout)", a, b, compare),
            vq("Same multi-image A + B again, different question (cache hit on multi-image prefix)", a, b,
               "Which image shows an outdoor scene?"),
            vq("Reversed image order B + A (cache miss \u2014 different content hash positions)", b, a, compare),
            {"_scenario": "Text-only request (no media hash, tests text-only path still works)",
             "messages": [{"role": "user", "content": "What is the capital of France? Answer in one word."}]}],
        "_conformance": {
            "id": "vlm_context_reuse",
            "description": "A port of Edge-LLM 0.10's tests/test_cases/vlm_context_reuse.json (Stars1233/TensorRT-Edge-LLM "
                           "@bb29145) that keeps its eight requests, prompts, scenarios and policies (batch 1, top_k 1, "
                           "max_generate_length 64, prefill_state_only, the chat template on). Its two JPEG photographs "
                           "(woman_and_dog.jpeg, red_panda.jpeg) are the kit's own JPEGs A (32x48) and B (48x32), 6 "
                           "placeholders each; the model is bytes-v1 with P = 8, so that <bos><user> and an image fill "
                           "page 0 exactly. The fixture's expected counts (5 hits, 2432 reused tokens) are its model's; "
                           "by hand here: r0 cold; r1 shares page 0 (<bos><user> A) and its question differs from "
                           "byte 0: reuses 8; r2 misses (page 0 holds B); r3 reuses r2's page 0 (8); r4 (A+B) matches "
                           "r0's page 0 and the boundary at 8 separates A from B: reuses 8; r5 (A+B, another question) "
                           "reuses 8; r6 (B+A) matches r2's page 0 (B first), the boundary separates B from A: reuses 8; "
                           "r7 (text only) misses. Hits 5, matched = reused 40, media-aware 7. Under edge-llm-0.10 the "
                           "adjacent images of r4, r5 and r6 are one run, and the trim gives back page 0 because "
                           "positions 7 and 8 are both media: those three reuse nothing, as the fixture's scenarios say "
                           "for r4 and r6; hits 2, reused 16.",
            "rules": ["CR-ID-4", "CR-MEDIA-2", "CR-MEDIA-3", "CR-MEDIA-4", "CR-MET-3", "CR-OUT-1"],
            "engine": {"maxInputLen": 96, "maxKVCacheCapacity": 160, "maxKVPoolPages": 64, "tokensPerPage": 8,
                       "vision": True},
            "runtime": REUSE,
            "expect": {"requests": [MISS, fact("standard", 8), MISS, fact("standard", 8), fact("standard", 8),
                                    fact("standard", 8), fact("standard", 8), fact("no_reusable_prefix", 0, media_aware=False)],
                       "context_cache": {"admitted_sequences": 8, "hit_sequences": 5, "media_aware_sequences": 7,
                                         "matched_tokens": 40, "reused_tokens": 40}},
            "profile_expect": {"edge-llm-0.10": {
                "requests": [MISS, fact("standard", 8), MISS, fact("standard", 8), MISS, MISS, MISS,
                             fact("no_reusable_prefix", 0, media_aware=False)],
                "context_cache": {"admitted_sequences": 8, "hit_sequences": 2, "media_aware_sequences": 7,
                                  "matched_tokens": 16, "reused_tokens": 16}}},
        },
    }
    return {"llm_context_reuse.json": llm, "vlm_context_reuse.json": vlm}


# --- sections ---------------------------------------------------------------------------------------

def identity_cases() -> list[dict]:
    same = [image(n) for n in ("img_a_16x16.png", "img_a_16x16_palette.png", "img_a_16x16.ppm",
                               "img_a_16x16_rgba.png", "img_a_16x16_z0.png")]
    return [
        case("sections/id/chain-same-tail", "abcdwxyz then efghwxyz: page 1 holds wxyz in both but its identity "
             "covers page 0, so the second request matches nothing.",
             ["CR-ID-1", "CR-PLAN-1"], [user("abcdwxyz"), user("efghwxyz"), user("abcdwxyz")]),
        case("sections/id/lora-isolation", "The same input under adapter a, adapter b, no adapter, then a again: "
             "only the last one hits (a's pages); outputs differ per adapter but each equals its bypass replay.",
             ["CR-ID-3", "CR-OUT-1"],
             [user("abcdefghij", lora="a"), user("abcdefghij", lora="b"), user("abcdefghij"),
              user("abcdefghij", lora="a")],
             engine=dict(TEXT4, loraAdapters=["a", "b"]),
             settings=dict(GREEDY, available_lora_weights={"a": "lora/a.safetensors", "b": "lora/b.safetensors"})),
        case("sections/id/media-same-pixels", "Image A as RGB PNG, palette PNG, PPM, RGBA PNG (alpha dropped) and "
             "uncompressed PNG, then a grey image as grey and as RGB PNG: equal decoded pixels and geometry are "
             "one item, so every repeat hits through the image.",
             ["CR-ID-4", "CR-MEDIA-1"],
             [user("ab", img, "cdefghij") for img in same]
             + [user("ab", image("img_g_16x16_gray.png"), "cdefghij"),
                user("ab", image("img_g_16x16_rgb.png"), "cdefghij")],
             engine=VISION4),
        case("sections/id/media-transposed", "Equal RGB bytes as a 16x32 and a 32x16 image: different geometry, "
             "different items; the second request shares only the page before the image.",
             ["CR-ID-4"], [user("abcd", image("img_t_16x32.png"), "efghij"),
                           user("abcd", image("img_t_32x16.png"), "efghij"),
                           user("abcd", image("img_t_16x32.png"), "efghij")], engine=VISION4),
        case("sections/id/media-other-pixels", "Two different images of equal size in the same position: the "
             "page holding the image differs, so reuse stops before it.",
             ["CR-ID-4"], [user("abc", image("img_a_16x16.png"), "defghijk"),
                           user("abc", image("img_b_16x16.png"), "defghijk"),
                           user("abc", image("img_a_16x16.png"), "defghijk")], engine=VISION4),
        case("sections/id/media-swapped-order", "A then B, and B then A, with the same text: order is identity, so "
             "the swapped request shares only the text before the images.",
             ["CR-ID-4"], [user("abcd", image("img_a_16x16.png"), image("img_b_16x16.png"), "efgh"),
                           user("abcd", image("img_b_16x16.png"), image("img_a_16x16.png"), "efgh"),
                           user("abcd", image("img_a_16x16.png"), image("img_b_16x16.png"), "efgh")],
             engine=VISION4),
        case("sections/id/sampling-params-share", "Equal inputs with different per-request num_logprobs and stop "
             "strings share pages (no salt in the identity).",
             ["CR-ID-5", "CR-OUT-2"],
             [user("abcdefghij"), dict(user("abcdefghij"), num_logprobs=1), dict(user("abcdefghij"), stop=["zz"])],
             requires=["feature:stop_strings"]),
    ]


def planning_cases() -> list[dict]:
    out = []
    for P, engine in ((4, TEXT4), (8, TEXT8)):
        seed = DOC[: 4 * P]
        for k in (1, 2):
            for d, name in ((-1, "minus1"), (0, "exact"), (1, "plus1")):
                n = k * P + d
                pages = n // P
                prefix = (fact("full_input_rewind", n, n - P) if d == 0 else
                          fact("standard", pages * P) if pages else MISS)
                out.append(case(
                    f"sections/plan/boundary-p{P}-k{k}-{name}",
                    f"P = {P}: a {4 * P}-token document, then its prefix of n = {n} = {k}*P{d:+d} tokens twice. "
                    f"The prefix matches floor(n/P) = {n // P} page(s); "
                    + ("n is aligned, so the full match rewinds one page (full_input_rewind)"
                       if d == 0 else "the partial page is recomputed")
                    + "; the exact replay plans the same way and publishes an existing endpoint.",
                    ["CR-PLAN-1", "CR-PLAN-2", "CR-PLAN-4", "CR-ID-2", "CR-PUB-4"],
                    [user(seed), user(seed[:n]), user(seed[:n])], engine=engine,
                    expect={"requests": [MISS, prefix, prefix]}))
    out += [
        case("sections/plan/exact-replays", "Aligned (8) and unaligned (10) inputs, each replayed twice in "
             "separate batches: aligned replays are full-input rewinds keeping n - P; unaligned ones reuse "
             "floor(n/P) pages.", ["CR-PLAN-2", "CR-PLAN-3", "CR-PUB-4"],
             [user("abcdefgh"), user("abcdefgh"), user("abcdefgh"), user("ijklmnopqr"), user("ijklmnopqr"),
              user("ijklmnopqr")]),
        case("sections/plan/first-miss-stops", "Cache holds abcdefghijkl; abcdXXXXijklm matches one page: lookup "
             "stops at the first missing page.", ["CR-PLAN-1"],
             [user("abcdefghijkl"), user("abcdXXXXijklm"), user("abcdefghXXXXm")]),
        case("sections/plan/one-page-rewind", "A one-page input replayed: matched 4, reused 0, still a hit "
             "(full_input_rewind).", ["CR-PLAN-2", "CR-MET-2"], [user("abcd"), user("abcd")]),
    ]
    return out


def media_cases() -> list[dict]:
    wide = image("img_a_16x64.png")  # 4 placeholders
    return [
        case("sections/media/trim-split", "ab + A (4 placeholders at 2-5) + cd, replayed: the rewind to 4 would "
             "split A at positions 3|4, so the plan gives back the page: nothing is reused.",
             ["CR-MEDIA-3", "CR-MEDIA-4", "CR-MEDIA-5"], [user("ab", wide, "cd"), user("ab", wide, "cd")],
             engine=VISION4, expect={"requests": [MISS, MISS]}),
        case("sections/media/trim-offsets", "A 4-placeholder image starting at offsets 0 to 4 of a P = 4 page, "
             "then a request with the same lead and image but another text right after it: the match ends at "
             "the page boundary after page 0 or 1, which splits the image for offsets 1-3 (reuse drops to 0) and "
             "not for offsets 0 and 4.",
             ["CR-MEDIA-3", "CR-MEDIA-4", "CR-MEDIA-5"],
             [r for lead in ("", "a", "ab", "abc", "abcd")
              for r in (user(*([lead] if lead else []), wide, "efghijklm"), user(*([lead] if lead else []), wide, "XYZ"))],
             engine=dict(VISION4, maxKVPoolPages=40),
             expect={"requests": [MISS, fact("standard", 4), MISS, MISS, MISS, MISS, MISS, MISS, MISS,
                                  fact("standard", 8)]}),
        case("sections/media/restated-no-trim", "abc + A (1 placeholder) + defg, replayed: the rewind to 4 is "
             "between A and d, nothing is trimmed, yet a media-aware plan is restated: standard, matched 4.",
             ["CR-MEDIA-4"], [user("abc", image("img_a_16x16.png"), "defg"),
                              user("abc", image("img_a_16x16.png"), "defg")], engine=VISION4,
             expect={"requests": [MISS, fact("standard", 4)]}),
        case("sections/media/adjacent-boundary", "ab + A (2 placeholders at 2-3) + B (4 at 4-7) + cdefgh, then "
             "the same with C in place of B: the match ends at 4, between A and C, which splits neither item, so "
             "the page is kept (standard, reused 4). Under edge-llm-0.10 A and B are one run carrying A's "
             "digest, and so are A and C: every page of the second request equals the first's, 3 of its 14 "
             "positions' pages match (standard, reused 12; positions 11 and 12 are text, no trim), and it reuses "
             "KV computed for B in place of C, so its outputs are not the bypass run's (not compared).",
             ["CR-MEDIA-3", "CR-ID-4"],
             [user("ab", image("img_t_16x32.png"), image("img_a_32x32.png"), "cdefgh"),
              user("ab", image("img_t_16x32.png"), image("img_a_16x64.png"), "cdefgh")], engine=VISION4,
             expect={"requests": [MISS, fact("standard", 4)]},
             profile_expect={"edge-llm-0.10": {"requests": [MISS, fact("standard", 12)]}}),
        case("sections/media/one-page-rewind", "A one-page media input replayed: r = 0 before trimming, so the "
             "plan is not restated and stays a full_input_rewind with matched = P.",
             ["CR-MEDIA-4", "CR-PLAN-2"], [user("abc", image("img_a_16x16.png")),
                                           user("abc", image("img_a_16x16.png"))], engine=VISION4,
             expect={"requests": [MISS, fact("full_input_rewind", 4, 0)]}),
        case("sections/media/jpeg-exif-orientation", "ab + JPEG A (32x48: 6 placeholders at 2-7) + cd, then the "
             "same JPEG with an EXIF orientation of 6 (rotate 90 degrees) added: orientation is not applied "
             "(spec/tokenizer.md section 3, as stb_image), so the second image has A's pixels and geometry and is "
             "the same item; n = 2 + 6 + 2 = 10 each, and the replay reuses the two full pages 0-7 (the image "
             "whole; page 2 holds the first request's generated tokens): standard, matched 8. A loader that "
             "applies the orientation decodes a 48x32 picture, another item, and reuses only page 0 less the "
             "image (nothing).", ["CR-ID-4", "CR-MEDIA-3"],
             [user("ab", image("img_j_a_32x48.jpg"), "cd"), user("ab", image("img_j_a_32x48_exif6.jpg"), "cd")],
             engine=VISION4, expect={"requests": [MISS, fact("standard", 8)]}),
        case("sections/media/jpeg-fill-bytes", "JPEG A, then the same JPEG with three 0xFF fill bytes before each "
             "marker (ITU T.81 B.1.1.2: any number may precede a marker, and decoders skip them): accepted, the "
             "same pixels, the same item; the replay reuses pages 0-7 as in jpeg-exif-orientation (standard, "
             "matched 8). A parser that does not skip fill bytes refuses the file or misreads its frame header.",
             ["CR-ID-4", "CR-MEDIA-3"],
             [user("ab", image("img_j_a_32x48.jpg"), "cd"), user("ab", image("img_j_a_32x48_fill.jpg"), "cd")],
             engine=VISION4, expect={"requests": [MISS, fact("standard", 8)]}),
        case("sections/media/jpeg-comments", "JPEG A, then the same JPEG with two comment segments after APP0: "
             "an empty one (length 2, the least a segment may say: ITU T.81 B.1.1.4) and one of 300 bytes (length "
             "302 = 0x012E, whose high byte counts). Both are skipped: the same pixels, the same item; the replay "
             "reuses pages 0-7 as in jpeg-exif-orientation (standard, matched 8). A parser that refuses a length "
             "of 2, or reads the length from its low byte only (0x2E), refuses the file.", ["CR-ID-4", "CR-MEDIA-3"],
             [user("ab", image("img_j_a_32x48.jpg"), "cd"), user("ab", image("img_j_a_32x48_com.jpg"), "cd")],
             engine=VISION4, expect={"requests": [MISS, fact("standard", 8)]}),
        case("sections/media/jpeg-header-extremes", "The frame header's fields at their edges: a grey JPEG "
             "(one component) of 1 x 272 pixels, then a colour JPEG of 272 x 1 (the least side, and a side above "
             "255, whose two bytes both count). Placeholders are one per 16x16 patch: ceil(1/16) * ceil(272/16) = "
             "1 * 17 = 17 and 17 * 1 = 17, so ab + image + cd is n = 2 + 17 + 2 = 21 each. Each is sent twice: the "
             "replay reuses the five full pages 0-19 below n - 1 = 20 (the image at 2-18 whole; page 5 holds "
             "position 20 and the first request's generated tokens): standard, matched 20; the colour image after "
             "the grey one is another item from position 2, so page 0 differs: nothing. A parser that reads one "
             "byte of a side, refuses one component or a side of 1 refuses a file here.", ["CR-ID-4", "CR-MEDIA-3"],
             [user("ab", image("img_j_g_1x272.jpg"), "cd"), user("ab", image("img_j_g_1x272.jpg"), "cd"),
              user("ab", image("img_j_t_272x1.jpg"), "cd"), user("ab", image("img_j_t_272x1.jpg"), "cd")],
             engine=VISION4, expect={"requests": [dict(MISS, input_tokens=21), dict(fact("standard", 20), input_tokens=21),
                                                  dict(MISS, input_tokens=21), dict(fact("standard", 20), input_tokens=21)]}),
        case("sections/media/aware-under-bypass", "Media-aware sequences count under bypass as well.",
             ["CR-MEDIA-2", "CR-MET-3", "CR-POL-2"],
             [user("ab", image("img_a_16x16.png"), "cdefgh"), user("ab", image("img_a_16x16.png"), "cdefgh")],
             engine=VISION4, settings=dict(GREEDY, context_cache_lookup_policy="bypass")),
        case("sections/media/audio-outputs", "The same WAV clip twice, then another clip: reuse counts of audio "
             "requests are unspecified (UNSPECIFIED, not FAIL), but greedy outputs must equal the bypass replay.",
             ["CR-MEDIA-6", "CR-OUT-1"],
             [user("ab", audio("audio_a_16k.wav"), "cd"), user("ab", audio("audio_a_16k.wav"), "cd"),
              user("ab", audio("audio_c_16k.wav"), "cd")],
             engine=dict(TEXT4, audio=True, maxInputLen=40)),
    ]


def publication_cases() -> list[dict]:
    chat = dict(GREEDY, apply_chat_template=True, max_generate_length=6)
    conversation = [
        turns(("system", "Be brief."), ("user", "Name a colour.")),
        turns(("system", "Be brief."), ("user", "Name a colour."), ("assistant", "{{output:0}}"),
              ("user", "Another one?")),
        turns(("system", "Be brief."), ("user", "Name a colour."), ("assistant", "{{output:0}}"),
              ("user", "Another one?"), ("assistant", "{{output:1}}"), ("user", "And a third?")),
    ]
    return [
        case("sections/pub/multi-turn-including", "Three turns, each feeding the previous greedy answer back as "
             "an assistant message: under including_generated_tokens a turn reuses the pages of the previous "
             "turn's decode-end record, generated tokens included.",
             ["CR-PUB-2", "CR-BATCH-3", "CR-OUT-1"], conversation, settings=chat, engine=LONG4),
        case("sections/pub/multi-turn-prefill-only", "The same conversation under prefill_state_only: only "
             "prefill-end records exist, so each turn reuses at most the previous turn's input pages.",
             ["CR-PUB-3", "CR-PUB-1", "CR-OUT-1"], conversation, engine=LONG4,
             settings=dict(chat, context_cache_commit_policy="prefill_state_only")),
        case("sections/pub/decode-end-boundaries", "Inputs of 7, 8 and 9 tokens generating up to 6 tokens: the "
             "decode-end record holds floor((n + g - 1)/P) pages, crossing a page boundary or not.",
             ["CR-PUB-2", "CR-CAP-9"], [user("abcdefg"), user("abcdefgh"), user("abcdefghi")],
             settings=dict(GREEDY, max_generate_length=6)),
        case("sections/pub/failed-batch-keeps-records", "Batch 1 publishes; batch 2 is too long and fails as a "
             "whole; batch 3 still hits batch 1's record.",
             ["CR-PUB-7", "CR-CAP-8", "CR-BATCH-5"],
             [user("abcdefghij"), user("x" * 41), user("abcdefghijk")]),
        case("sections/pub/short-input", "Inputs shorter than a page publish nothing at prefill end and are not "
             "attempts; with generation they may publish at decode end.",
             ["CR-PUB-1", "CR-PUB-2", "CR-PUB-8"], [user("abc"), user("abc"), user("ab")],
             settings=dict(GREEDY, max_generate_length=3)),
    ]


def profile_presence_cases() -> list[dict]:
    """Behaviour of one semantics profile that no case reached (spec/profiles.md): edge-llm-0.10's
    merged media runs with two runs of two images, an item swapped inside a run, and its
    prefill section on a run with neither reuse nor --dumpProfile. Each holds in both profiles,
    with the counts of each derived by hand."""
    a, b, c, g = (image(f"img_{k}_16x16.png") for k in ("a", "b", "c", "g"))
    g = image("img_g_16x16_rgb.png")
    r0 = user("ab", a, b, "cd", c, g, "efgh")
    swapped_in_run2 = user("ab", a, b, "cd", g, c, "efgh")
    swapped_in_run1 = user("ab", a, c, "cd", c, g, "efgh")
    return [
        case("sections/media/merged-runs-two-by-two", "Two runs of two adjacent 16x16 images (one placeholder "
             "each), P = 4: r0 is a b A B | c d C G | e f g h (n = 12). r1 swaps the two images of the second run "
             "(G C), r2 swaps the second image of the first run (A C). Under kvconform-1 each image is its own item: "
             "r1 shares page 0 only (reused 4, no trim: position 3 is B and 4 is text), r2 nothing (page 0 holds C "
             "where r0 has B). Under edge-llm-0.10 each run is one item and the k-th run takes the k-th image's "
             "digest, so r0's second run is keyed as B, r1's as B too (its second image is still B): r1 matches all "
             "three pages and rewinds one (CR-PLAN-2), restated as a standard plan of 8 (CR-MEDIA-4); r2's "
             "second run is keyed as its second image, C: "
             "page 0 only (reused 4). A runtime that keys each run by its own first image gets r1 4 and r2 8.",
             ["CR-ID-4", "CR-MEDIA-1", "CR-MEDIA-4"], [r0, swapped_in_run2, swapped_in_run1], engine=VISION4,
             expect={"requests": [MISS, fact("standard", 4), MISS]},
             profile_expect={"edge-llm-0.10": {"requests": [MISS, fact("standard", 8), fact("standard", 4)]}}),
        case("sections/media/trim-over-other-pixels", "Batches of two, P = 4: aaa + T (the 32x16 image of "
             "img_t, 2 placeholders at 3-4) publishes page 0 [a a a T]; then aaa + T' (the 16x32 image of the same "
             "bytes) and aaa + T in one batch. Under kvconform-1 T' is another item: request 2 misses, request 3 "
             "matches page 0 and gives it back (positions 3 and 4 are one item, CR-MEDIA-3): reused 0. Under "
             "edge-llm-0.10 the key is the raw bytes, so both match page 0 and give it back, and both recompute it "
             "into the one shared page with their own pixels (CR-MEDIA-5): their outputs are not defined, and "
             "are not compared; their counts are.", ["CR-MEDIA-5", "CR-MEDIA-3", "CR-ID-4"],
             [user("aaa", image("img_t_32x16.png")), user("zzzz"), user("aaa", image("img_t_16x32.png")),
              user("aaa", image("img_t_32x16.png"))], engine=dict(VISION4, maxBatchSize=2),
             settings=dict(GREEDY, batch_size=2), expect={"requests": [MISS, MISS, MISS, MISS]}),
        case("sections/pol/reuse-off-without-dump-profile", "Neither --enableContextReuse nor --dumpProfile: the "
             "profile file has no context_cache section (CR-POL-6); under edge-llm-0.10 it still has the prefill "
             "section (0.10 writes it with every profile file, spec/profiles.md M8): abcdefgh twice, two prefill "
             "runs of 8 tokens each, nothing reused (kvconform-1 writes no prefill section without --dumpProfile).",
             ["CR-MET-12", "CR-POL-6"], [user("abcdefgh"), user("abcdefgh")], runtime={},
             profile_expect={"edge-llm-0.10": {"prefill": {"total_runs": 2, "reused_tokens": 0,
                                                           "computed_tokens": 16}}}),
    ]


def policy_cases() -> list[dict]:
    body = [user("abcdefghij"), turns(("user", "abcdefghij"), ("assistant", "{{output:0}}"), ("user", "klm")),
            user("abcdefghij")]
    out = []
    for lookup in ("use_cache", "bypass"):
        for commit in ("including_generated_tokens", "prefill_state_only"):
            out.append(case(
                f"sections/pol/{lookup}-{commit}".replace("_", "-"),
                f"lookup {lookup}, commit {commit}: a request, a continuation of its answer and a replay.",
                ["CR-POL-1", "CR-POL-5", "CR-POL-2" if lookup == "bypass" else "CR-PUB-2"], body,
                settings=dict(GREEDY, max_generate_length=5, context_cache_lookup_policy=lookup,
                              context_cache_commit_policy=commit)))
    out += [
        case("sections/pol/warmup-batching", "--warmup 2 with batches of 2: the first batch runs twice under "
             "bypass first (counted, never published, not in the prefill profile).",
             ["CR-POL-4", "CR-MET-1", "CR-MET-12"],
             [user("abcdefgh"), user("abcdefghij"), user("abcdefgh"), user("abcdefghij")],
             engine=dict(TEXT4, maxBatchSize=2), runtime=dict(REUSE, warmup=2),
             settings=dict(GREEDY, batch_size=2)),
        case("sections/pol/reuse-disabled-outputs", "Without --enableContextReuse: no context_cache section, "
             "prefill reuses nothing, outputs unchanged.", ["CR-POL-6", "CR-MET-12"],
             [user("abcdefghij"), user("abcdefghij")], runtime={"dumpProfile": True}),
        case("sections/pol/hidden-states-bypass", "Hidden-state output forces every request to bypass lookup.",
             ["CR-POL-3"], [user("abcdefgh"), user("abcdefgh")],
             runtime=dict(REUSE, outputHiddenStates=True)),
    ]
    return out


def capacity_cases() -> list[dict]:
    docs = [DOC[i:i + 12] for i in range(0, 48, 12)]
    small = {"maxInputLen": 16, "maxKVCacheCapacity": 24, "maxKVPoolPages": 0, "tokensPerPage": 4}
    out = [case(f"sections/cap/record-limit-{m}", f"--contextCacheMaxRecords {m}: every new record beyond {m} "
                f"evicts the least recently used one (M = 0: inserted and evicted at once); replays show which "
                f"prefixes survived.", ["CR-CAP-6", "CR-MET-8", "CR-MET-10"],
                [user(docs[k]) for k in (0, 0, 1, 0, 2, 2, 1, 0)],
                runtime=dict(REUSE, contextCacheMaxRecords=m)) for m in (0, 1, 3)]
    pool_engine = {"maxInputLen": 40, "maxKVCacheCapacity": 48, "maxKVPoolPages": 0, "tokensPerPage": 4}
    for name, description, rules in (
            ("cap/pool-fill", "One document more than the pool holds (documents of L complete pages, L about a "
             "quarter of the pool): the last admissions evict the least recently used records; the first "
             "document again misses, the last but one still hits. Built for each engine from its pool size.",
             ["CR-CAP-4", "CR-CAP-3", "CR-MET-8", "CR-MET-10"]),
            ("cap/hit-does-not-protect", "A full pool, then a request extending the least recently used "
             "document by a page: the planner evicts the very record that supplied the hit first (a vanilla hit "
             "neither touches nor protects it; evicting it frees nothing), then the next one; that one, asked "
             "again, misses. Built for each engine from its pool size.",
             ["CR-CAP-5", "CR-CAP-2", "CR-CAP-4"])):
        built, flags = scenarios.build(name, engine_from_build_args(pool_engine), REUSE)
        out.append(case(f"sections/{name}", description, rules, built.pop("requests"), engine=pool_engine,
                        runtime=flags, settings=built, scenario=name))
    out += [
        case("sections/cap/pool-pressure", "A pool of 10 pages at P = 4 (the minimum is 6): documents and their "
             "decode-end records compete for pages; admission and growth evict least recently used records.",
             ["CR-CAP-4", "CR-CAP-3", "CR-CAP-9", "CR-CAP-10"],
             [user(docs[0]), user(docs[1]), user(docs[0] + "xy"), user(docs[2]), user(docs[0]), user(docs[1])],
             engine=dict(small, maxKVPoolPages=10), settings=dict(GREEDY, max_generate_length=6)),
        case("sections/cap/pool-pressure-batch", "A batch of 2 on the minimum pool for batch size 2: the batch's "
             "own prefill-end records are evicted by its decode growth.",
             ["CR-CAP-4", "CR-CAP-9", "CR-BATCH-6"],
             [user(docs[0]), user(docs[1]), user(docs[0]), user(docs[2])],
             engine=dict(small, maxBatchSize=2), settings=dict(GREEDY, batch_size=2, max_generate_length=6)),
        case("sections/cap/hit-does-not-touch", "Records A then B; a hit on A does not make A recent, so the next "
             "eviction takes A first.", ["CR-CAP-5", "CR-CAP-4"],
             [user(docs[0]), user(docs[1]), user(docs[0] + "z"), user(docs[2] + docs[3][:2]), user(docs[0])],
             engine=dict(small, maxKVPoolPages=8)),
        case("sections/cap/pool-below-minimum", "A pool of 5 pages where batch size 1 and capacity 24 need 6: the "
             "build must refuse (and a runtime given such an engine must refuse it).",
             ["CR-CAP-1", "CR-SUP-3"], [user("abcd")], engine=dict(small, maxKVPoolPages=5)),
        case("sections/cap/runtime-pool-below-minimum", "The runtime's own start-up check: an engine built with the "
             "minimum pool of 6 pages (batch size 1, capacity 24, P = 4: 1 * ceil(24/4) = 6), handed to the runtime "
             "with a hand-written description of 5 pages (the build refuses 5, so only such a description reaches "
             "the runtime). With reuse on the deployment is refused at start-up (CR-SUP-3): no responses.",
             ["CR-SUP-3", "CR-CAP-1"], [user("abcd")], engine=dict(small, maxKVPoolPages=6),
             description_edits={"kv_pool_pages": 5}, expect={"rejected": {"rule": "CR-SUP-3"}}),
        case("sections/cap/runtime-pool-at-minimum", "An engine built with 7 pages, handed to the runtime with a "
             "hand-written description of 6, the CR-CAP-1 minimum (1 * ceil(24/4)): the deployment runs. abcdefgh "
             "commits 2 pages; its replay matches both and rewinds one (CR-PLAN-2): reused 4.",
             ["CR-SUP-3", "CR-CAP-1", "CR-PLAN-2"], [user("abcdefgh"), user("abcdefgh")],
             engine=dict(small, maxKVPoolPages=7), description_edits={"kv_pool_pages": 6},
             expect={"requests": [MISS, fact("full_input_rewind", 8, 4)]}),
    ]
    return out


def batching_cases() -> list[dict]:
    b3 = dict(TEXT4, maxBatchSize=3)
    sysp = "You are terse."
    return [
        case("sections/batch/identical-in-batch", "Two identical requests in one batch both miss; the first "
             "commits, the second publishes the same endpoint (existing). A third batch-mate differs.",
             ["CR-BATCH-2", "CR-PUB-4"], [user("abcdefgh"), user("abcdefgh"), user("abcdefghij"), user("abcdefgh")],
             engine=b3, settings=dict(GREEDY, batch_size=3)),
        case("sections/batch/shared-system-prompt", "Batches of 3 sharing a system prompt: the first batch misses, "
             "later batches reuse its pages.", ["CR-BATCH-3", "CR-BATCH-1"],
             [user(q, system=sysp) for q in ("one?", "two?", "three?", "four?", "five?", "six?")],
             engine=b3, settings=dict(GREEDY, batch_size=3, apply_chat_template=True)),
        case("sections/batch/size-flag-overrides-file", "The file says batch_size 1, --batchSize 2 overrides it.",
             ["CR-BATCH-1", "CR-BATCH-2"], [user("abcdefgh"), user("abcdefgh"), user("abcdefgh")],
             engine=b3, runtime=dict(REUSE, batchSize=2)),
        case("sections/batch/length-limits", "max_input_len 16, capacity 24, max_generate_length 8: 16 tokens "
             "run; 17 tokens fail their batch; the other batches run.", ["CR-BATCH-5", "CR-CAP-8"],
             [user("abcdefghijklmnop"), user("abcdefghijklmnopq"), user("abcdefghijklmnop")],
             engine={"maxInputLen": 16, "maxKVCacheCapacity": 24, "maxKVPoolPages": 0, "tokensPerPage": 4},
             settings=dict(GREEDY, max_generate_length=8)),
        case("sections/batch/generation-too-long", "n + max_generate_length above the capacity fails the batch "
             "before admission (the --maxGenerateLength flag overrides the file).",
             ["CR-BATCH-5", "CR-CAP-8"], [user("abcdefghijklmnop"), user("abcdefgh")],
             engine={"maxInputLen": 16, "maxKVCacheCapacity": 24, "maxKVPoolPages": 0, "tokensPerPage": 4},
             runtime=dict(REUSE, maxGenerateLength=9)),
        case("sections/batch/stop-strings", "Stop strings end generation (stop-words) and cut the text; "
             "decode-end records hold every generated token.", ["CR-BATCH-7", "CR-PUB-2"],
             [dict(user("abcdefgh"), stop=STOPS), dict(user("abcdefgh"), stop=STOPS), user("abcdefgh"),
              dict(user("abcdefghijk"), stop=["zz", "q"])], settings=dict(GREEDY, max_generate_length=8),
             requires=["feature:stop_strings"]),
    ]


def hybrid_cases() -> list[dict]:
    hyb = {"maxInputLen": 40, "maxKVCacheCapacity": 48, "maxKVPoolPages": 0, "tokensPerPage": 4, "model": "hybrid"}
    rec = dict(hyb, model="recurrent")
    chat = dict(GREEDY, apply_chat_template=True, max_generate_length=5)
    talk = [turns(("user", "hello there")), turns(("user", "hello there"), ("assistant", "{{output:0}}"),
                                                  ("user", "and then?"))]
    return [
        case("sections/hyb/endpoints", "Hybrid: abcdefghij, abcdefghijkl (reuses exactly 10), abcdefghij again "
             "(cannot reuse its own endpoint: a shorter one or nothing), abcdefgh (no checkpoint at 8).",
             ["CR-HYB-3", "CR-HYB-5", "CR-HYB-6"],
             [user("abcdefghij"), user("abcdefghijkl"), user("abcdefghij"), user("abcdefgh")],
             engine=hyb, runtime=hybrid_runtime(hyb), settings=dict(GREEDY, context_cache_commit_policy="prefill_state_only")),
        case("sections/hyb/multi-turn", "Hybrid conversation: the second turn restores the first turn's decode-end "
             "checkpoint (input and generated tokens).", ["CR-HYB-3", "CR-HYB-5", "CR-PUB-2", "CR-OUT-1"],
             talk, engine=hyb, runtime=hybrid_runtime(hyb), settings=chat),
        case("sections/hyb/recurrent-multi-turn", "The same conversation on a pure recurrent model (no KV pages).",
             ["CR-HYB-3", "CR-HYB-5", "CR-OUT-1"], talk, engine=rec, runtime=hybrid_runtime(rec), settings=chat),
        case("sections/hyb/aligned-and-unaligned", "Checkpoints at L % P == 0 need no partial-KV slot, others "
             "need one: 8, 9, 12 and 13 tokens, each extended later.", ["CR-HYB-4", "CR-HYB-1"],
             [user("abcdefgh"), user("abcdefghi"), user("abcdefghijkl"), user("abcdefghijklm"),
              user("abcdefghijklmn"), user("abcdefghijkz")],
             engine=hyb, runtime=hybrid_runtime(hyb), settings=dict(GREEDY, context_cache_commit_policy="prefill_state_only")),
        case("sections/hyb/slot-pressure", "One recurrent and one partial-KV slot, batches of 2, prefill-end "
             "captures only: the second capture of a step cannot reserve a slot and is skipped; a later request "
             "restores the surviving checkpoint; an identical replay cannot use its own endpoint.",
             ["CR-HYB-4", "CR-HYB-6", "CR-CAP-4", "CR-MET-11"],
             [user("abcdefghij"), user("zyxwvutsrq"), user("abcdefghijkl"), user("abcdefghij"),
              user("zyxwvutsrqpo"), user("abcdefghijklmn")],
             engine=dict(hyb, maxBatchSize=2), runtime=hybrid_runtime(hyb, 1, 1),
             settings=dict(GREEDY, batch_size=2, context_cache_commit_policy="prefill_state_only")),
        case("sections/hyb/partial-page-identity", "A checkpoint is the exact identity of its whole prefix, the "
             "positions of its partial last page included: abcdefghij (checkpoint at 10), then abcdefghXY + zw "
             "(n = 12), which shares the complete pages [a-d][e-h] and the length 10 but not positions 8-9, so it "
             "reuses nothing; then abcdefghijzw reuses exactly 10.",
             ["CR-HYB-5", "CR-ID-1", "CR-HYB-3"],
             [user("abcdefghij"), user("abcdefghXYzw"), user("abcdefghijzw")],
             engine=hyb, runtime=hybrid_runtime(hyb),
             settings=dict(GREEDY, context_cache_commit_policy="prefill_state_only"),
             expect={"requests": [MISS, MISS, fact("standard", 10)]}),
    ]


def output_cases() -> list[dict]:
    long_doc = (DOC + " ") * 2
    return [
        case("sections/out/long-greedy", "A 64-token shared document with different questions, 8 greedy tokens "
             "each with 3 log-probabilities: reuse must not change tokens (CR-OUT-1) and log-probabilities stay "
             "within tolerance (CR-OUT-2).", ["CR-OUT-1", "CR-OUT-2"],
             [user(long_doc[:64] + q) for q in (" why?", " how?", " who?", " why?")],
             engine={"maxInputLen": 96, "maxKVCacheCapacity": 112, "maxKVPoolPages": 0, "tokensPerPage": 8}, settings=dict(GREEDY, max_generate_length=8, num_logprobs=3)),
        case("sections/out/poisoned-pool-pressure", "Fresh pages poisoned with NaN under pool pressure and a "
             "conversation: a read of a page the sequence does not own shows up as NaN or a changed token.",
             ["CR-OUT-3", "CR-OUT-1"],
             [user("abcdefghijkl"), turns(("user", "abcdefghijkl"), ("assistant", "{{output:0}}"), ("user", "m")),
              user("mnopqrstuvwx"), user("abcdefghijkl")],
             engine={"maxInputLen": 28, "maxKVCacheCapacity": 36, "maxKVPoolPages": 0, "tokensPerPage": 4},
             runtime=dict(REUSE, poisonFreshPages=True), settings=dict(GREEDY, max_generate_length=6)),
        case("sections/out/sampling-counters", "Non-greedy sampling: outputs are not compared, but decode-end "
             "records follow what the run generated, so counters are still exact.", ["CR-PUB-2", "CR-MET-7"],
             [user("abcdefghij"), user("abcdefghij")],
             settings={"apply_chat_template": False, "max_generate_length": 5, "temperature": 1.0, "top_k": 50}),
    ]


def negative_cases() -> list[dict]:
    def neg(cid, rules, requests, path, engine=TEXT4, settings=None, description=""):
        return case(f"sections/neg/{cid}", description, rules, requests, engine=engine, settings=settings,
                    negative={"phase": "parse", "path": path})
    return [
        neg("lora-not-available", ["CR-ID-3"], [user("abcd", lora="c")], "$.requests[0].lora_name",
            engine=dict(TEXT4, loraAdapters=["a"]), settings=dict(GREEDY, available_lora_weights={"a": "lora/a.safetensors"}),
            description="lora_name must name an adapter of available_lora_weights."),
        neg("video-item", ["CR-MEDIA-1"], [{"messages": [{"role": "user", "content": [
            {"type": "video", "frames": ["x.png"]}]}]}], "$.requests[0].messages[0].content[0].type",
            engine=VISION4, description="video items are an input error in bytes-v1."),
        neg("audio-8k", ["CR-MEDIA-6"], [user("ab", audio("bad_audio_8k.wav"))],
            "$.requests[0].messages[0].content[1].audio", engine=dict(TEXT4, audio=True),
            description="WAV audio must be 16 kHz mono 16-bit PCM."),
        neg("image-bomb", ["CR-ID-4"], [user("ab", image("bad_bomb.png"))],
            "$.requests[0].messages[0].content[1].image", engine=VISION4,
            description="A 100000x100000 header is refused before decoding."),
        neg("image-jpeg", ["CR-ID-4"], [user("ab", image("bad_arith.jpg"))],
            "$.requests[0].messages[0].content[1].image", engine=VISION4,
            description="An arithmetic-coded JPEG is refused from its frame header, as stb_image (Edge-LLM 0.10's "
                        "image loader) refuses it; baseline and progressive 8-bit JPEG are accepted."),
        neg("image-jpeg-no-frame", ["CR-ID-4"], [user("ab", image("bad_jpeg_no_frame.jpg"))],
            "$.requests[0].messages[0].content[1].image", engine=VISION4,
            description="A JPEG that ends after its APP0 segment (SOI, APP0, end of file) has no frame header: "
                        "refused. The marker walk stops where fewer than the 4 bytes of a marker and its length are "
                        "left; a walk that goes on reads past the end."),
        neg("image-jpeg-eoi-first", ["CR-ID-4"], [user("ab", image("bad_jpeg_eoi_first.jpg"))],
            "$.requests[0].messages[0].content[1].image", engine=VISION4,
            description="A JPEG whose end-of-image marker (EOI) follows its SOI, then JPEG A's segments: the image "
                        "ends before any frame header, so it is refused (stb_image: no frame before the marker that "
                        "ends the header; a walk that neither stops nor moves at EOI never ends)."),
        neg("image-jpeg-ff00-first", ["CR-ID-4"], [user("ab", image("bad_jpeg_ff00_first.jpg"))],
            "$.requests[0].messages[0].content[1].image", engine=VISION4,
            description="A JPEG with 0xFF 0x00 right after SOI, then JPEG A's segments: 0xFF 0x00 is a stuffed zero "
                        "byte, which belongs inside entropy-coded data; where a marker must be it is no marker "
                        "(stb_image: unknown marker), and read as a segment its length (0xFFE0) runs past the file: "
                        "refused. Pillow skips it, so a parser that skips it too accepts the file."),
        neg("image-jpeg-sof-cut", ["CR-ID-4"], [user("ab", image("bad_jpeg_sof_cut.jpg"))],
            "$.requests[0].messages[0].content[1].image", engine=VISION4,
            description="SOI and a baseline frame header whose length says 8 bytes of which the file holds 7 "
                        "(precision 8, height 32, width 48, then the file ends before the component count): the "
                        "segment runs past the end of the file, refused as truncated. A length check that lets one "
                        "missing byte through reads past the end."),
        neg("image-jpeg-sof-short", ["CR-ID-4"], [user("ab", image("bad_jpeg_sof_short.jpg"))],
            "$.requests[0].messages[0].content[1].image", engine=VISION4,
            description="SOI and a baseline frame header whose length says 7: the length counts itself (2), the "
                        "precision (1), height (2), width (2) and component count (1), 8 at least, so the frame "
                        "header is truncated: refused. Read as a frame, its component count would be the byte after "
                        "the segment, past the end of this file."),
        neg("image-jpeg-cmyk", ["CR-ID-4"], [user("ab", image("bad_jpeg_cmyk_ids.jpg"))],
            "$.requests[0].messages[0].content[1].image", engine=VISION4,
            description="A CMYK JPEG (4 components in its frame header) is refused from the header: stb_image takes "
                        "1 or 3 components. Its components are named 1 to 4 (as grey and colour files name theirs), "
                        "so a parser that reads the first component's id for the count sees 1 and accepts it."),
        neg("image-jpeg-truncated-data", ["CR-ID-4"], [user("ab", image("bad_truncated.jpg"))],
            "$.requests[0].messages[0].content[1].image", engine=VISION4,
            description="JPEG A cut after 300 bytes: its frame header (bytes 158-176) is whole, so the header "
                        "checks pass, but the image data does not decode: an input error, not a crash."),
        *(neg(f"template-{name}", ["TOK-HF-4"], [user("Hello")], "$.requests[0].messages", settings=dict(
            GREEDY, apply_chat_template=True), engine={"maxInputLen": 256, "maxKVCacheCapacity": 320, "maxKVPoolPages": 0,
                                                      "tokensPerPage": 16, "tokenizer": f"../../media/qwen3-bytes-{folder}",
                                                      "tokenizerLoader": "tokenizers-raw", **kwargs},
              description=f"A chat template is untrusted code, bounded in time, memory and output (TOK-HF-4, Bounds): "
                          f"{why}, so the request is refused (exit 2), never a crash or a hang.")
          for name, folder, kwargs, why in (
              ("memory-bound", "ballast", {"chatTemplateKwargs": {"ballast_bytes": 1_500_000_000}},
               "this one builds a string of 1,500,000,000 bytes (the keyword ballast_bytes, "
               "cases/media/qwen3-bytes-ballast), more than the 1 GiB a template may use"),
              ("recursion", "recursion", {},
               "this one calls a macro from itself without end (cases/media/qwen3-bytes-recursion): it raises "
               "(Python's recursion limit) and a template that raises is invalid"))),
        neg("image-without-vision", ["CR-MEDIA-1"], [user("ab", image("img_a_16x16.png"))],
            "$.requests[0].messages[0].content[1].image", description="A text engine cannot take an image."),
        neg("later-request-empty", ["CR-BATCH-5"], [user("abcd"), user("")], "$.requests[1].messages",
            description="An input of 0 tokens anywhere in the file refuses the whole file before anything runs."),
    ]


def catalogue_cases() -> list[dict]:
    """Cases added so that the suite catches every variant of the faulty-backend catalogue
    (faulty_backends/, `kvconform selftest`); each says which defect needs it."""
    import random
    b3 = dict(VISION4, maxBatchSize=3)
    birthday_engine = {"maxInputLen": 48, "maxKVCacheCapacity": 52, "maxKVPoolPages": 2700, "tokensPerPage": 4,
                       "maxBatchSize": 8}
    birthday, birthday_runtime = scenarios.build("id/distinct-pages-birthday",
                                                 engine_from_build_args(birthday_engine), REUSE)
    a, b = image("img_a_16x16.png"), image("img_b_16x64.png")
    return [
        case("sections/id/distinct-pages-birthday", "256 distinct 40-token inputs (2,560 distinct pages) in one "
             "cache with room for all of them: every request misses and commits a 10-page record, no page is "
             "shared. A digest too short to be collision resistant (CR-ID-6) is caught by the birthday bound "
             "without knowing the backend's hash: 2,560 keys collide under a 16-bit digest with probability "
             "1 - exp(-50), and a collision shows as a false hit, an existing publication, or a record that maps "
             "another prefix's page (the pool's free count).",
             ["CR-ID-6", "CR-ID-1", "CR-PUB-5", "CR-MET-9"], birthday.pop("requests"),
             engine=birthday_engine, runtime=birthday_runtime, settings=birthday,
             scenario="id/distinct-pages-birthday"),
        case("sections/media/aware-in-batch", "Batches of 3 mixing media-aware and text-only requests, then "
             "replays across batches: media_aware_sequences counts sequences (4), not batches.",
             ["CR-MET-3", "CR-MEDIA-2", "CR-BATCH-2"],
             [user("ab", a, "cdefgh"), user("ab", b, "cdefgh"), user("abcdefgh"),
              user("ab", a, "cdefgh"), user("xyzw"), user("ab", b, "cd")],
             engine=b3, settings=dict(GREEDY, batch_size=3)),
    ]


def tokenizer_cases() -> list[dict]:
    """Engines with a real tokenizer (spec/hf-tokenizer.md) and a runtime's media counter
    (spec/media-tokens.md): the oracle tokenizes with the engine's own files and loader."""
    tok = "../../../spec/tokenizers/"
    mini = {"maxInputLen": 1024, "maxKVCacheCapacity": 1280, "maxKVPoolPages": 0, "tokensPerPage": 16,
            "tokenizer": tok + "phi-3-mini"}
    vision = {"maxInputLen": 2048, "maxKVCacheCapacity": 2304, "maxKVPoolPages": 0, "tokensPerPage": 16,
              "tokenizer": tok + "phi-3-vision", "tokenizerLoader": "transformers-auto", "vision": True}
    chat = dict(GREEDY, apply_chat_template=True, max_generate_length=6)
    system = ("system", "You are helpful.")
    hello = turns(system, ("user", "Hello"))
    joke = turns(system, ("user", "Hello"), ("assistant", "{{output:0}}"), ("user", "Tell me a joke."))
    by_hand = ("By hand, request 0 is the worked example of TOK-HF-2: the rendered chat "
               "<|system|>\\nYou are helpful.<|end|>\\n<|user|>\\nHello<|end|>\\n<|assistant|>\\n is 10 ids "
               "under either loader.")
    ask = {"type": "text", "text": "\nWhat is shown?"}
    out = []
    for loader, rules in (("tokenizers-raw", ["TOK-HF-2", "TOK-HF-4", "TOK-HF-6", "TOK-HF-9", "CR-PUB-2"]),
                          ("transformers-auto", ["TOK-HF-3", "TOK-HF-2", "TOK-HF-4", "TOK-HF-6", "CR-PUB-2"])):
        out.append(case(f"sections/tok/phi3-mini-{loader}", f"Phi-3-mini's own tokenizer files under the {loader} "
                        "loader, chat template on: a system prompt and a question, a second turn that feeds the "
                        "answer back and asks for a joke (in a later turn the loaders differ in length: "
                        "'Tell' is 2 ids under transformers-auto, 1 under tokenizers-raw), then the first request "
                        "again. " + by_hand, rules, [hello, joke, hello], engine=dict(mini, tokenizerLoader=loader),
                        settings=chat, expect={"requests": [{"input_tokens": 10}, None, {"input_tokens": 10}]}))
    out += [
        case("sections/tok/template-off-joined", "Chat template off: the contents of all messages are joined and "
             "encoded once with no special tokens (TOK-HF-8), so 'ab' then 'cd' is 2 ids (Phi-3-mini, "
             "tokenizers-raw: 633 '▁ab', 2252 'cd'); list contents are flattened (TOK-HF-5); then a long shared "
             "document with two questions.", ["TOK-HF-8", "TOK-HF-5", "CR-PLAN-1"],
             [{"messages": [{"role": "user", "content": "ab"}, {"role": "user", "content": "cd"}]},
              user(DOC * 2, " why?"), user(DOC * 2, " and how?")], engine=mini,
             expect={"requests": [{"input_tokens": 2}, None, None]}),
        case("sections/tok/phi3-vision-images", "Phi-3-vision's tokenizer with its own image counter "
             "(hf/phi-3-vision, 4 crops): a 16x16 image becomes 2x2 crops of 336, (4 + 1)*144 + 1 + (2 + 1)*12 "
             "= 757 tokens (TOK-MEDIA-6), one run of <|image|> (TOK-HF-7); the same image again reuses the pages "
             "before the text, another image does not.", ["TOK-HF-7", "TOK-MEDIA-6", "TOK-MEDIA-1", "CR-ID-4"],
             [user(image("img_a_16x16.png"), ask), user(image("img_a_16x16.png"), ask),
              user(image("img_b_16x16.png"), ask)], engine=vision, settings=dict(GREEDY),
             expect={"requests": [{"input_tokens": 4 + 757}, {"input_tokens": 4 + 757}, {"input_tokens": 4 + 757}]}),
    ]
    out.append(case("sections/tok/profile-without-tokenizer-json", "A tokenizer folder with tokenizer_config.json "
                    "but no tokenizer.json is not an hf profile (TOK-HF-1): the build must refuse it.", ["TOK-HF-1"],
                    [user("Hello")], engine=dict(mini, tokenizer="../../media/tokenizer-config-only")))
    for counter, rules, tokens, why in (
            ("edge-llm/qwen-vl", ["TOK-MEDIA-3", "TOK-MEDIA-7"], 2,
             "Edge-LLM 0.10 rounds 70/28 = 2.5 half to even in integers (70 = 2 * 28 + 14, quotient 2 even): 56 x 28 "
             "pixels, (56/14)*(28/14)/4 = 2 tokens (0.7.0 rounded half away from zero: 84 x 28, 3 tokens)"),
            ("hf/qwen-vl", ["TOK-MEDIA-2", "TOK-MEDIA-7"], 2,
             "transformers rounds 70/28 = 2.5 half to even: 56 x 28 pixels, (56/14)*(28/14)/4 = 2 tokens")):
        settings = ({"min_image_tokens": 1, "max_image_tokens": 256} if counter.startswith("edge")
                    else {"min_pixels": 28 * 28, "max_pixels": 256 * 28 * 28})
        out.append(case(f"sections/tok/{counter.replace('/', '-')}-rounding", f"The image counter belongs to the "
                        f"runtime ({counter}, patch 14, merge 2): a 70 x 28 image; {why}. With the template off the "
                        f"prompt <|image|> What ▁is ▁shown ? is 4 ids besides the image (rstrip on <|image|> eats the "
                        f"newline): n = {4 + tokens}. A replay reuses nothing (one partial page).",
                        rules + ["CR-ID-4"],
                        [user(image("img_q_70x28.png"), ask), user(image("img_q_70x28.png"), ask)],
                        engine=dict(vision, imageCounter=counter, imageCounterSettings=settings),
                        settings=dict(GREEDY), expect={"requests": [{"input_tokens": 4 + tokens}] * 2}))
    for counter, rules, tokens, why in (
            ("edge-llm/qwen-vl", ["TOK-MEDIA-3"], 36,
             "Edge-LLM 0.10 clamps each side to one factor first: max(28, 0) = 28 and round(35.71) = 36 -> 1008; "
             "28 * 1008 = 28,224 lies in [3,136, 200,704]: (28/14)*(1008/14)/4 = 36 tokens"),
            ("hf/qwen-vl", ["TOK-MEDIA-2"], 20,
             "transformers rounds 10/28 to 0 and 1000/28 to 36: 0 * 1008 is below min_pixels 3,136, so "
             "beta = sqrt(3,136 / 10,000) = 0.56, ceil(5.6/28)*28 = 28 and ceil(560/28)*28 = 560: (28/14)*(560/14)/4 "
             "= 20 tokens")):
        settings = ({"min_image_tokens": 4, "max_image_tokens": 256} if counter.startswith("edge")
                    else {"min_pixels": 4 * 784, "max_pixels": 256 * 784})
        out.append(case(f"sections/tok/{counter.replace('/', '-')}-thin-side", f"A 10 x 1000 image under {counter} "
                        f"(patch 14, merge 2, bounds of 4 and 256 tokens): {why}. n = 4 + {tokens}.",
                        rules + ["TOK-MEDIA-1"], [user(image("img_k_10x1000.png"), ask)],
                        engine=dict(vision, imageCounter=counter, imageCounterSettings=settings),
                        settings=dict(GREEDY, max_generate_length=2),
                        expect={"requests": [{"input_tokens": 4 + tokens}]}))
    for counter, rules, settings, tokens, why in (
            ("edge-llm/internvl", ["TOK-MEDIA-5"], {"min_image_tokens": 256, "max_image_tokens": 1280}, 258,
             "Edge-LLM 0.10 adds no thumbnail to one block while the vision engine's minimum profile is one block "
             "(min_image_tokens 256): 2 + 256 * 1 (0.4 to 0.6 added one after every image: 514)"),
            ("hf/internvl", ["TOK-MEDIA-4"], {"min_patches": 1, "max_patches": 4}, 258,
             "transformers adds a thumbnail only to a grid of more than one tile: 2 + 256 * 1")):
        out.append(case(f"sections/tok/{counter.replace('/', '-')}-thumbnail", f"InternVL tiling under {counter}: a "
                        f"16x16 image takes a 1x1 grid of 448 tiles; {why} = {tokens} tokens. n = 4 + {tokens}.",
                        rules + ["TOK-MEDIA-1"], [user(image("img_a_16x16.png"), ask)],
                        engine=dict(vision, imageCounter=counter, imageCounterSettings=settings), settings=dict(GREEDY),
                        expect={"requests": [{"input_tokens": 4 + tokens}]}))
    return out


def template_and_emission_cases() -> list[dict]:
    """The request file's template switches and the tokens a sampler may emit, on the
    `qwen3-bytes` tokenizer (cases/media: Qwen3's chat template over one token per
    byte, specials <|endoftext|> 256, <|im_start|> 257, <|im_end|> 258 (the EOS), <think> 259,
    </think> 260), so every count is the rendered text's bytes plus its specials."""
    engine = {"maxInputLen": 256, "maxKVCacheCapacity": 320, "maxKVPoolPages": 0, "tokensPerPage": 16,
              "tokenizer": "../../media/qwen3-bytes", "tokenizerLoader": "tokenizers-raw"}
    chat = dict(GREEDY, apply_chat_template=True)
    hello = user("Hello")
    rendered = ("<|im_start|>user\\nHello<|im_end|>\\n is 1 + 10 + 1 + 1 = 13 ids; the generation prompt "
                "<|im_start|>assistant\\n adds 1 + 10 = 11")
    return [
        case("sections/tok/template-thinking-off", "The request file's enable_thinking (false) wins over the "
             "engine's chat_template_kwargs (true, TOK-HF-4): Qwen3's template then writes <think>\\n\\n</think>\\n"
             f"\\n after the generation prompt, 1 + 2 + 1 + 2 = 6 more ids. {rendered}: n = 13 + 11 + 6 = 30 (24 "
             "for a runtime that keeps the engine's keywords). The replay reuses the first page (16 ids).",
             ["TOK-HF-4", "TOK-HF-9", "CR-PLAN-1"], [hello, hello],
             engine=dict(engine, chatTemplateKwargs={"enable_thinking": True}),
             settings=dict(chat, enable_thinking=False),
             expect={"requests": [{"input_tokens": 30}, {"input_tokens": 30, "reused_tokens": 16}]}),
        case("sections/tok/template-no-generation-prompt", "add_generation_prompt false (the request file's switch, "
             f"TOK-HF-4): Qwen3's template stops after the last message. {rendered}: n = 13 (24 for a runtime that "
             "always adds the generation prompt); a second conversation that continues the first, "
             "<|im_start|>assistant\\nHi there<|im_end|>\\n (1 + 10 + 8 + 1 + 1 = 21) and "
             "<|im_start|>user\\nMore<|im_end|>\\n (1 + 5 + 4 + 1 + 1 = 12), is 13 + 21 + 12 = 46.",
             ["TOK-HF-4", "TOK-HF-9"],
             [hello, turns(("user", "Hello"), ("assistant", "Hi there"), ("user", "More"))], engine=engine,
             settings=dict(chat, add_generation_prompt=False),
             expect={"requests": [{"input_tokens": 13}, {"input_tokens": 46}]}),
        case("sections/tok/template-final-assistant", "A conversation that ends with an assistant message, with "
             "the generation prompt on (the default): transformers renders the generation prompt after any last "
             "message, so it is still appended (TOK-HF-4). <|im_start|>user\\nHello<|im_end|>\\n is 13 ids; Qwen3's "
             "template gives the final assistant turn (after the last user query) an empty think block: "
             "<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\nHi there<|im_end|>\\n is 1 + 10 + 1 + 2 + 1 + 2 + 8 + 1 "
             "+ 1 = 27; the generation prompt <|im_start|>assistant\\n adds 11: n = 13 + 27 + 11 = 51 (40 for a "
             "runtime that drops the generation prompt after an assistant message). The replay reuses the three "
             "full pages (48 ids).", ["TOK-HF-4", "TOK-HF-9", "CR-PLAN-1"],
             [turns(("user", "Hello"), ("assistant", "Hi there")), turns(("user", "Hello"), ("assistant", "Hi there"))],
             engine=engine, settings=chat,
             expect={"requests": [{"input_tokens": 51}, {"input_tokens": 51, "reused_tokens": 48}]}),
        case("sections/tok/template-indented-blocks", "The qwen3-bytes tokenizer with a ChatML template whose block "
             "tags are indented four spaces (cases/media/qwen3-bytes-indented/chat_template.jinja): transformers "
             "renders with trim_blocks and lstrip_blocks, so each tag line vanishes whole (TOK-HF-4). "
             "<|im_start|>user\\nHello<|im_end|>\\n (13) + the generation prompt (11) is 24; the second "
             "conversation adds <|im_start|>assistant\\nHi there<|im_end|>\\n (21) and <|im_start|>user\\nMore"
             "<|im_end|>\\n (12): 13 + 21 + 12 + 11 = 57. Without lstrip_blocks the four spaces before the if and "
             "endif tags stay, 8 more ids per message: 32 and 81.", ["TOK-HF-4", "TOK-HF-9"],
             [hello, turns(("user", "Hello"), ("assistant", "Hi there"), ("user", "More"))],
             engine=dict(engine, tokenizer="../../media/qwen3-bytes-indented"), settings=chat,
             expect={"requests": [{"input_tokens": 24}, {"input_tokens": 57}]}),
        case("sections/tok/template-two-keyword-sets", "One runtime instance renders the same conversation under "
             "two keyword sets: request file 0 with the engine's enable_thinking (true), request file 1 with the "
             "file's enable_thinking false (_policy_switch names the settings batch 1 runs under). "
             f"{rendered}: n = 24, then 24 + 6 = 30 (<think>\\n\\n</think>\\n\\n after the generation prompt); a "
             "runtime whose rendering memo ignores the keywords answers the second from the first: 24. The second "
             "reuses the first page (16 ids).", ["TOK-HF-4", "TOK-HF-9", "CR-BATCH-3"], [hello, hello],
             engine=dict(engine, chatTemplateKwargs={"enable_thinking": True}),
             settings=dict(chat, _policy_switch={"batch": 1, "enable_thinking": False})),
        case("sections/tok/template-environment", "A template that prints each user message with tojson, ends "
             "each message with the config's eos_token and wraps assistant contents in a {% generation %} block "
             "(cases/media/qwen3-bytes-features/chat_template.jinja). transformers' tojson is json.dumps with "
             "ensure_ascii=False and the keys in the mapping's order; the config's named special tokens are "
             "variables; the generation block renders its body unchanged (TOK-HF-4). Request 0: <|im_start|> + "
             "{\"role\": \"user\", \"content\": \"Grüße\"} (29 + 7 + 2 = 38 bytes: ü and ß are 2 each) + "
             "<|im_end|> + \\n, then the generation prompt <|im_start|>assistant\\n (11): 1 + 38 + 1 + 1 + 11 = 52. "
             "Request 1 with Hallo: 1 + 36 + 1 + 1 + 11 = 50; it shares <|im_start|>{\"role\": \"user\", "
             "\"content\": \" (30 ids) with request 0, so it reuses page 0 (16 ids). Request 2 (Grüße, assistant "
             "Hi, Hallo): 41 + <|im_start|>assistant\\nHi<|im_end|>\\n (15) + 39 + 11 = 106. ASCII escapes "
             "(\\u00fc\\u00df) give 60 for request 0; sorted keys put content first, sharing 14 ids: nothing "
             "reused; without the eos_token variable each message is one id shorter (51); a generation block that "
             "is not closed by endgeneration does not compile.", ["TOK-HF-4", "TOK-HF-9", "CR-PLAN-1"],
             [user("Grüße"), user("Hallo"), turns(("user", "Grüße"), ("assistant", "Hi"), ("user", "Hallo"))],
             engine=dict(engine, tokenizer="../../media/qwen3-bytes-features"), settings=chat,
             expect={"requests": [{"input_tokens": 52}, {"input_tokens": 50, "reused_tokens": 16},
                                  {"input_tokens": 106}]}),
        case("sections/tok/template-named-default", "A tokenizer_config.json whose chat_template is a list of "
             "named templates, tool_use first and default second, with no chat_template.jinja "
             "(cases/media/qwen3-bytes-named): transformers renders the one named default (TOK-HF-4), here "
             f"ChatML: {rendered}: n = 24. The tool_use template adds a system turn, <|im_start|>system\\n# Tools"
             "\\n<|im_end|>\\n (1 + 7 + 8 + 1 + 1 = 18): 42 for a runtime that takes the first template.",
             ["TOK-HF-4", "TOK-HF-9"], [hello],
             engine=dict(engine, tokenizer="../../media/qwen3-bytes-named"), settings=chat,
             expect={"requests": [{"input_tokens": 24}]}),
        case("sections/tok/template-source-1mib", "A chat template of exactly 1,048,576 bytes, the largest a "
             "template may be (TOK-HF-4, Bounds: larger than 1 MiB is refused): ChatML followed by a comment "
             "that fills it to the byte (cases/media/qwen3-bytes-1mib). It is accepted and renders as ChatML: "
             f"{rendered}: n = 24. A runtime whose bound is below 1 MiB, or that refuses a source of exactly "
             "1 MiB, refuses the file.", ["TOK-HF-4", "TOK-HF-9"], [hello],
             engine=dict(engine, tokenizer="../../media/qwen3-bytes-1mib"), settings=chat,
             expect={"requests": [{"input_tokens": 24}]}),
        case("sections/tok/template-memory-within", "A template that builds a string of 600,000,000 bytes (the "
             "keyword ballast_bytes, cases/media/qwen3-bytes-ballast) before it renders ChatML: within the 1 GiB "
             "a template may use (TOK-HF-4, Bounds), so it renders: " + rendered + ": n = 24. A runtime that "
             "gives templates 512 MiB refuses the file.", ["TOK-HF-4", "TOK-HF-9"], [hello],
             engine=dict(engine, tokenizer="../../media/qwen3-bytes-ballast",
                         chatTemplateKwargs={"ballast_bytes": 600_000_000}), settings=chat,
             expect={"requests": [{"input_tokens": 24}]}),
        case("sections/tok/special-token-bias", "A logit bias of +100 on <think> (259, the file's) and on "
             "<|im_start|> (257, request 1's own) leaves both unemitted: the engine emits only its normal tokens "
             "and the EOS (spec/engine.md section 5, Emission), and the bias is added before that mask, so the "
             "greedy answers are the float64 reference's under the same mask. Request 0 is <|im_start|>user\\nHello"
             "<|im_end|>\\n<|im_start|>assistant\\n, 13 + 11 = 24 ids; request 1 feeds its answer back and asks "
             "again, so a special token in the answer would also be in the next prompt's ids.",
             ["TOK-HF-9", "CR-OUT-1", "CR-OUT-2"],
             [hello, dict(turns(("user", "Hello"), ("assistant", "{{output:0}}"), ("user", "Why?")),
                          logit_bias={"257": 100})],
             engine=engine, settings=dict(chat, max_generate_length=6, logit_bias={"259": 100}),
             expect={"requests": [{"input_tokens": 24}, None]}),
    ]


def counter_bound_cases() -> list[dict]:
    """Images at each comparison bound of every image counter and one step each side
    (spec/media-tokens.md): a counter that compares with >= where its runtime compares with >,
    or that reserves no thumbnail tile, counts one of them differently. Every count is derived
    by hand in the case's description; the prompt adds 4 ids (<|image|> What ▁is ▁shown ?)."""
    vision = {"maxInputLen": 2048, "maxKVCacheCapacity": 2304, "maxKVPoolPages": 0, "tokensPerPage": 16,
              "tokenizer": "../../../spec/tokenizers/phi-3-vision", "tokenizerLoader": "transformers-auto",
              "vision": True}
    ask = {"type": "text", "text": "\nWhat is shown?"}
    one = dict(GREEDY, max_generate_length=1)
    qwen = [  # (h, w, tokens, derivation) with min_pixels 4 * 784 = 3,136 and max_pixels 16 * 784 = 12,544
        (40, 60, 6, "40 x 60 rounds to 28 x 56 = 1,568, below min_pixels: beta = sqrt(3,136 / 2,400) = 1.14310, "
                    "ceil(45.72/28) = 2 and ceil(68.59/28) = 3: 56 x 84, 4 * 6 / 4 = 6"),
        (50, 60, 4, "50 x 60 rounds to 56 x 56 = 3,136, equal to min_pixels and so not grown: 4 * 4 / 4 = 4"),
        (50, 90, 6, "50 x 90 rounds to 56 x 84 = 4,704: 4 * 6 / 4 = 6"),
        (110, 90, 12, "110 x 90 rounds to 112 x 84 = 9,408: 8 * 6 / 4 = 12"),
        (110, 114, 16, "110 x 114 rounds to 112 x 112 = 12,544, equal to max_pixels and so not shrunk: "
                       "8 * 8 / 4 = 16"),
        (110, 130, 12, "110 x 130 rounds to 112 x 140 = 15,680, above max_pixels: beta = sqrt(14,300 / 12,544) = "
                       "1.06771, floor(103.02/28) = 3 and floor(121.76/28) = 4: 84 x 112, 6 * 8 / 4 = 12"),
    ]
    aspect = {  # the aspect bound: 200 is not above 200; h = 2 rounds to 0, which only Edge-LLM clamps
        "edge": [(2, 399, 14, "2 x 399 (aspect 199.5): max(28, 0) = 28 and round(14.25) = 14: 28 x 392 = 10,976, "
                              "2 * 28 / 4 = 14"),
                 (2, 400, 14, "2 x 400 (aspect 200, not above 200): 28 x 392, 14")],
        "hf": [(2, 399, 29, "2 x 399 (aspect 199.5): 0 x 392 is below min_pixels: beta = sqrt(3,136 / 798) = "
                            "1.98236, ceil(3.96/28) = 1 and ceil(790.96/28) = 29: 28 x 812, 2 * 58 / 4 = 29"),
               (2, 400, 29, "2 x 400 (aspect 200, not above 200): beta = 1.97990, ceil(3.96/28) = 1, "
                            "ceil(791.96/28) = 29: 28 x 812, 29")],
    }
    internvl = [  # tiles 2 .. 5: Edge-LLM from 768 and 1536 tokens (3 - 1, 6 - 1), transformers as set
        (16, 16, 1282, "1:1 wants 1x1, below 2 tiles: 2x2 (difference 0): 2 + 256 * (4 + 1) = 1282"),
        (16, 32, 770, "2:1 takes 2x1, at the minimum: 2 + 256 * (2 + 1) = 770"),
        (16, 48, 1026, "3:1 takes 3x1: 2 + 256 * 4 = 1026"),
        (16, 64, 1282, "4:1 takes 4x1: 2 + 256 * 5 = 1282"),
        (16, 80, 1538, "5:1 takes 5x1, at the maximum: 2 + 256 * 6 = 1538"),
        (16, 96, 1538, "6:1 would take 6x1, one tile beyond the maximum (Edge-LLM's sixth block is the thumbnail's): "
                       "5x1 is the closest, 1538"),
    ]
    phi = [  # num_crops 4: the largest s with s * ceil(s / ratio) <= 4
        (16, 63, 601, "16 x 63 (ratio 3.9375): s = 4 needs 4 * ceil(1.016) = 8 > 4, so s = 3: width 1008, height "
                      "int(256.0) = 256 -> 336, 1x3 crops: (3 + 1) * 144 + 1 + (1 + 1) * 12 = 601"),
        (16, 64, 745, "16 x 64 (ratio 4): s = 4 (4 * ceil(1) = 4, equal to num_crops), 5 * ceil(1.25) = 10: width "
                      "1344, height 336, 1x4 crops: (4 + 1) * 144 + 1 + 2 * 12 = 745"),
        (16, 65, 745, "16 x 65 (ratio 4.0625): s = 4 (4 * ceil(0.985) = 4): width 1344, height int(330.8) = 330 -> "
                      "336, 1x4: 745"),
    ]
    table = [
        ("hf/qwen-vl", {"min_pixels": 4 * 784, "max_pixels": 16 * 784}, ["TOK-MEDIA-2"], qwen + aspect["hf"]),
        ("vllm/qwen-vl", {"min_pixels": 4 * 784, "max_pixels": 16 * 784}, ["TOK-MEDIA-2"], qwen + aspect["hf"]),
        ("edge-llm/qwen-vl", {"min_image_tokens": 4, "max_image_tokens": 16}, ["TOK-MEDIA-3"], qwen + aspect["edge"]),
        ("hf/internvl", {"min_patches": 2, "max_patches": 5}, ["TOK-MEDIA-4"], internvl),
        ("edge-llm/internvl", {"min_image_tokens": 768, "max_image_tokens": 1536}, ["TOK-MEDIA-5"], internvl),
        ("hf/phi-3-vision", {"num_crops": 4}, ["TOK-MEDIA-6"], phi),
    ]
    out = []
    for counter, settings, rules, rows in table:
        engine = dict(vision, imageCounter=counter, imageCounterSettings=settings)
        shown = ", ".join(f"{k} {v}" for k, v in settings.items())
        out.append(case(f"sections/tok/bounds-{counter.replace('/', '-')}", f"{counter} ({shown}) at its comparison "
                        "bounds and one step each side, one image per request: " + "; ".join(r[3] for r in rows)
                        + ". Each n is 4 more.", rules + ["TOK-MEDIA-1", "TOK-MEDIA-7"],
                        [user(image(f"img_k_{h}x{w}.png"), ask) for h, w, _, _ in rows], engine=engine, settings=one,
                        expect={"requests": [{"input_tokens": 4 + t} for _, _, t, _ in rows]}))
    for counter, settings, rule in (
            ("hf/qwen-vl", {"min_pixels": 4 * 784, "max_pixels": 16 * 784}, "TOK-MEDIA-2"),
            ("edge-llm/qwen-vl", {"min_image_tokens": 4, "max_image_tokens": 16}, "TOK-MEDIA-3")):
        out.append(case(f"sections/neg/aspect-limit-{counter.replace('/', '-')}", f"A 2 x 401 image has aspect 200.5, "
                        f"above 200: {counter} refuses it (Edge-LLM 0.10 divides as real numbers too; 0.7.0's integer "
                        "401 div 2 = 200 let it pass).", [rule, "TOK-MEDIA-1"],
                        [user(image("img_k_2x401.png", up=2), ask)], engine=dict(vision, imageCounter=counter,
                                                                                imageCounterSettings=settings),
                        settings=one,
                        negative={"phase": "parse", "path": "$.requests[0].messages[0].content[0].image"}))
    return out


def large_image_cases() -> list[dict]:
    """Large images that each image counter resizes, so that the numerical reference checks the
    encoder rows of millions of samples (spec/engine.md section 5: their resampling positions
    must be exact). The counts are derived by hand in each description."""
    vision = {"maxInputLen": 2048, "maxKVCacheCapacity": 2304, "maxKVPoolPages": 0, "tokensPerPage": 16,
              "tokenizer": "../../../spec/tokenizers/phi-3-vision", "tokenizerLoader": "transformers-auto",
              "vision": True}
    ask = {"type": "text", "text": "\nWhat is shown?"}
    qwen = ("900 x 912 image (2,462,400 samples): 900 = 32 * 28 + 4 rounds to 896, 912 = 32 * 28 + 16 to 924; "
            "896 * 924 = 827,904 is above max_pixels 256 * 784 = 200,704, so beta = sqrt(820,800 / 200,704) = "
            "2.02228, 900 / beta = 445.04 -> 15 * 28 = 420, 912 / beta = 450.98 -> 16 * 28 = 448: (420/14) * "
            "(448/14) / 4 = 240 tokens")
    internvl = ("448 x 2240 image (3,010,560 samples), aspect 5: among grids of at most 4 tiles 4x1 is closest "
                "(|5 - 4| = 1), so the image is resized to 1792 x 448 and a thumbnail added: 2 + 256 * (4 + 1) = "
                "1282 tokens")
    table = (
        ("edge-llm/qwen-vl", {"min_image_tokens": 4, "max_image_tokens": 256}, "img_l_900x912.png", 240,
         ["TOK-MEDIA-3"], qwen),
        ("hf/qwen-vl", {"min_pixels": 4 * 784, "max_pixels": 256 * 784}, "img_l_900x912.png", 240,
         ["TOK-MEDIA-2"], qwen),
        ("vllm/qwen-vl", {"min_pixels": 4 * 784, "max_pixels": 256 * 784}, "img_l_900x912.png", 240,
         ["TOK-MEDIA-2"], qwen),
        ("edge-llm/internvl", {"min_image_tokens": 256, "max_image_tokens": 1280}, "img_l_448x2240.png", 1282,
         ["TOK-MEDIA-5"], internvl + " (tiles 1 .. 1280 div 256 - 1 = 4)"),
        ("hf/internvl", {"min_patches": 1, "max_patches": 4}, "img_l_448x2240.png", 1282, ["TOK-MEDIA-4"],
         internvl),
        ("hf/phi-3-vision", {"num_crops": 4}, "img_l_600x800.png", 757, ["TOK-MEDIA-6"],
         "600 x 800 image (1,440,000 samples), ratio 4/3: s = 2 (2 * ceil(1.5) = 4 <= 4 crops), 672 x 504 "
         "padded to 672 x 672, 2x2 crops: (4 + 1) * 144 + 1 + (2 + 1) * 12 = 757 tokens"),
    )
    return [case(f"sections/tok/large-image-{counter.replace('/', '-')}", f"A large image under {counter}: a "
                 f"{why}. With the template off the prompt adds 4 ids (<|image|> What ▁is ▁shown ?): n = "
                 f"{4 + tokens}. Greedy outputs are checked against the float64 reference, which reads the "
                 "encoder rows of the resized image's samples.", rules + ["TOK-MEDIA-1", "CR-OUT-1", "CR-OUT-2"],
                 [user(image(name), ask)], engine=dict(vision, imageCounter=counter, imageCounterSettings=settings),
                 settings=dict(GREEDY), expect={"requests": [{"input_tokens": 4 + tokens}]})
            for counter, settings, name, tokens, rules, why in table]


def reach_cases() -> list[dict]:
    """Cases that stand on boundaries the other cases missed, each found by a faulty backend
    written outside the project that the default run let through (faulty_backends/
    boundaries.py has one variant per class)."""
    hyb = {"maxInputLen": 40, "maxKVCacheCapacity": 48, "maxKVPoolPages": 0, "tokensPerPage": 4, "model": "hybrid",
           "loraAdapters": ["a"]}
    q = image("img_q_70x28.png")
    including = dict(GREEDY, max_generate_length=10, context_cache_commit_policy="including_generated_tokens")
    return [
        case("sections/hyb/lora-sub-page-checkpoint", "A hybrid checkpoint shorter than one page (abc, L = 3 < P = "
             "4) has no complete page to chain the adapter through, so its exact-length key must carry the adapter "
             "itself: abc under adapter a, then abcdef without an adapter reuses nothing (a key without the "
             "adapter restores a's recurrent state: reused 3), then abcdef under a reuses exactly 3.",
             ["CR-ID-3", "CR-HYB-5"],
             [user("abc", lora="a"), user("abcdef"), user("abcdef", lora="a")],
             engine=hyb, runtime=hybrid_runtime(hyb),
             settings=dict(GREEDY, context_cache_commit_policy="prefill_state_only",
                           available_lora_weights={"a": "lora/a.safetensors"}),
             expect={"requests": [MISS, MISS, fact("standard", 3)]}),
        case("sections/media/trim-repeats", "The media trim repeats: ab + Q (70x28: 5 x 2 = 10 placeholders at "
             "positions 2-11) is n = 12, three pages [a b Q Q][Q Q Q Q][Q Q Q Q]. Its replay matches all three and "
             "rewinds to r = 8 (CR-PLAN-2); positions 7 and 8 are both Q, so r := 4; positions 3 and 4 are both Q, "
             "so r := 0: nothing is reused (a trim that gives back one page only reuses 4).",
             ["CR-MEDIA-3", "CR-MEDIA-4", "CR-PLAN-2"],
             [user("ab", q), user("ab", q)], engine=VISION4,
             expect={"requests": [MISS, MISS]}),
        case("sections/pub/stop-string-decode-end", "Sequences that end on a stop string publish at decode end like "
             "any other finish (CR-PUB-2). Greedy, the bundled model continues `hello wor` (n = 9) with "
             "'LO\"}->Be` and `zyxwvut` (n = 7) with dg'LO6lkb8 (the float64 reference agrees), so the stops }- "
             "and 6l end them after 6 and 7 tokens: histories of 14 and 13 tokens, 3 pages each at decode end "
             "against 2 and 1 at prefill end. Each answer is then sent back: the follow-ups reuse the decode-end "
             "records' pages (the oracle counts them from the tokens the backend generated).",
             ["CR-PUB-2", "CR-PUB-1", "CR-OUT-1"],
             [dict(user("hello wor"), stop=["}-"]), dict(user("zyxwvut"), stop=["6l"]),
              user("hello wor{{output:0}}zz"), user("zyxwvut{{output:1}}zz")],
             engine=LONG4, settings=including),
    ]


def speculative_cases() -> list[dict]:
    """EAGLE3 decoding several tokens, so the draft head's proposals are verified over many steps
    and paired pages are published at decode end and fed back (the golden eagle-* cases generate
    one or two tokens). The oracle predicts their counts from the generated tokens."""
    eagle = dict(LONG4, specDecode="eagle")
    including = dict(GREEDY, max_generate_length=9, context_cache_commit_policy="including_generated_tokens")
    feedback = [user("abcdefghij"), turns(("user", "abcdefghij"), ("assistant", "{{output:0}}"), ("user", "klm")),
                user("abcdefghij")]
    return [
        case("sections/spec/decode-end-feedback", "EAGLE3, greedy, 9 generated tokens under "
             "including_generated_tokens: r0 publishes its prompt and answer as paired pages at decode end, r1 "
             "feeds the answer back and matches them (one page replayed), r2 replays r0's prompt. The counts "
             "depend on the generated tokens, so the oracle predicts them from the backend's output ids.",
             ["CR-SPEC-1", "CR-SPEC-2", "CR-SPEC-3", "CR-SPEC-4"], feedback, engine=eagle, settings=including),
        case("sections/spec/batched-pairs", "EAGLE3 with batches of 2: two paired sequences verify proposals "
             "side by side, each with its own draft pages; the second batch matches both records.",
             ["CR-SPEC-1", "CR-SPEC-4", "CR-SPEC-5", "CR-SPEC-6"],
             [user("abcdefghij"), user("abcdefgh"), user("abcdefghijk"), user("abcdefghi")],
             engine=dict(eagle, maxBatchSize=2), settings=dict(including, batch_size=2)),
        case("sections/spec/sampled-falls-back", "A sampled (non-greedy) EAGLE3 file decodes vanilla and matches "
             "base pages only (CR-SPEC-7); no replay is counted.", ["CR-SPEC-7", "CR-SPEC-3"],
             [user("abcdefghij"), user("abcdefghij")], engine=eagle,
             settings={"apply_chat_template": False, "max_generate_length": 4, "temperature": 0.8, "top_k": 5,
                       "seed": 3}),
    ]


def all_cases() -> dict[str, dict]:
    out = edge_llm_cases()
    for group in (identity_cases(), planning_cases(), media_cases(), publication_cases(), policy_cases(),
                  capacity_cases(), batching_cases(), hybrid_cases(), output_cases(), negative_cases(),
                  catalogue_cases(), profile_presence_cases(), tokenizer_cases(), template_and_emission_cases(),
                  counter_bound_cases(), large_image_cases(), reach_cases(), speculative_cases()):
        for doc in group:
            out[doc["_conformance"]["id"] + ".json"] = doc
    return out


GENERATED_BY = "tools/make_cases.py (edit the generator, then run python tools/make_cases.py; never this file)"
"""The marker every case file this tool writes carries first (`_generated_by`, spec/RUNNING.md
section 4): a test checks the committed files against what this tool writes, so a hand edit of
the JSON is reverted by the next run."""


def rendered() -> dict[str, str]:
    """{path under cases/: the file's text} of every case this tool writes."""
    return {rel: json.dumps({"_generated_by": GENERATED_BY, **doc}, indent=1) + "\n"
            for rel, doc in all_cases().items()}


def orphans(written: dict[str, str]) -> list[str]:
    """Committed files that carry this tool's marker but that it no longer writes."""
    out = []
    for path in sorted(CASES.rglob("*.json")):
        rel = str(path.relative_to(CASES))
        if rel not in written and '"_generated_by": "tools/make_cases.py' in path.read_text(errors="replace"):
            out.append(rel)
    return out


def main(argv: list[str]) -> int:
    check = "--check" in argv
    written = rendered()
    if check:
        stale = [rel for rel, text in written.items()
                 if not (CASES / rel).exists() or (CASES / rel).read_text() != text]
        for rel in stale:
            print(f"stale: cases/{rel} differs from what tools/make_cases.py writes: edit the generator "
                  f"(tools/make_cases.py), not the JSON, then run python tools/make_cases.py")
        for rel in orphans(written):
            print(f"orphan: cases/{rel} carries the tools/make_cases.py marker, but the generator no longer "
                  f"writes it: delete it, or give it back to the generator")
        return 1 if stale or orphans(written) else 0
    for rel, text in written.items():
        path = CASES / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    print(f"wrote {len(written)} cases under {CASES}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
