"""Where a run's work happens: `local` (this machine) or `ray` (a Ray cluster, the `ray` extra).

`kvconform run --executor ray` sends the plan's curated cases and generated families to a Ray
cluster as tasks and writes the same report a local run writes (conformance/executors/
distributed.py); `kvconform campaign` draws seed after seed of the generated families on either
executor. Ray is optional: `pip install 'kvconform[ray]'`; only `ray_pool.py` imports it, and
only when `--executor ray` is asked for.
"""
from __future__ import annotations

import argparse
import importlib.util
import os

from .. import KvconformError

NAMES = ("local", "ray")


def add_arguments(parser: argparse.ArgumentParser, local_help: str, group=None) -> None:
    """The executor's options, in `group` (the command's "where the work runs") or their own."""
    g = group if group is not None else parser.add_argument_group("executor")
    g.add_argument("--executor", choices=NAMES, default="local",
                   help=f"where the work runs: local ({local_help}) or ray (a Ray cluster: pip install 'kvconform[ray]')")
    g.add_argument("--ray-address", metavar="ADDR",
                   help="the Ray cluster to join (HOST:PORT of its head, ray://HOST:10001, or auto for the cluster "
                        "`ray start` runs on this machine); default: start a local one with --jobs CPUs")
    g.add_argument("--ray-max-retries", type=_retries, metavar="N",
                   help="times Ray runs a task again after its worker died (default 3)")


def _retries(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"must be between 0 and 100, got {value}")
    return value


def check(args) -> None:
    """Bad input before anything runs: a Ray option without `--executor ray`, or Ray missing."""
    if args.executor != "ray":
        for key in ("ray_address", "ray_max_retries"):
            if getattr(args, key) is not None:
                raise KvconformError(f"--{key.replace('_', '-')} applies to --executor ray, not to --executor local")
        return
    if importlib.util.find_spec("ray") is None:
        raise KvconformError("--executor ray needs Ray, an optional extra: pip install 'kvconform[ray]'")


def make_pool(args, device: str | None, backend: str, workers: int):
    """The worker pool `args` asks for. `workers`: local worker processes, or the CPUs of a local
    Ray cluster the kit starts itself (default: every core)."""
    if args.executor == "local":
        from .local import LocalPool
        return LocalPool(workers)
    from .ray_pool import RayPool
    return RayPool(args.ray_address, workers if workers > 1 else os.cpu_count() or 1, wants_gpu(backend, device),
                   3 if args.ray_max_retries is None else args.ray_max_retries)


def wants_gpu(backend: str, device: str | None) -> bool | None:
    """Whether each task asks Ray for a GPU: a CUDA backend does (`--device cuda`); a backend on
    `auto` (the bundled one, an external runtime) asks one where the cluster has GPUs; the oracle
    and a CPU backend never."""
    if backend in ("reference", "broken") or device == "cpu":
        return False
    return True if device == "cuda" else None
