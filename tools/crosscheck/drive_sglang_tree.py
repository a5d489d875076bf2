"""Drive SGLang's own UnifiedRadixCache call by call, as its unit tests drive their trees
(spec/peer-profiles.md section 4, the paragraphs after PEER-SGL-13): `test_swa_radix_cache_1`,
`test_swa_radix_cache_eagle` and `test_mamba_radix_cache_1`'s inserts, evictions and matches,
printed with the tree after each eviction. Run by the interpreter of the crosscheck venv
(tools/crosscheck/install.sh); imports SGLang, torch and drive_sglang.py only, never the kit.

    $VENV/bin/python tools/crosscheck/drive_sglang_tree.py swa|swa-eagle|mamba

SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python picks the Python tree core (rust by default).
"""
from __future__ import annotations

import os
import sys
from array import array

os.environ.setdefault("SGLANG_SWA_EVICTION_INTERVAL", "128")
import drive_sglang as d  # noqa: E402  this folder: the caches as the scheduler builds them

from sglang.srt.managers.schedule_batch import Req  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixKey  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402

INSERTS = ([1, 2, 3], [1, 2, 3, 4, 5, 6, 7], [10, 11, 12], [1, 2, 3, 4, 5, 60, 70])


def build(kind: str):
    if kind == "swa-eagle":                              # CacheInitParams(is_eagle=True), as the test builds it
        plain = d.CacheInitParams
        d.CacheInitParams = lambda **kw: plain(is_eagle=True, **kw)
    return d.Cache({"mamba": True} if kind == "mamba" else {"sliding_window": 4}, 64, 64)


def main(kind: str) -> None:
    d.publish_config()
    cache = build(kind)
    tree = cache.tree
    for n, ids in enumerate(INSERTS):
        extra = {}
        if kind == "mamba":
            req = Req(f"r{n}", "", array("q", []), SamplingParams(max_new_tokens=1, temperature=0))
            cache.req_pool.alloc([req])
            extra["mamba_value"] = req.kv.mamba_pool_idx.unsqueeze(0)
        result = tree.insert(InsertParams(key=RadixKey(array("q", ids)), value=cache.allocator.alloc(len(ids)), **extra))
        print("insert", ids, "prefix_len", result.prefix_len, file=sys.stderr)

    def evict(**params):
        print("evict", params, tree.evict(EvictParams(**params)), file=sys.stderr)
        tree.pretty_print()

    def match(ids):
        result = tree.match_prefix(MatchPrefixParams(key=RadixKey(array("q", ids))))
        print("match", ids, result.device_prefix_len, "node", result.last_device_node, file=sys.stderr)

    if kind == "mamba":
        evict(num_tokens=1)
        evict(num_tokens=0, mamba_num=1)
        for ids in ([1, 2, 3, 4, 5], INSERTS[3], INSERTS[1]):
            match(ids)
        evict(num_tokens=0, mamba_num=1)
        match(INSERTS[3])
        return
    for full, window in ((1, 0), (0, 1), (1, 2)):
        evict(num_tokens=full, swa_num_tokens=window)
    for ids in ([1, 2, 3, 4, 5], INSERTS[3]):
        match(ids)


if __name__ == "__main__":
    main(sys.argv[1])
