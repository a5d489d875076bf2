"""Helpers of the backend tests: paths, runtimes with invariant checks, request files.

Engines use P = 4 and the chat template off in most tests, so one ASCII character is one
token and every expected count below can be derived by hand from spec/context-reuse.md.
"""
import json
from pathlib import Path

import torch

from gpu_backend import Runtime

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]
MEDIA = ROOT / "cases" / "media"
SCHEMAS = ROOT / "spec" / "schemas"
BUDGET = 1 << 20           # snapshot budgets that give plenty of slots

DEFAULT_BUILD_ARGS = dict(maxInputLen=40, maxKVCacheCapacity=48, maxKVPoolPages=0, tokensPerPage=4, maxBatchSize=2)


def runtime(engine_dir, **kw):
    """A runtime with invariant checks on; reuse on and generous snapshot budgets by default."""
    kw.setdefault("enable_context_reuse", True)
    kw.setdefault("recurrent_snapshot_bytes", BUDGET)
    kw.setdefault("partial_kv_snapshot_bytes", BUDGET)
    kw.setdefault("check_invariants", True)
    return Runtime(engine_dir, **kw)


def texts(*contents, gen=1, **top):
    """A request file: one user message per request, chat template off, greedy."""
    doc = {"apply_chat_template": False, "temperature": 0, "max_generate_length": gen,
           "requests": [{"messages": [{"role": "user", "content": c}]} for c in contents]}
    doc.update(top)
    return doc


def run(rt, doc, **kw):
    return rt.infer(doc, str(MEDIA), **kw)


def counters(rt):
    return rt.profile()["context_cache"]


def facts(result, i=0):
    return result["responses"][i]["context_cache"]


def schema_validator(name):
    """A jsonschema validator for spec/schemas/NAME.schema.json with the shared definitions."""
    import jsonschema
    from referencing import Registry, Resource
    docs = {p.name: json.loads(p.read_text()) for p in SCHEMAS.glob("*.schema.json")}
    registry = Registry().with_resources((d["$id"], Resource.from_contents(d)) for d in docs.values())
    schema = docs[f"{name}.schema.json"]
    return jsonschema.Draft202012Validator(schema, registry=registry)
