"""The catalogue of faulty backends (faulty_backends/): its shape, its docstrings,
its seams, and the claims its docstrings make. Whether the suite catches every variant is
test_selftest.py's job."""
from __future__ import annotations

import ast
import hashlib
import inspect
import json
import re
from pathlib import Path

import numpy as np
import pytest

from conformance.adapters.faulty import FaultyAdapter
from conformance.judge.verdicts import Verdict
from faulty_backends import CATALOGUE, GROUPS
from faulty_backends.identity import Weak16BitDigest
from faulty_backends.registry import SEAMS, injected
from gpu_backend.identity import SequenceIdentity
from gpu_backend.model import Model
from gpu_backend.prefix_cache import ContextCache
from gpu_backend.runtime import Runtime

ROOT = Path(__file__).resolve().parents[2]
SPEC_RULES = {rule for name in ("context-reuse.md", "hf-tokenizer.md", "media-tokens.md")
              for rule in re.findall(r"\*\*((?:CR|TOK)-[A-Z]+-\d+) ", (ROOT / "spec" / name).read_text())}

# The defects the catalogue must hold, by the name each has in the catalogue.
REQUIRED = {
    "identity": ["lora-not-in-key", "media-placeholders-only", "media-position-omitted", "media-hash-without-geometry",
                 "adjacent-media-merged", "weak-16bit-digest", "sub-page-checkpoint-without-lora"],
    "planning": ["partial-page-reuse", "full-hit-zero-token-prefill", "full-hit-replays-last-token",
                 "rewind-non-aligned", "media-trim-missing", "trim-at-text-boundaries", "media-trim-once"],
    "publication": ["prefill-only-publishes-generated", "bypass-publishes", "bypass-looks-up", "decode-end-off-by-one",
                    "errored-sequence-published", "stop-string-end-not-published"],
    "capacity": ["hit-touches-record", "evicts-mru", "record-limit-off-by-one", "stale-index-after-evict",
                 "pinned-pages-evicted"],
    "batching": ["reuse-within-batch"],
    "compute": ["suffix-rope-from-zero", "page-table-off-by-one", "recurrent-state-from-non-endpoint",
                "partial-kv-not-restored", "kv-fp8-requantized-on-reuse", "kv-scaled-on-reuse", "constant-logits",
                "attention-ignores-cache", "wrong-lora-scale"],
    "support": ["fp8-kv-accepted", "hidden-states-not-bypassed"],
    "metrics": ["hit-counted-at-lookup", "media-aware-per-batch"],
    "tokenizer": ["loader-ignored", "edge-llm-qwen-vl-unclamped", "internvl-thumbnail-always",
                  "qwen-vl-max-pixels-inclusive"],
}


def test_the_catalogue_covers_the_required_defects():
    assert len(CATALOGUE) >= 24
    for group, names in REQUIRED.items():
        for name in names:
            assert name in CATALOGUE, f"{group}: {name} missing"
            assert CATALOGUE[name].group == group
    assert list(CATALOGUE) == sorted(CATALOGUE, key=lambda n: GROUPS.index(CATALOGUE[n].group)), "grouped order"


@pytest.mark.parametrize("name", list(CATALOGUE))
def test_a_variant_names_its_bug_class_rule_and_issue(name):
    v = CATALOGUE[name]
    assert v.summary and v.bug_class and v.mirrors
    assert set(v.rules) <= SPEC_RULES, f"unknown rules {set(v.rules) - SPEC_RULES}"
    assert re.search(r"#\d+|PR|GHSA|CVE|quirk|Edge-LLM|enable_partial_reuse", v.mirrors), v.mirrors
    import faulty_backends as pkg
    assert name in pkg.__doc__, "the package docstring lists the catalogue"


@pytest.mark.parametrize("name", list(CATALOGUE))
def test_a_variant_is_one_component_with_its_own_code(name):
    """A subclass of a gpu_backend component that defines something of its own (not a no-op),
    turned into a Runtime subclass; production classes carry no fault switch."""
    v = CATALOGUE[name]
    bases = {component: base for component, (base, _) in SEAMS.items()} | {"runtime": Runtime}
    assert issubclass(v.cls, bases[v.component]) and v.cls is not bases[v.component]
    assert issubclass(v.factory, Runtime)
    own = [k for k, val in vars(v.cls).items() if k not in ("__module__", "__doc__", "__qualname__", "variant_name")
           and (inspect.isfunction(val) or isinstance(val, type))]
    assert own, f"{v.cls.__name__} overrides nothing"
    if v.component != "runtime":
        assert injected(v.factory, v.component) is v.cls
    assert "# DEFECT" in inspect.getsource(inspect.getmodule(v.cls)), "defect lines are marked"


