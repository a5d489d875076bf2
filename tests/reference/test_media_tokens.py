"""Media token counters per runtime (spec/media-tokens.md), against hand-derived examples.

Every expected value is derived in the comment above it from the rule text, not computed with
reference.media_tokens. factor = patch * merge = 28 unless stated.
"""
from pathlib import Path

import pytest

from reference import media_tokens as mt

VENDORED = Path(__file__).resolve().parents[2] / "spec" / "tokenizers"
# Edge-LLM token bounds equal to the vendored Qwen2.5-VL pixel bounds: 3136 / 28^2 = 4 and
# 12845056 / 28^2 = 16384.
EDGE_QWEN = {"min_image_tokens": 4, "max_image_tokens": 16384}
HF_QWEN = {"min_pixels": 3136, "max_pixels": 12845056}


# --- TOK-MEDIA-2 / TOK-MEDIA-3: Qwen-VL ------------------------------------------------

def test_halves_round_to_even_in_hf_and_in_edge_llm_0_10():
    # h = 70: 70 / 28 = 2.5 rounds to even 2 -> 56 in both (Python round; Edge-LLM 0.10's
    # integer roundByFactor: 70 = 2*28 + 14, 2*14 == 28 and q = 2 is even). w = 280 = 10 * 28.
    # 56*280 = 15680 lies within [3136, 12845056], so no branch applies.
    assert mt.qwen_vl_hf_resize(70, 280, 28, 3136, 12845056) == (56, 280)
    assert mt.qwen_vl_edge_llm_resize(70, 280, 28, 3136, 12845056) == (56, 280)
    # Tokens (56/14)*(280/14)/4 = 4*20/4 = 20 in both. 98 = 3*28 + 14 rounds up to even 4 -> 112.
    assert mt.qwen_vl_hf(70, 280, **HF_QWEN) == 20
    assert mt.qwen_vl_edge_llm(70, 280, **EDGE_QWEN) == 20
    assert mt.qwen_vl_edge_llm_resize(98, 280, 28, 3136, 12845056) == (112, 280)


def test_vllm_counter_is_hf():
    # vLLM imports transformers' smart_resize: the same 20 tokens for 70x280.
    assert mt.image_tokens("vllm/qwen-vl", 70, 280, HF_QWEN) == 20


def test_ordinary_image_agrees():
    # 360x540: 360/28 = 12.857 -> 13 -> 364; 540/28 = 19.29 -> 19 -> 532 (no halves, so both
    # roundings agree); 364*532 = 193648 within bounds. Tokens (364/14)*(532/14)/4 = 26*38/4 = 247.
    assert mt.qwen_vl_hf(360, 540, **HF_QWEN) == 247
    assert mt.qwen_vl_edge_llm(360, 540, **EDGE_QWEN) == 247


def test_vendored_vision_settings():
    q25 = mt.vision_settings(str(VENDORED / "qwen2.5vl" / "vision_processor.json"))
    q3 = mt.vision_settings(str(VENDORED / "qwen3vl" / "vision_processor.json"))
    assert q25 == {"patch": 14, "merge": 2, "min_pixels": 3136, "max_pixels": 12845056}
    assert q3 == {"patch": 16, "merge": 2, "min_pixels": 3136, "max_pixels": 12845056}
    # Qwen3-VL, factor 32: 360/32 = 11.25 -> 11 -> 352; 540/32 = 16.875 -> 17 -> 544;
    # tokens (352/16)*(544/16)/4 = 22*34/4 = 187.
    assert mt.image_tokens("hf/qwen-vl", 360, 540, q3) == 187
    assert mt.image_tokens("hf/qwen-vl", 360, 540, q25) == 247


def test_max_pixels_branch():
    # 2000x3000 with transformers' default max_pixels 28*28*1280 = 1003520:
    # first step 71*28 = 1988, 107*28 = 2996, 1988*2996 > 1003520, so
    # beta = sqrt(6000000 / 1003520) = 2.44519; 2000/beta = 817.93 -> floor(29.2) = 29 -> 812;
    # 3000/beta = 1226.9 -> floor(43.8) = 43 -> 1204. Tokens (812/14)*(1204/14)/4 = 58*86/4 = 1247.
    assert mt.qwen_vl_hf_resize(2000, 3000, 28, 3136, 1003520) == (812, 1204)
    assert mt.qwen_vl_hf(2000, 3000) == 1247
    # Edge-LLM with max_image_tokens 1280 (1280*784 = 1003520) takes the same path.
    assert mt.qwen_vl_edge_llm(2000, 3000, min_image_tokens=4, max_image_tokens=1280) == 1247


