"""Shared helpers: timing, medians, machine description, load sampling, side-by-side options."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def spread(xs):
    """(min, max) of the repetitions, for the JSON."""
    return [min(xs), max(xs)] if xs else []


def loadavg():
    try:
        return list(os.getloadavg())
    except OSError:
        return None


def machine() -> dict:
    """What the numbers were measured on."""
    info = {"platform": platform.platform(), "python": sys.version.split()[0], "cpus": os.cpu_count(),
            "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None}
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                info["memory_gib"] = round(int(line.split()[1]) / 2 ** 20, 1)
                break
    except OSError:
        pass
    try:
        import torch
        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
        info["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        pass
    info["loadavg_at_start"] = loadavg()
    info["code"] = code_provenance()
    return info


PACKAGES = ("gpu_backend", "reference", "conformance", "numerical_reference", "faulty_backends")


def code_provenance() -> dict:
    """Which commit, whether the packages have uncommitted changes, and where each was imported from:
    its folder in this checkout, or "another checkout" (never a path of this machine)."""
    out = {}
    try:
        out["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                       timeout=10).stdout.strip() or None
        dirty = subprocess.run(["git", "status", "--porcelain", "--", *PACKAGES],
                               cwd=ROOT, capture_output=True, text=True, timeout=10).stdout
        out["uncommitted_files"] = len(dirty.splitlines())
    except (OSError, subprocess.SubprocessError):
        pass
    import importlib.util
    for pkg in PACKAGES:
        spec = importlib.util.find_spec(pkg)
        where = os.path.dirname(spec.origin) if spec and spec.origin else None
        inside = where is not None and os.path.commonpath([os.path.abspath(where), str(ROOT)]) == str(ROOT)
        out[pkg] = None if where is None else os.path.relpath(where, ROOT) if inside else "another checkout"
    return out


def run_json(cmd, **kw) -> dict:
    """Run a command that prints one JSON object as its last stdout line."""
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)
    return json.loads(out.stdout.strip().splitlines()[-1])


def child_env(**extra) -> dict:
    """Environment of child processes: the caller's PYTHONPATH first (so a run pointed at another
    copy of the packages keeps it), then the repository."""
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": (path + os.pathsep if path else "") + str(ROOT), **extra}


MOONCAKE_TRACES = ("conversation_trace.jsonl", "toolagent_trace.jsonl", "synthetic_trace.jsonl")


def trace_label(path: str) -> str:
    """How a result names the trace it measured: one of Mooncake's FAST'25 traces by where it is
    published (docs/simulate.md section 5), any other by its file name, never by where this
    machine keeps it."""
    name = os.path.basename(path)
    return f"kvcache-ai/Mooncake FAST25-release/traces/{name}" if name in MOONCAKE_TRACES else name


def recorded_command(prog: str, argv: list, stand_ins: dict | None = None) -> str:
    """The command line a result records: a `--trace` argument as `trace_label` names it, and an
    option in `stand_ins` (such as `--old`, another checkout) by the words given there, so no
    result holds a path of the machine it ran on."""
    args, stand_ins = list(argv), stand_ins or {}
    for i, arg in enumerate(args):
        option, _, value = arg.partition("=")
        if i and args[i - 1] == "--trace":
            args[i] = trace_label(arg)
        elif i and args[i - 1] in stand_ins:
            args[i] = stand_ins[args[i - 1]]
        elif value and option == "--trace":
            args[i] = "--trace=" + trace_label(value)
        elif value and option in stand_ins:
            args[i] = f"{option}={stand_ins[option]}"
    return " ".join([prog] + args)


def one_core() -> list:
    """The command prefix that pins a child process to one core (taskset), or [] where there is none."""
    return ["taskset", "-c", str(min(os.sched_getaffinity(0)))] if shutil.which("taskset") else []


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def side_by_side_parser(doc: str) -> argparse.ArgumentParser:
    """The options of a benchmark of two checkouts side by side (`--old`, `--new`, `--reps`, `--json`)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--old", type=Path, required=True, help="the checkout before the change")
    ap.add_argument("--new", type=Path, default=Path("."), help="the checkout with it (default: .)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", type=Path, help="also write the result here")
    return ap


def revision(tree: Path) -> str:
    """The short commit a checkout is at ("?" where git cannot tell)."""
    out = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or "?"
