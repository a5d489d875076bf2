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
PEER_PROFILES = {          # profile -> settings (as tests/conformance/test_peer_profiles.py and docs/peers.md)
    "llama.cpp-server": {},
    "vllm-apc": {"block_size": 16, "cache_blocks": 24},
    "sglang-radix": {"page_size": 4, "pool_tokens": 600},
    "trtllm-kv-reuse": {"tokens_per_block": 16},
}
PEER_LOADERS = {"llama.cpp-server": "tokenizers-raw", "vllm-apc": "transformers-auto",
                "sglang-radix": "transformers-auto", "trtllm-kv-reuse": "transformers-auto"}
PEER_TOKENIZER = "spec/tokenizers/phi-3-mini"

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