def test_max_pixels_branch_clamps_in_both():
    # 20x3000, max 64 tokens = 50176 pixels. First step: h -> max(28, 1*28) = 28 (HF: round(0.714)
    # = 1 -> 28); w -> 107*28 = 2996; 28*2996 = 83888 > 50176.
    # beta = sqrt(60000 / 50176) = 1.09353. HF: h = max(28, floor(18.29/28)*28 = 0) = 28;
    # w = floor(2743.4 / 28) = 97 -> 2716; tokens (28/14)*(2716/14)/4 = 2*194/4 = 97.
    assert mt.qwen_vl_hf(20, 3000, min_pixels=3136, max_pixels=64 * 784) == 97
    # Edge-LLM 0.10: max(28, floor(trunc(18.29) / 28) * 28 = 0) = 28, trunc(2743.4) = 2743 ->
    # floor(97.96) = 97 -> 2716: the same 97 tokens (0.7.0 had no clamp: an empty image).
    assert mt.qwen_vl_edge_llm(20, 3000, min_image_tokens=4, max_image_tokens=64) == 97


def test_min_pixels_branch_takes_the_ceiling_of_the_real_product():
    # 60x76, min 64 tokens = 50176 pixels. First step (no halves): 2*28 = 56, 3*28 = 84;
    # 56*84 = 4704 < 50176. beta = sqrt(50176 / 4560) = 3.31715.
    # h*beta = 199.03: ceil(7.108) = 8 -> 224. w*beta = 252.10: ceil(252.10/28 = 9.0037) = 10 ->
    # 280, in both (Edge-LLM 0.10's ceilByFactorF; 0.7.0 truncated to 252 first: 252).
    settings = {"max_image_tokens": 16384}
    assert mt.qwen_vl_hf_resize(60, 76, 28, 50176, 12845056) == (224, 280)
    assert mt.qwen_vl_edge_llm_resize(60, 76, 28, 50176, 12845056) == (224, 280)
    # Tokens 16*20/4 = 80 in both.
    assert mt.qwen_vl_hf(60, 76, min_pixels=50176, max_pixels=12845056) == 80
    assert mt.qwen_vl_edge_llm(60, 76, min_image_tokens=64, **settings) == 80


def test_tiny_image_min_branch():
    # 4x15, min 3136 pixels. HF first step: round(0.14) = 0 -> 0 (no clamp), round(0.54) = 1 -> 28;
    # Edge-LLM: max(28, 0) = 28, 28. Both products < 3136. beta = sqrt(3136 / 60) = 7.22957.
    # h*beta = 28.918: ceil(1.033) = 2 -> 56; w*beta = 108.44: ceil(3.87) = 4 -> 112, in both.
    # Tokens 4*8/4 = 8 in both (0.7.0 truncated 28.918 to 28 first: 28, 4 tokens).
    assert mt.qwen_vl_hf(4, 15, **HF_QWEN) == 8
    assert mt.qwen_vl_edge_llm(4, 15, **EDGE_QWEN) == 8


def test_first_step_clamp_in_edge_llm_only():
    # 10x1000, bounds 4 and 256 tokens (3136, 200704 pixels). HF: round(0.357) = 0 -> 0,
    # round(35.71) = 36 -> 1008; 0 < 3136, beta = sqrt(3136 / 10000) = 0.56: ceil(5.6/28) = 1 -> 28,
    # ceil(560/28) = 20 -> 560; (28/14)*(560/14)/4 = 2*40/4 = 20 tokens.
    # Edge-LLM 0.10: max(28, 0) = 28, 1008; 28*1008 = 28224 lies within the bounds: 2*72/4 = 36.
    assert mt.qwen_vl_hf(10, 1000, min_pixels=3136, max_pixels=256 * 784) == 20
    assert mt.qwen_vl_edge_llm(10, 1000, min_image_tokens=4, max_image_tokens=256) == 36


