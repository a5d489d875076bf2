"""One oracle run, timed by phase (run in a subprocess pinned to one core by benchmarks.oracle).

Does what `kvconform simulate` does (conformance/commands/simulate.py), in the same order and
with the same functions (the cyclic GC paused throughout, as there), and prints one JSON line
of phase seconds:
    read (file -> JSON), schema (request schema check, unknown-key warnings), parse (reference: validate + tokenize),
    simulate (reference: plan, acquire, publish, evict), write (profile + predictions JSON).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import tempfile
import time

T_START = time.perf_counter()

import reference  # noqa: E402
import reference.simulator as simulator_mod  # noqa: E402
from conformance.cases import schemas  # noqa: E402
from conformance.commands.simulate import _write_json  # noqa: E402

T_IMPORTED = time.perf_counter()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engineConfig", required=True)
    ap.add_argument("--inputFile", required=True)
    ap.add_argument("--maxRecords", type=int, default=1024)
    ap.add_argument("--noSchema", action="store_true")
    a = ap.parse_args()
    t = {"imports": T_IMPORTED - T_START}
    parse_s = [0.0]
    real_parse = simulator_mod.parse_request_file

    def timed_parse(*args, **kw):
        t0 = time.perf_counter()
        try:
            return real_parse(*args, **kw)
        finally:
            parse_s[0] += time.perf_counter() - t0

    simulator_mod.parse_request_file = timed_parse
    gc.disable()
    t0 = time.perf_counter()
    config = schemas.read_json(a.engineConfig)
    engine = reference.engine_from_config(config)
    doc = schemas.read_json(a.inputFile)
    t1 = time.perf_counter()
    if not a.noSchema:
        schemas.check(doc, "request", a.inputFile)
        schemas.unknown_request_keys(doc)
    t2 = time.perf_counter()
    flags = reference.RuntimeFlags(enable_context_reuse=True, max_records=a.maxRecords, dump_profile=True)
    predictions, profile = reference.simulate(engine, flags, doc, os.path.dirname(a.inputFile))
    t3 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        _write_json(os.path.join(d, "profile.json"), profile)
        _write_json(os.path.join(d, "predictions.json"), predictions)
    t4 = time.perf_counter()
    gc.enable()
    t.update(read=t1 - t0, schema=t2 - t1, parse=parse_s[0], simulate=t3 - t2 - parse_s[0], write=t4 - t3)
    cc = profile["context_cache"]
    pf = profile["prefill"]
    out = {"seconds": t, "prompt_tokens": pf["reused_tokens"] + pf["computed_tokens"],
           "reused_tokens": pf["reused_tokens"], "hit_sequences": cc["hit_sequences"],
           "admitted": cc["admitted_sequences"], "records": cc["records"],
           "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
