"""tools/test.sh starts one pytest worker per core the process may use, and one more (the
suite also waits: see the script).

GNU `nproc` honours OMP_NUM_THREADS, and the script exports OMP_NUM_THREADS=1 for its workers'
BLAS; counting the cores after that export ran the whole suite on one worker.
"""
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_test_script_counts_cores_whatever_omp_num_threads_says():
    env = {k: v for k, v in os.environ.items() if k != "KVCONFORM_TEST_WORKERS"}
    env["OMP_NUM_THREADS"] = "1"
    out = subprocess.run([str(ROOT / "tools" / "test.sh"), "--print-workers"], env=env,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert int(out.strip()) == len(os.sched_getaffinity(0)) + 1, (
        f"tools/test.sh would start {out.strip()} worker(s) on a machine with "
        f"{len(os.sched_getaffinity(0))} usable core(s) when OMP_NUM_THREADS=1 (expected cores + 1)")