def test_aspect_ratio_refusal_is_a_real_division_in_both():
    # 1x201: 201 > 200 in both. 2x401: 200.5 > 200 in both (Edge-LLM 0.7.0's integer 401 div 2 =
    # 200 let it pass).
    for h, w in ((1, 201), (2, 401)):
        with pytest.raises(ValueError, match="aspect ratio"):
            mt.image_tokens("hf/qwen-vl", h, w, HF_QWEN)
        with pytest.raises(ValueError, match="aspect ratio"):
            mt.image_tokens("edge-llm/qwen-vl", h, w, EDGE_QWEN)
    # 2x400: 200 is not above 200. Edge-LLM: h -> max(28, 0) = 28, w -> round(14.29) = 14 -> 392,
    # 28*392 = 10976 >= 3136; tokens 2*28/4 = 14. HF: h -> 0, so beta = sqrt(3136/800) = 1.97990,
    # h -> ceil(3.96/28) = 1 -> 28, w -> ceil(791.96/28 = 28.28) = 29 -> 812; 2*58/4 = 29.
    assert mt.image_tokens("edge-llm/qwen-vl", 2, 400, EDGE_QWEN) == 14
    assert mt.image_tokens("hf/qwen-vl", 2, 400, HF_QWEN) == 29


# --- TOK-MEDIA-4 / TOK-MEDIA-5: InternVL -----------------------------------------------

EDGE_INTERN = {"min_image_tokens": 256, "max_image_tokens": 3328}  # tiles max(1, 0) = 1 .. 13 - 1 = 12


def test_internvl_single_tile_thumbnail():
    # 448x448: aspect 1; grid 1x1 first; 2x2 (diff 0) would need 200704 > 0.5*448^2*4 = 401408: no;
    # 3x3 needs > 903168: no. HF: one tile, no thumbnail: 2 + 256*1 = 258 (<img>, 256, </img>).
    assert mt.tile_grid(448, 448, 1, 12) == (1, 1)
    assert mt.internvl_hf(448, 448) == 258
    # Edge-LLM 0.10 adds no thumbnail to one block when its minimum profile is one block
    # (min_image_tokens 256): 258 as well; with min_image_tokens 512 (2 blocks) it does:
    # 2 + 256*(1 + 1) = 514.
    assert mt.internvl_edge_llm(448, 448, **EDGE_INTERN) == 258
    assert mt.internvl_edge_llm(448, 448, min_image_tokens=512, max_image_tokens=3328) == 514


def test_internvl_wide_image_agrees():
    # 448x896: aspect 2 -> grid 2 columns x 1 row (4x2 ties but 401408 > 802816 is false);
    # 2 tiles + thumbnail = 3 patches in both: 2 + 768 = 770.
    assert mt.tile_grid(448, 896, 1, 12) == (2, 1)
    assert mt.internvl_hf(448, 896) == 770
    assert mt.internvl_edge_llm(448, 896, **EDGE_INTERN) == 770


def test_internvl_tie_break_prefers_more_tiles_for_large_images():
    # 1344x1344 (area 1806336): 2x2 ties with 1x1 and 1806336 > 401408 -> 2x2; 3x3 ties and
    # 1806336 > 903168 -> 3x3. 9 tiles + thumbnail: 2 + 256*10 = 2562.
    assert mt.tile_grid(1344, 1344, 1, 12) == (3, 3)
    assert mt.internvl_hf(1344, 1344) == 2562


def test_internvl_edge_llm_tile_bounds_from_token_bounds():
    # max_image_tokens 1024: max(1, 4 - 1) = 3 tiles. 1344x1344 can then only use 1x1 (2x2 > 3):
    # 2 + 256 = 258, as HF with max_patches 3.
    assert mt.internvl_edge_llm(1344, 1344, min_image_tokens=256, max_image_tokens=1024) == 258
    assert mt.internvl_hf(1344, 1344, max_patches=3) == 258