@pytest.mark.parametrize("name", list(CATALOGUE))
def test_a_variants_overrides_keep_the_production_signatures(name):
    """Every method a variant overrides takes the parameters of the production method it
    replaces, so a change of a seam's signature cannot leave a variant crashing instead of
    carrying its defect (a crash counts as a broken variant, never as a kill)."""
    for cls in _variant_classes(CATALOGUE[name].cls):
        for k, val in vars(cls).items():
            base = next((getattr(b, k) for b in cls.__mro__[1:] if k in vars(b)), None)
            if not inspect.isfunction(val) or not inspect.isfunction(base) or k.startswith("__"):
                continue
            theirs = [p.name for p in inspect.signature(base).parameters.values()]
            ours = inspect.signature(val).parameters
            takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in ours.values())
            missing = [p for p in theirs if p not in ours and not takes_any]
            assert not missing, f"{cls.__name__}.{k} lacks {missing} of {base.__qualname__}"


def _variant_classes(cls):
    """A variant's class and the faulty components it installs at other seams (class attributes)."""
    yield cls
    for val in vars(cls).values():
        if isinstance(val, type) and val.__module__.startswith("faulty_backends"):
            yield from _variant_classes(val)


def test_the_runtime_seams_default_to_the_production_components():
    for component, (base, _) in SEAMS.items():
        assert injected(Runtime, component) is base, component
    assert (Runtime.identity_class, Runtime.cache_class, Runtime.model_class) == (SequenceIdentity, ContextCache, Model)


def test_gpu_backend_imports_neither_the_kit_nor_the_oracle():
    for path in (ROOT / "gpu_backend").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            for n in names:
                assert n.split(".")[0] not in ("conformance", "reference"), f"{path.name} imports {n}"
        text = path.read_text()
        for v in CATALOGUE.values():   # no switch names a variant: they exist only as subclasses
            assert v.name not in text and v.cls.__name__ not in text, f"{path.name} mentions {v.name}"


def test_the_faulty_adapter_runs_the_variant_runtime(tmp_path):
    v = CATALOGUE["lora-not-in-key"]
    adapter = FaultyAdapter(v, device="cpu")
    assert isinstance(adapter, FaultyAdapter) and adapter.name == "faulty:lora-not-in-key"
    engine = adapter.engine_for({"maxInputLen": 40, "maxKVCacheCapacity": 48, "maxKVPoolPages": 0, "tokensPerPage": 4})
    session = adapter.start(engine, {"enableContextReuse": True})
    try:
        assert type(session.runtime) is v.factory
        assert isinstance(session.runtime, Runtime)
    finally:
        session.close()
    assert FaultyAdapter("lora-not-in-key").variant is v      # by name, as the runner's units name it


