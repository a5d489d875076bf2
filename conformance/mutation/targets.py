"""Which modules the campaign mutates, and which judge each one goes to.

- `edge`: a module of the bundled backend's Edge-LLM side (the context cache, its semantics,
  identity, media and template handling). Judged as an Edge-LLM deployment is judged: `kvconform
  run --backend inprocess --fail-fast` over the curated cases, under each semantics profile
  (`kvconform-1`, and `edge-llm-0.10` for behaviour only that profile has).
- `peer`: the bundled OpenAI-compatible server's caches and usage (gpu_backend/peer_cache/,
  serve.py). Judged as a server is judged: the mutated server in a thread, `kvconform run
  --backend openai --profile P --fail-fast` for each peer profile, with the settings of
  docs/peers.md's examples.
- `kit`: the kit's own judging code (`reference/`, `conformance/`). Judged by the kit's own tests:
  `KIT_TESTS` names the pytest selection of each module (the tests that exercise it, run with
  `-x`): who guards the judge.

A PATH may end in `::NAME[,NAME...]`: only the definitions (functions, classes, methods) of
those names are mutated (`gpu_backend/serve.py::usage_of`).
"""
from __future__ import annotations

import ast
from pathlib import Path

from .. import KvconformError

ROOT = Path(__file__).resolve().parents[2]

EDGE_PROFILES = ("kvconform-1", "edge-llm-0.10")
PEER_TOKENIZER = "spec/tokenizers/phi-3-mini"
VISION_TOKENIZER = {"from": "spec/tokenizers/phi-3-vision", "files": ("tokenizer.json", "tokenizer_config.json"),
                    "preprocessor_config.json": {"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 14,
                                                 "merge_size": 2, "temporal_patch_size": 2, "min_pixels": 3136,
                                                 "max_pixels": 12845056}}
"""The vision model folder the peer tests serve image cases from: Phi-3-vision's tokenizer (one
`<|image|>` token) beside a Qwen2-VL preprocessor config (a 16x16 image takes 4 tokens)."""


def _deployment(profile: str, engine: str, **settings) -> dict:
    return {"profile": profile, "engine": engine, "settings": settings}


PEER_DEPLOYMENTS = {
    # name -> the bundled server's profile, engine and settings: the deployments the peer tests judge
    # (tests/conformance/test_peer_profiles.py, docs/peers.md's examples). A mutant is judged by each
    # deployment whose run executes its line, in this order, until one is not CONFORMANT. The engine
    # is the profile's tokenizer loader's, or "vision" where the profile keys images (its image cases
    # run only on a model folder with an image processor).
    "llama.cpp-server": _deployment("llama.cpp-server", "tokenizers-raw"),
    "llama.cpp-server cache_reuse": _deployment("llama.cpp-server", "tokenizers-raw", cache_reuse=8),
    "llama.cpp-server two slots, shift": _deployment("llama.cpp-server", "tokenizers-raw", slots=2,
                                                     context_shift=True, n_keep=32, n_ctx=512),
    "llama.cpp-server cache_reuse, shift": _deployment("llama.cpp-server", "tokenizers-raw", cache_reuse=8,
                                                       context_shift=True, n_keep=32, n_ctx=512),
    "vllm-apc": _deployment("vllm-apc", "vision", block_size=16, cache_blocks=24),
    "vllm-apc eagle": _deployment("vllm-apc", "vision", block_size=16, cache_blocks=24, eagle=True),
    "vllm-apc sliding window": _deployment("vllm-apc", "transformers-auto", block_size=8, sliding_window=20,
                                           swa_block_size=16, retention_interval="dense"),
    "vllm-apc mamba": _deployment("vllm-apc", "transformers-auto", block_size=16, mamba_block_size=16),
    "sglang-radix": _deployment("sglang-radix", "transformers-auto", page_size=4, pool_tokens=600),
    "sglang-radix 0.5.16": _deployment("sglang-radix", "transformers-auto", page_size=4, pool_tokens=600,
                                       version="0.5.16"),
    "sglang-radix eagle": _deployment("sglang-radix", "transformers-auto", page_size=4, pool_tokens=600, eagle=True),
    # the releases at which PEER-SGL-8's rules change (0.5.17: only the shortfall evicted; 0.5.20: a
    # finished prompt split off its answer), each side of each: a release threshold off by one fails one
    "sglang-radix 0.5.17": _deployment("sglang-radix", "transformers-auto", page_size=4, pool_tokens=600,
                                       version="0.5.17"),
    "sglang-radix 0.5.19": _deployment("sglang-radix", "transformers-auto", page_size=4, pool_tokens=600,
                                       version="0.5.19"),
    "sglang-radix 0.5.20": _deployment("sglang-radix", "transformers-auto", page_size=4, pool_tokens=600,
                                       version="0.5.20"),
    # no page_size given: the server's own default (SGLang's: pages of one token), which it publishes
    "sglang-radix page 1": _deployment("sglang-radix", "transformers-auto", pool_tokens=600),
    "trtllm-kv-reuse": _deployment("trtllm-kv-reuse", "vision", tokens_per_block=16),
    "trtllm-kv-reuse pool, retention, windows": _deployment("trtllm-kv-reuse", "vision", tokens_per_block=16,
                                                            max_blocks=12, retention_config=True,
                                                            max_attention_window=[48, 80]),
    "trtllm-kv-reuse pool": _deployment("trtllm-kv-reuse", "vision", tokens_per_block=16, max_blocks=12),
    "trtllm-kv-reuse one window": _deployment("trtllm-kv-reuse", "vision", tokens_per_block=32,
                                              max_attention_window=[80]),
}
PEER_PROFILES = sorted({d["profile"] for d in PEER_DEPLOYMENTS.values()})
PEER_LOADERS = {"llama.cpp-server": "tokenizers-raw", "vllm-apc": "transformers-auto",
                "sglang-radix": "transformers-auto", "trtllm-kv-reuse": "transformers-auto"}