def test_internvl_edge_llm_reserves_the_thumbnail_on_both_bounds():
    # min 768, max 1536 tokens: tiles max(1, 3 - 1) = 2 .. max(1, 6 - 1) = 5; minimum profile 3
    # blocks, so every image has a thumbnail. 16x80 (5:1): 5x1 is exact: 2 + 256*(5 + 1) = 1538.
    # 16x96 (6:1): 6x1 would be the sixth block; among <= 5 tiles 5x1 is closest: 1538.
    # 16x32 (2:1): 2x1 (area 2 >= 2): 2 + 256*3 = 770. 16x16: 1x1 is below 2 tiles; 2x2 is exact:
    # 2 + 256*5 = 1282. HF with patches 2..5 gives the same grids (and thumbnails: c*r > 1).
    bounds = {"min_image_tokens": 768, "max_image_tokens": 1536}
    for (h, w), tokens in (((16, 80), 1538), ((16, 96), 1538), ((16, 32), 770), ((16, 16), 1282)):
        assert mt.internvl_edge_llm(h, w, **bounds) == tokens
        assert mt.internvl_hf(h, w, min_patches=2, max_patches=5) == tokens
    # HF with max_patches 6 reserves nothing: 16x96 takes 6x1, 2 + 256*7 = 1794.
    assert mt.internvl_hf(16, 96, min_patches=2, max_patches=6) == 1794


# --- TOK-MEDIA-6: Phi-3-vision ---------------------------------------------------------

def test_phi3_vision_square_is_upscaled_to_4x4():
    # 336x336, num_crops 16: s = 4 (4*ceil(4/1) = 16 <= 16; 5*5 = 25 > 16) -> 1344x1344,
    # 4x4 crops: (16 + 1)*144 + 1 + (4 + 1)*12 = 2448 + 1 + 60 = 2509.
    assert mt.phi3_vision_hf_size(336, 336) == (1344, 1344)
    assert mt.phi3_vision_hf(336, 336) == 2509


def test_phi3_vision_landscape_and_portrait():
    # 600x800 (h x w): ratio 4/3; s = 4 (4*ceil(3) = 12 <= 16; 5*ceil(3.75) = 20 > 16);
    # width 1344, height int(1344 * 3/4) = 1008 (a multiple of 336): 3x4 crops:
    # (12 + 1)*144 + 1 + (3 + 1)*12 = 1872 + 1 + 48 = 1921.
    assert mt.phi3_vision_hf_size(600, 800) == (1008, 1344)
    assert mt.phi3_vision_hf(600, 800) == 1921
    # num_crops 4: s = 2 (2*ceil(1.5) = 4; 3*ceil(2.25) = 9 > 4): 672 x 504 -> padded 672: 2x2:
    # 5*144 + 1 + 3*12 = 757.
    assert mt.phi3_vision_hf(600, 800, num_crops=4) == 757
    # 800x600 (portrait): transposed, same 1344x1008, swapped back: 4 rows x 3 columns:
    # 13*144 + 1 + 5*12 = 1933 (the row separators follow the rows).
    assert mt.image_tokens("hf/phi-3-vision", 800, 600) == 1933


# --- dispatcher (TOK-MEDIA-1, TOK-MEDIA-7) ---------------------------------------------

def test_registry_names():
    assert sorted(mt.COUNTERS) == ["edge-llm/internvl", "edge-llm/qwen-vl", "hf/internvl",
                                   "hf/phi-3-vision", "hf/qwen-vl", "vllm/qwen-vl"]


def test_dispatcher_refusals():
    with pytest.raises(ValueError, match="unknown media token counter"):
        mt.image_tokens("sglang/qwen-vl", 10, 10)
    with pytest.raises(ValueError, match="at least 1"):
        mt.image_tokens("hf/qwen-vl", 0, 10)
    # Edge-LLM bounds have no default (TOK-MEDIA-7).
    with pytest.raises(ValueError, match="do not fit"):
        mt.image_tokens("edge-llm/qwen-vl", 70, 280, {})
    with pytest.raises(ValueError, match="do not fit"):
        mt.image_tokens("hf/internvl", 448, 448, {"min_image_tokens": 256})
