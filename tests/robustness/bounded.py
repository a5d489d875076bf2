"""Running a command in a child process under a memory cap and measuring what it used: peak
resident memory and CPU time (not wall time, which a loaded machine stretches). The cap
(RLIMIT_DATA) keeps a regression from taking the shared machine's memory: the child fails
with MemoryError instead."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CAP_BYTES = 3 * 2 ** 30

_WRAPPER = r"""
import json, os, resource, runpy, sys, traceback
cap = int(os.environ["KVCONFORM_TEST_CAP"])
resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
module, sys.argv = sys.argv[1], [sys.argv[1]] + sys.argv[2:]
rc = None
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    rc = 0
except SystemExit as e:
    rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
except BaseException:
    traceback.print_exc()
    rc = "traceback"
finally:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    with open(os.environ["KVCONFORM_TEST_STATS"], "w") as f:
        json.dump({"rc": rc, "rss_mb": ru.ru_maxrss / 1024, "cpu_s": ru.ru_utime + ru.ru_stime}, f)
"""


@dataclass
class Measured:
    rc: object
    err: str
    rss_mb: float
    cpu_s: float


def measured(module: str, argv: list[str], tmp: Path, timeout: float = 300, cwd: Path = ROOT) -> Measured:
    """`python -m module argv...`, its exit code, stderr, peak RSS (MB) and CPU seconds."""
    stats = tmp / f"stats-{os.getpid()}-{len(list(tmp.glob('stats-*')))}.json"
    env = dict(os.environ, KVCONFORM_TEST_CAP=str(CAP_BYTES), KVCONFORM_TEST_STATS=str(stats),
               PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", _WRAPPER, module, *map(str, argv)], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=timeout)
    doc = json.loads(stats.read_text()) if stats.exists() else {"rc": p.returncode, "rss_mb": -1, "cpu_s": -1}
    return Measured(doc["rc"], p.stderr, doc["rss_mb"], doc["cpu_s"])
