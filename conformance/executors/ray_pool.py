"""The Ray worker pool: units run as Ray tasks on a cluster (the `ray` extra).

The only module of the kit that imports `ray`. Each unit is one task named `kvconform:<unit>`,
with the resources its backend needs (one GPU for a CUDA backend). Ray retries a task whose
worker died (killed, out of memory, its node lost) up to `max_retries` times; every attempt
registers with a small actor as it starts, so the driver knows a result came from a retry and
says so in the report, and a unit that never returns ends ERROR with the reason. Application
errors are not retried: the units catch what the backend raises, so an exception escaping one
is the kit's own and would fail the same way again.

Before any unit runs, every node is checked for what the run reads there (`check_nodes`): the
kit with the same sources, and the files the plan and the adapter name at the same paths.
"""
from __future__ import annotations

import signal
import threading

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from .. import KvconformError
from .local import TaskFailed, Ticket
from .units import worker_name

LOCAL_OBJECT_STORE_BYTES = 256 * 1024 * 1024
"""The object store of a cluster the kit starts itself: results and reproducers are small."""


@ray.remote(num_cpus=0)
class AttemptLog:
    """Which worker started each attempt of each task."""

    def __init__(self):
        self.attempts: dict[str, list[str]] = {}

    def begin(self, token: str, worker: str) -> int:
        self.attempts.setdefault(token, []).append(worker)
        return len(self.attempts[token])

    def of(self, token: str) -> list[str]:
        return list(self.attempts.get(token, []))


def _call(log, token: str, fn, *args):
    ray.get(log.begin.remote(token, worker_name()))
    return fn(*args)


