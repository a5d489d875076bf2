"""The soak test in miniature: tools/soak.py runs 100,000 requests
on demand; the default test run drives 500 through the same code, with the cache invariant
check after every batch and the free-page count checked after every request file."""
from __future__ import annotations

import importlib.util
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "tools" / "soak.py"


def load_tool():
    spec = importlib.util.spec_from_file_location("kvconform_soak", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_soak_500_requests():
    soak = load_tool()
    stats = soak.soak(500, seed=0, every=100, device="cpu", rss_slack_mb=64, progress=False)
    assert "violation" not in stats, stats["violation"]
    assert stats["requests"] == 500 and stats["failed_batches"] > 0, "the generator must also fail batches"
    for kind, final in stats["final"].items():
        assert final["free_pages"] == final["capacity"] - final["held_by_records"], kind
        assert final["hit_sequences"] > 0 and final["records"]["evicted"] > 0, (kind, final)
    assert stats["final"]["hybrid"]["hybrid"]["restores"] > 0


def test_the_soak_check_catches_a_leak():
    """check_pools is the soak's leak detector: a page pinned outside any sequence is reported."""
    import json
    import tempfile
    from gpu_backend import Runtime, build_engine
    soak = load_tool()
    d = Path(tempfile.mkdtemp())
    build_engine(d, soak.ENGINES["attention"])
    rt = Runtime(d, enable_context_reuse=True, device="cpu")
    assert soak.check_pools(rt) is None
    leaked = rt.cache.pages.allocate(1)
    assert "active references" in soak.check_pools(rt)
    rt.cache.release(leaked)
    assert soak.check_pools(rt) is None
    rt.cache.pages.free.popleft()                    # a page lost from the free list
    assert "free, expected" in soak.check_pools(rt)
