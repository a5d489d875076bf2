"""`--executor ray`: a local Ray cluster of two worker CPUs runs what a local run runs.

Under the `ray` marker (excluded from the default run; `pytest -m ray`), skipped when the `ray`
extra is not installed. The cluster is started once for the module, with a small object store
and no dashboard, and shut down afterwards. Every expectation is a local run of the same plan
and seed: the distributed report must hold the same verdicts, failures and files.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from conformance.cli import main as kvconform  # noqa: E402
from conformance.report.document import Report, check_report  # noqa: E402

pytestmark = pytest.mark.ray
ROOT = Path(__file__).resolve().parents[2]
# the curated set and one generated family at a fixed seed
RUN = ["--families", "text", "--examples", "20", "--min-batches", "5", "--seed", "3", "--device", "cpu",
       "--no-progress"]
VARIANT = "decode-end-off-by-one"      # breaks CR-PUB-2: fails PUB cases and the text family


@pytest.fixture(scope="module")
def cluster():
    """The address of a local Ray cluster: two worker CPUs, a 200 MB object store."""
    ray.init(num_cpus=2, object_store_memory=200 * 1024 * 1024, include_dashboard=False, log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def local_report(tmp_path_factory):
    folder = tmp_path_factory.mktemp("local") / "rep"
    assert kvconform(["run", *RUN, "--report", str(folder)]) == 0
    return _report(folder)


def _report(folder: Path) -> dict:
    doc = json.loads((Path(folder) / "report.json").read_text())
    assert not check_report(doc), check_report(doc)
    return doc


def _verdicts(doc: dict) -> list:
    return [(c["id"], c["verdict"], [(f["rule"], f["what"], f["request"]) for f in c["failures"]])
            for c in doc["cases"]]


def _files(folder: Path) -> dict:
    """The files a run leaves beside report.json: reproducers and media byte for byte; the
    evidence of failing invocations by name (backend profiles hold timings)."""
    return {str(p.relative_to(folder)): None if ".files" in p.parent.name else p.read_bytes()
            for p in sorted(folder.rglob("*"))
            if p.is_file() and p.parts[len(folder.parts)] in ("reproducers", "materialized")}


def test_the_curated_set_and_a_seeded_family_get_the_verdicts_of_a_local_run(cluster, local_report, tmp_path):
    folder = tmp_path / "rep"
    assert kvconform(["run", "--executor", "ray", *RUN, "--report", str(folder)]) == 0
    doc = _report(folder)
    assert doc["complete"] and doc["summary"] == local_report["summary"]
    assert _verdicts(doc) == _verdicts(local_report)
    family = [c for c in doc["cases"] if c["id"] == "generated/text"][0]["details"]
    mine = [c for c in local_report["cases"] if c["id"] == "generated/text"][0]["details"]
    assert (family["examples"], family["batches_checked"]) == (mine["examples"], mine["batches_checked"])
    assert doc["executor"]["name"] == "ray" and doc["executor"]["workers"] == 2 and doc["executor"]["retried"] == []


def test_failures_leave_the_same_reproducers_as_a_local_run(cluster, tmp_path):
    """A faulty variant: FAIL verdicts, reproducers and their evidence, byte for byte the local ones."""
    from conformance.executors.distributed import execute_distributed
    from conformance.executors.ray_pool import RayPool
    from conformance.adapters.faulty import FaultyAdapter
    from conformance.executors.units import AdapterSpec
    from conformance.run.suite import execute, make_plan

    def plan():
        return make_plan(None, None, ["PUB"], None, False, generated=True, curated=True, families=["text"],
                         shard=None, examples=30, seed=2, min_batches=5)
    adapter = FaultyAdapter(VARIANT, device="cpu")
    local = Report(tmp_path / "local", adapter.name, adapter.capabilities(), {}, {})
    execute(plan(), adapter, local, progress=False)
    local.finish()
    distributed = Report(tmp_path / "ray", adapter.name, adapter.capabilities(), {}, {})
    pool = RayPool(None, 2, wants_gpu=False)
    try:
        execute_distributed(plan(), AdapterSpec.of("inprocess", variant=VARIANT, device="cpu"), adapter, pool,
                            distributed, progress=False)
    finally:
        pool.close()
    distributed.finish()
    a, b = _report(tmp_path / "local"), _report(tmp_path / "ray")
    assert any(c["verdict"] == "FAIL" for c in a["cases"]), "the variant must fail something here"
    assert _verdicts(b) == _verdicts(a)
    assert [c.get("reproducer") for c in b["cases"]] == [c.get("reproducer") for c in a["cases"]]
    assert _files(tmp_path / "ray") == _files(tmp_path / "local")


def _descendants_titled(prefix: str) -> list[int]:
    """Processes of this test's Ray cluster (descendants of this process) whose title starts
    with `prefix`: Ray names a busy worker `ray::<task name>`."""
    parents, titles = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            titles[int(entry)] = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    me, out = os.getpid(), []
    for pid, title in titles.items():
        if not title.startswith(prefix):
            continue
        p = pid
        while p in parents and p not in (0, 1, me):
            p = parents[p]
        if p == me:
            out.append(pid)
    return out


def _driver(cluster: str, *argv: str) -> subprocess.Popen:
    # SIGINT is ignored by background jobs of a non-interactive shell; give the child the default.
    return subprocess.Popen([sys.executable, "-m", "conformance.cli", "run", "--executor", "ray",
                             "--ray-address", cluster, *argv], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_a_worker_killed_mid_task_is_retried_and_the_report_says_so(cluster, local_report, tmp_path):
    folder = tmp_path / "rep"
    driver = _driver(cluster, *RUN, "--report", str(folder))
    killed, busy_since = None, None
    deadline = time.monotonic() + 240
    while killed is None and driver.poll() is None and time.monotonic() < deadline:
        busy = _descendants_titled("ray::kvconform:generated/text")
        busy_since = (busy_since or time.monotonic()) if busy else None
        if busy and time.monotonic() - busy_since > 0.2:        # well inside the family's task
            os.kill(busy[0], signal.SIGKILL)
            killed = busy[0]
        time.sleep(0.02)
    out, err = driver.communicate(timeout=300)
    assert killed, f"never saw the family's task running: {err[-2000:]}"
    assert driver.returncode == 0, err[-3000:]
    doc = _report(folder)
    assert doc["complete"] and _verdicts(doc) == _verdicts(local_report)
    family = [c for c in doc["cases"] if c["id"] == "generated/text"][0]
    assert family["details"]["attempts"] == 2 and f":{killed}" in family["details"]["retried"]
    assert doc["executor"]["retried"] == ["generated/text"]


def test_a_task_that_keeps_failing_ends_error_with_its_reason(cluster, tmp_path):
    from conformance.adapters import make_adapter
    from conformance.executors.distributed import execute_distributed
    from conformance.executors.ray_pool import RayPool
    from conformance.executors.units import AdapterSpec
    from conformance.run.suite import make_plan
    plan = make_plan(None, ["boundary-p4-k1"], None, None, False, generated=False, curated=True, families=None,
                     shard=None)
    victim = plan.cases[0].id

    class Sabotaged(RayPool):
        """Every attempt of the victim's task kills its own worker."""

        def submit(self, key, fn, *args):
            if key != victim:
                return super().submit(key, fn, *args)

            def die(*_):
                os.kill(os.getpid(), signal.SIGKILL)
            return super().submit(key, die)

    adapter = make_adapter("inprocess", device="cpu")
    report = Report(tmp_path / "rep", "inprocess", adapter.capabilities(), {}, {})
    pool = Sabotaged(None, 2, wants_gpu=False, max_retries=1)
    try:
        execute_distributed(plan, AdapterSpec.of("inprocess", device="cpu"), adapter, pool, report, progress=False)
    finally:
        pool.close()
    doc = report.finish()
    assert not check_report(doc) and doc["complete"] and doc["summary"]["headline"] == "NOT CONFORMANT"
    cases = {c["id"]: c for c in doc["cases"]}
    assert len(cases) == len(plan.cases) >= 3
    assert cases[victim]["verdict"] == "ERROR" and cases[victim]["details"]["attempts"] == 2
    assert "died on each of 2 attempt(s)" in cases[victim]["reason"]
    assert (tmp_path / "rep" / cases[victim]["reproducer"]).is_file()
    assert all(c["verdict"] == "PASS" for i, c in cases.items() if i != victim)