class RayPool:
    name = "ray"

    def __init__(self, address: str | None, local_cpus: int, wants_gpu: bool | None, max_retries: int = 3):
        """`wants_gpu`: True asks one GPU per task (refused up front on a cluster without one),
        None asks one when the cluster has GPUs, False never."""
        self.address, self.max_retries = address, max_retries
        self.owned = connect(address, local_cpus)
        try:
            resources = ray.cluster_resources()
            gpus = int(resources.get("GPU", 0))
            if wants_gpu and not gpus:
                raise KvconformError("the backend runs on CUDA (--device cuda) and the Ray cluster has no GPU")
            self.gpu = bool(gpus) if wants_gpu is None else wants_gpu
            self.slots = max(1, gpus if self.gpu else int(resources.get("CPU", 1)))
            self._log = AttemptLog.remote()
            self._task = ray.remote(_call)
            self._count = 0
        except BaseException:
            self.close()
            raise

    def submit(self, key: str, fn, *args) -> Ticket:
        self._count += 1
        token = f"{self._count}:{key}"
        ref = self._task.options(name=f"kvconform:{key}", num_cpus=1, num_gpus=1 if self.gpu else 0,
                                 max_retries=self.max_retries, retry_exceptions=False).remote(
            self._log, token, fn, *args)
        return Ticket(key, (ref, token))

    def wait(self, tickets: list[Ticket], timeout: float | None = None) -> list[Ticket]:
        if not tickets:
            return []
        by_ref = {t.handle[0]: t for t in tickets}
        ready, _ = ray.wait(list(by_ref), num_returns=1, timeout=timeout)
        if ready:       # and whatever else has finished by now
            ready, _ = ray.wait(list(by_ref), num_returns=len(by_ref), timeout=0)
        return [by_ref[r] for r in ready]

    def result(self, ticket: Ticket):
        ref, token = ticket.handle
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as e:     # the unit itself raised: the kit's error, not retried
            cause = e.cause if getattr(e, "cause", None) is not None else e
            raise TaskFailed(f"the task raised {type(cause).__name__}: {_first_line(cause)}",
                             len(self.attempts(ticket))) from None
        except ray.exceptions.RayError as e:         # its worker or node died on every attempt
            tries = len(self.attempts(ticket))
            raise TaskFailed(f"the Ray worker running it died on each of {tries} attempt(s) (killed, out of memory "
                             f"or its node lost; Ray retries {self.max_retries} time(s)): {type(e).__name__}: "
                             f"{_first_line(e)}", tries) from None

    def attempts(self, ticket: Ticket) -> list[str]:
        """The workers that started the ticket's task, one per attempt."""
        try:
            return ray.get(self._log.of.remote(ticket.handle[1]), timeout=30)
        except ray.exceptions.RayError:
            return []

    def cancel(self, tickets: list[Ticket]) -> None:
        for t in tickets:
            try:
                ray.cancel(t.handle[0], force=True)
            except Exception:  # already finished, or its worker already gone
                pass

    def close(self) -> None:
        log = getattr(self, "_log", None)
        if log is not None:
            try:
                ray.kill(log)
            except Exception:
                pass
            self._log = None
        if self.owned and ray.is_initialized():
            ray.shutdown()
            self.owned = False

    def describe(self) -> dict:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        return {"name": "ray", "address": self.address or "local", "nodes": len(nodes), "workers": self.slots,
                "task_resources": {"num_cpus": 1, "num_gpus": 1 if self.gpu else 0},
                "max_retries": self.max_retries}

    # --- up-front checks --------------------------------------------------------------------------
    def check_nodes(self, paths: list[str], fingerprint: dict) -> None:
        """Every alive node must run the kit with the driver's sources and see `paths` (files the
        plan and the adapter read) at the same place; else one line naming the node, exit 2."""
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        probe = ray.remote(_probe)
        refs = {n.get("NodeManagerAddress", n["NodeID"][:8]): probe.options(
            num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(paths)
            for n in nodes}
        for node, ref in refs.items():
            try:
                found, missing = ray.get(ref, timeout=300)
            except ray.exceptions.RayError as e:
                raise KvconformError(f"Ray node {node} cannot run the kit ({type(e).__name__}: {_first_line(e)}): "
                                     "install kvconform on every node") from None
            if found != fingerprint:
                raise KvconformError(f"Ray node {node} runs other kit sources ({_differs(fingerprint, found)}): "
                                     "every node must run the kit that the driver runs")
            if missing:
                raise KvconformError(f"Ray node {node} lacks {missing[0]}"
                                     + (f" and {len(missing) - 1} more file(s)" if len(missing) > 1 else "")
                                     + ": every file the run reads must be at the same path on every node "
                                       "(a shared file system, or the same container image)")


def _probe(paths: list[str]) -> tuple[dict, list[str]]:
    import os
    import shutil
    from .units import kit_fingerprint
    missing = [p for p in paths if not (os.path.exists(p) if os.sep in p else shutil.which(p))]
    return kit_fingerprint(), missing


def connect(address: str | None, local_cpus: int) -> bool:
    """Join the cluster at `address`, or start a local one with `local_cpus` worker CPUs; True
    when this call started or joined it (and `close` must leave it). A session already
    connected (a test's cluster) is used as it is. Ray's own signal handlers are undone: Ctrl-C,
    SIGTERM and SIGHUP end the run with a resumable report, as without Ray."""
    if ray.is_initialized():
        return False
    main = threading.current_thread() is threading.main_thread()
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)} if main else {}
    try:
        if address:
            ray.init(address=address, log_to_driver=False, logging_level="WARNING")
        else:
            ray.init(num_cpus=local_cpus, object_store_memory=LOCAL_OBJECT_STORE_BYTES, include_dashboard=False,
                     log_to_driver=False, logging_level="WARNING")
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = f"--ray-address {address}" if address else "a local Ray cluster"
        raise KvconformError(f"{where}: cannot start or join the cluster: {_first_line(e)}") from None
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    return True


def _first_line(e) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def _differs(mine: dict, theirs: dict) -> str:
    keys = [k for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)]
    return ", ".join(f"{k} {theirs.get(k)} (driver: {mine.get(k)})" for k in keys)