@pytest.mark.parametrize("module, note", [
    ("faulty_backends", []),
    ("conformance.faulty_backends", ["python -m conformance.faulty_backends is deprecated: use python -m "
                                     "faulty_backends"]),
])
def test_the_command_entry_point_refuses_an_unknown_variant_in_one_line(module, note):
    """`python -m faulty_backends VARIANT infer ...`; the former module name keeps working for one
    release and says it is deprecated."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", module, "no-such-variant", "infer"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and lines[:-1] == note, done.stderr
    assert lines[-1].startswith("faulty_backends: error: the first argument must be a variant (")

def test_a_16_bit_digest_collides_on_the_birthday_case_and_the_bundled_one_does_not():
    """The weak-digest docstring's claim: the pages of sections/id/distinct-pages-birthday collide
    under a 16-bit key, and are all distinct under the bundled 256-bit key."""
    doc = json.loads((ROOT / "cases/sections/id/distinct-pages-birthday.json").read_text())
    texts = [r["messages"][0]["content"] for r in doc["requests"]]
    assert len(set(texts)) == len(texts)
    weak, strong = [], []
    for t in texts:
        ids = np.frombuffer(t.encode(), np.uint8).astype(np.int64)
        weak += Weak16BitDigest(ids, [], 4, None).page_keys(len(t) // 4)
        strong += SequenceIdentity(ids, [], 4, None).page_keys(len(t) // 4)
    assert len(strong) >= 2000 and len(set(strong)) == len(strong)
    assert len(set(weak)) < len(weak), "2,560 keys of 16 bits must collide (probability 1 - exp(-50))"


def test_the_media_variants_confuse_what_the_spec_distinguishes():
    """Unit view of three identity defects on the spans they mishandle."""
    from faulty_backends.identity import (AdjacentMediaMerged, MediaHashWithoutGeometry,
                                                      MediaPositionOmitted)
    from gpu_backend.identity import MediaSpan, media_digest
    data = np.arange(16 * 32 * 3, dtype=np.uint8)
    a = MediaSpan(2, 2, media_digest("image", (16, 32, 3), data.tobytes()), "image", data.reshape(16, 32, 3))
    b = MediaSpan(2, 2, media_digest("image", (32, 16, 3), data.tobytes()), "image", data.reshape(32, 16, 3))
    ids = np.array([1, 2, -1, -1, 5, 6, 7, 8])
    keys = lambda cls, spans: cls(ids, spans, 4, None).page_keys(2)
    assert keys(SequenceIdentity, [a]) != keys(SequenceIdentity, [b])
    assert keys(MediaHashWithoutGeometry, [a]) == keys(MediaHashWithoutGeometry, [b])
    x = MediaSpan(2, 1, hashlib.blake2b(b"x").digest(), "image", None)
    y = MediaSpan(3, 1, hashlib.blake2b(b"y").digest(), "image", None)
    x2 = MediaSpan(3, 1, x.digest, "image", None)
    y2 = MediaSpan(2, 1, y.digest, "image", None)
    assert keys(SequenceIdentity, [x, y]) != keys(SequenceIdentity, [y2, x2])
    assert keys(MediaPositionOmitted, [x, y]) == keys(MediaPositionOmitted, [y2, x2])
    z = MediaSpan(3, 1, hashlib.blake2b(b"z").digest(), "image", None)
    assert keys(SequenceIdentity, [x, y]) != keys(SequenceIdentity, [x, z])
    assert keys(AdjacentMediaMerged, [x, y]) == keys(AdjacentMediaMerged, [x, z])


def test_without_context_reuse_every_variant_is_the_bundled_backend():
    """A variant differs only in context reuse: with reuse disabled it passes (so it runs end to
    end through the methods it overrides, and the selftest's kill is not a crash of the variant)."""
    from conformance.cases.case import discover
    from conformance.run.execute import run_case
    case = next(c for c in discover() if c.id == "sections/pol/reuse-disabled-outputs")
    for v in CATALOGUE.values():
        adapter = FaultyAdapter(v, device="cpu")
        result = run_case(case, adapter, adapter.capabilities())
        if getattr(v.factory, "reuse_independent", False):
            # a model wrong with or without reuse (faulty_backends/numerics.py): the bypass replay
            # agrees with it, only the numerical reference catches it, reuse on or off (this case
            # has no LoRA request, so wrong-lora-scale computes like the bundled backend here)
            assert result.verdict in (Verdict.PASS, Verdict.FAIL), (v.name, result.reason)
            assert {f.rule for f in result.failures} <= {"CR-OUT-1", "CR-OUT-2"}, [f.line() for f in result.failures]
            assert (result.verdict == Verdict.FAIL) == (v.name != "wrong-lora-scale"), v.name
            continue
        assert result.verdict == Verdict.PASS, (v.name, result.reason, [f.line() for f in result.failures[:2]])


def test_a_case_that_switches_policy_runs_its_batches_as_files_on_one_instance(tmp_path):
    """A generated reproducer may carry `_policy_switch` (one batch sent as its own request file
    under the other lookup policy). `kvconform run --case` must replay it that way, or
    `bypass-looks-up` (CR-POL-2) would pass every standalone reproducer."""
    from conformance.adapters import make_adapter
    from conformance.cases.case import load_case
    from conformance.run.execute import run_case
    doc = {"apply_chat_template": False, "temperature": 0, "top_k": 1, "max_generate_length": 1,
           "context_cache_lookup_policy": "use_cache",
           "_policy_switch": {"batch": 1, "context_cache_lookup_policy": "bypass"},
           "requests": [{"messages": [{"role": "user", "content": "abcdefghij"}]},
                        {"messages": [{"role": "user", "content": "abcdefghij"}]}],
           "_conformance": {"id": "regressions/policy-switch", "rules": ["CR-POL-2"],
                            "description": "batch 0 publishes [a-h] under use_cache; batch 1 runs as its own "
                                           "file under bypass on the same instance and must not look up",
                            "engine": {"maxInputLen": 16, "maxKVCacheCapacity": 20, "maxKVPoolPages": 0,
                                       "tokensPerPage": 4},
                            "runtime": {"enableContextReuse": True}}}
    path = tmp_path / "policy-switch.json"
    path.write_text(json.dumps(doc))
    case = load_case(path)
    good = make_adapter("inprocess", device="cpu")
    assert run_case(case, good, good.capabilities()).verdict == Verdict.PASS
    bad = FaultyAdapter("bypass-looks-up", device="cpu")
    result = run_case(case, bad, bad.capabilities())
    assert result.verdict == Verdict.FAIL and result.first_failure().request == 1
    command = make_adapter("command", device="cpu")
    assert run_case(case, command, command.capabilities()).verdict == Verdict.NOT_SUPPORTED


def test_the_catalogue_tables_are_generated_from_the_registry():
    """The list in the package docstring, the kill matrix of faulty_backends/README.md and the
    table of docs/selftest.md are what tools/make_catalogue_doc.py writes from the registry and the
    measured kills (kills.json), and kills.json measures exactly the registered variants."""
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "tools/make_catalogue_doc.py", "--check"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


def test_a_variant_without_a_measured_kill_fails_the_catalogue_check():
    import importlib.util
    spec = importlib.util.spec_from_file_location("make_catalogue_doc", ROOT / "tools" / "make_catalogue_doc.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    kills = tool.load_kills()
    assert tool.registry_problems(kills) == []
    gone = dict(kills, variants={k: v for k, v in kills["variants"].items() if k != "lora-not-in-key"})
    assert [p.split(":")[0] for p in tool.registry_problems(gone)] == ["lora-not-in-key"]
    extra = dict(kills, variants=dict(kills["variants"], **{"no-such-variant": {}}))
    assert [p.split(":")[0] for p in tool.registry_problems(extra)] == ["no-such-variant"]
    assert "`lora-not-in-key`" in tool.short_table(CATALOGUE, kills)