def test_an_interrupted_driver_leaves_a_report_that_resume_completes(cluster, local_report, tmp_path):
    folder = tmp_path / "rep"
    driver = _driver(cluster, *RUN, "--report", str(folder))
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and driver.poll() is None:
        try:
            if len(json.loads((folder / "report.json").read_text())["cases"]) >= 10:
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    driver.send_signal(signal.SIGINT)
    out, err = driver.communicate(timeout=120)
    assert driver.returncode == 130, err[-3000:]
    partial = _report(folder)
    expected = {c["id"]: c["verdict"] for c in local_report["cases"]}
    assert partial["complete"] is False and 10 <= len(partial["cases"]) < len(expected)
    assert all(expected[c["id"]] == c["verdict"] for c in partial["cases"])
    assert "Traceback" not in err and "--resume" in err
    resumed = _driver(cluster, "--resume", "--no-progress", "--report", str(folder))
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err[-3000:]
    doc = _report(folder)
    assert doc["complete"] and {c["id"]: c["verdict"] for c in doc["cases"]} == expected
    assert len(doc["cases"]) == len(expected), "a finished case ran again"


def test_an_executable_missing_on_a_node_is_refused_up_front(cluster, tmp_path, capsys):
    folder = tmp_path / "rep"
    code = kvconform(["run", "--executor", "ray", "--backend", "command", "--executable", "/nonexistent/llm_inference",
                      "--no-generated", "--section", "PLAN", "--report", str(folder)])
    err = capsys.readouterr().err
    assert code == 2 and "lacks /nonexistent/llm_inference" in err and "Traceback" not in err
    assert not folder.exists()


def test_a_campaign_on_ray_finds_the_seeded_variant(cluster, tmp_path):
    from faulty_backends import CATALOGUE
    folder = tmp_path / "rep"
    code = kvconform(["campaign", "--executor", "ray", "--hours", "0.002", "--variant", VARIANT, "--families", "text",
                      "--seed", "2", "--device", "cpu", "--no-progress", "--report", str(folder)])
    assert code == 1
    doc = _report(folder)
    state = doc["campaign"]
    assert state["executor"]["name"] == "ray" and state["executor"]["workers"] == 2
    assert any(d["rule"] in CATALOGUE[VARIANT].rules and (folder / d["reproducer"]).is_file()
               for d in state["distinct_failures"])
    assert state["scenarios_per_minute_per_worker"] == pytest.approx(state["scenarios_per_minute"] / 2, abs=0.1)