def peer_setting_args(settings: dict) -> list[str]:
    """`--peer-setting k=v` for each setting, as a user types them (true/false, [48, 80])."""
    out = []
    for key, value in settings.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        out += ["--peer-setting", f"{key}={text}"]
    return out


def peer_deployments(profiles: list[str] | None) -> list[str]:
    """The deployments of `profiles` (profile or deployment names; all when none), in judging order."""
    return [name for name, d in PEER_DEPLOYMENTS.items()
            if not profiles or name in profiles or d["profile"] in profiles]


CONTEXT_CACHE = [f"gpu_backend/{m}.py" for m in (
    "prefix_cache", "cache_store", "cache_pools", "cache_plan", "page_planner", "checkpoint_planner",
    "paired_planner", "scheduler")]
EDGE_SUPPORT = [f"gpu_backend/{m}.py" for m in (
    "semantics", "identity", "media", "chat_template", "template_worker", "hf_prompt", "image_counters")]
PEER_CACHES = [f"gpu_backend/peer_cache/{m}.py" for m in ("common", "llama", "vllm", "sglang", "trtllm", "__init__")]
SERVE_USAGE = ["gpu_backend/serve.py"]
DEFAULT_BACKEND = CONTEXT_CACHE + EDGE_SUPPORT + PEER_CACHES + SERVE_USAGE

# The kit's judging code and the tests that guard each module (run with -x, in process): the
# verdicts and headline, the output comparison, the peer suite's count and timings judge, the
# materializer's page classes, and the oracle's planning (its golden cases).
GAPS = "tests/conformance/test_judge_gaps.py::"
KIT_TESTS = {
    "conformance/judge/verdicts.py": ["tests/conformance/test_headlines.py",
                                      GAPS + "test_a_timeout_beside_judged_cases_makes_the_run_not_conformant"],
    "conformance/judge/compare.py": ["tests/conformance/test_compare.py",
                                     GAPS + "test_an_empty_output_text_is_compared_with_its_replay"],
    "conformance/peers/judge.py": [GAPS + "test_llama_cpp_timings_that_disagree_with_cached_tokens_fail_peer_lcpp_3"],
    "conformance/materialize/__init__.py": [GAPS + "test_the_materializer_keeps_one_past_a_page_boundary_apart_from_"
                                            "between", "tests/conformance/test_materialize.py"],
    "reference/planning.py": ["tests/reference/test_golden.py"],
}
DEFAULT_KIT = ["conformance/judge/verdicts.py::summarize,conformant", "conformance/judge/compare.py::compare_outputs",
               "conformance/peers/judge.py::judge_timings,judge_count", "conformance/materialize/__init__.py::_boundary_class",
               "reference/planning.py"]
"""The judge campaign's default: the headline, the output comparison, the peer count and timings
judge, the materializer's page classes and the oracle's planning."""


def judge_of(relpath: str) -> str:
    if relpath.startswith("gpu_backend/peer_cache/") or relpath == "gpu_backend/serve.py":
        return "peer"
    if relpath.startswith("gpu_backend/"):
        return "edge"
    if relpath.startswith(("reference/", "conformance/")):
        return "kit"
    raise KvconformError(f"{relpath}: the campaign mutates gpu_backend/, reference/ and conformance/ modules only")


def parse_target(text: str, root: Path = ROOT) -> tuple[str, set[int] | None]:
    """`PATH[::NAME,...]` -> (path relative to the kit's root, the lines of those definitions or
    None for the whole module); bad input is one line, exit 2."""
    path, _, names = text.partition("::")
    full = (Path(path) if Path(path).is_absolute() else Path.cwd() / path).resolve()
    try:
        rel = str(full.relative_to(root.resolve()))
    except ValueError:
        raise KvconformError(f"--mutate {text}: not a module of this kit ({root})") from None
    if not full.is_file() or full.suffix != ".py":
        raise KvconformError(f"--mutate {text}: no such Python module")
    judge_of(rel)
    if not names:
        return rel, None
    wanted = {n.strip() for n in names.split(",") if n.strip()}
    lines: set[int] = set()
    found = set()
    for node in ast.walk(ast.parse(full.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in wanted:
            found.add(node.name)
            lines |= set(range(node.lineno, node.end_lineno + 1))
    if wanted - found:
        raise KvconformError(f"--mutate {text}: {rel} defines no {sorted(wanted - found)[0]!r}")
    return rel, lines


def expand(paths: list[str], root: Path = ROOT) -> list[tuple[str, set[int] | None]]:
    """The targets of `--mutate PATH...`: a folder stands for its modules; none means the default
    set (the context cache, its semantics/identity/media/template modules, the peer caches, serve.py)."""
    out = []
    for text in paths or DEFAULT_BACKEND:
        p = Path(text.partition("::")[0])
        full = p if p.is_absolute() else (Path.cwd() / p if (Path.cwd() / p).exists() else root / p)
        if full.is_dir():
            out += [parse_target(str(f), root) for f in sorted(full.rglob("*.py")) if "__pycache__" not in f.parts]
        else:
            out.append(parse_target(str(full) + (("::" + text.partition("::")[2]) if "::" in text else ""), root))
    return out
