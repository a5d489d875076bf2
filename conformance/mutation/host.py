"""The judging process: `python -m conformance.mutation.host` judges a batch of mutants.

Starting Python with torch costs seconds of CPU, more than judging most mutants; so a host
imports the heavy libraries (and, for a backend campaign, the kit's unmutated runner) once, then
forks one child per mutant. The child installs the mutant (judges.install), judges it and writes
its verdict to a file; the host kills the child's whole process group past the deadline (a
mutant that loops forever is caught as a runtime that never answers: TIMEOUT). Every child starts
from the same unmutated state, whatever the mutant before it did.

Protocol: one JSON document on stdin {"root", "judge", "settings", "items": [{"mutant", "selection"}]};
one JSON line per mutant on stdout. `judge_batch` (below) runs a host from a worker of the
campaign's pool (a local process or a Ray task).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

PRELOAD = {   # third-party libraries the children share; the unmutated runner for backend campaigns
    "common": ["numpy", "jinja2", "tokenizers", "PIL.Image", "jsonschema", "hypothesis", "httpx", "tabulate",
               "tqdm", "safetensors", "orjson", "parso"],
    "edge": ["torch", "conformance.cli", "conformance.commands.run", "conformance.run.suite",
             "conformance.adapters.inprocess", "conformance.judge.oracle"],
    "peer": ["torch", "conformance.cli", "conformance.commands.run", "conformance.peers.runner",
             "conformance.adapters.openai", "conformance.judge.peer_oracle"],
    "kit": ["torch", "pytest", "xdist"],
}


def judge_batch(root: str, judge: str, settings: dict, items: list[dict]) -> list[dict]:
    """Run one host on `items` and return its results, one per item (a worker's unit of work)."""
    request = json.dumps({"root": root, "judge": judge, "settings": settings, "items": items})
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.Popen([sys.executable, "-m", "conformance.mutation.host"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root, env=env,
                            start_new_session=True)
    previous = _on_stop(lambda: _kill_group(proc.pid))     # a stopped worker stops its host and the child
    try:
        stdout, stderr = proc.communicate(request)
    finally:
        _restore(previous)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    got = {r["id"] for r in results}
    for item in items:          # a host that died takes its unjudged mutants with it: judged again on resume
        if item["mutant"]["path"] and _id(item) not in got:
            results.append({"id": _id(item), "status": "pending",
                            "failure": f"the judging host stopped (exit {done.returncode}): {done.stderr[-300:]}"})
    return results


def _on_stop(action) -> dict:
    """Run `action` and exit on SIGTERM or SIGINT (only the main thread may set handlers: a Ray
    worker's task thread leaves them as they are)."""
    def stop(signum, frame):
        action()
        os._exit(128 + signum)
    saved = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            saved[sig] = signal.signal(sig, stop)
        except ValueError:
            pass
    return saved


def _restore(saved: dict) -> None:
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def _id(item: dict) -> str:
    m = item["mutant"]
    return f"{m['path']}:{m['line']}:{m['operator']}:{m['occurrence']}"


def main() -> int:
    request = json.loads(sys.stdin.read())
    root, judge, settings = Path(request["root"]), request["judge"], request["settings"]
    preload(judge)
    if judge == "peer" and settings.get("reuse_engines", True):
        load_engines(settings.get("engines") or {}, {i["mutant"]["path"] for i in request["items"]})
    from .operators import Mutant, apply
    for item in request["items"]:
        mutant = Mutant.from_json(item["mutant"])
        started = time.monotonic()
        if not mutant.path:                                    # the baseline: the unmutated kit
            source, diff = None, ""
        else:
            try:
                source, diff = apply(root, mutant)
            except Exception as e:
                print(json.dumps({"id": mutant.id, "status": "invalid", "failure": str(e)[:400], "diff": ""}),
                      flush=True)
                continue
        result = fork_and_judge(root, judge, dict(settings, first=item.get("first")), mutant, source,
                                item["selection"])
        result.update(id=mutant.id if mutant.path else "baseline", diff=diff,
                      seconds=round(time.monotonic() - started, 2))
        print(json.dumps(result), flush=True)
    return 0


def preload(judge: str) -> None:
    import importlib
    for name in PRELOAD["common"] + PRELOAD[judge]:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)     # no intra-op threads: forking stays safe
    if judge != "kit":          # the peer judge's host may load the model later (load_engines), never the caches
        assert not any(n.split(".")[0] == "gpu_backend" for n in sys.modules), "the host imported the backend"


ENGINE_MODULES = ("gpu_backend.peer_engine",)
"""What loading the server's model imports: the model and its tokenizer, never the server or its
caches (the peer campaign's mutants), which install() checks."""


def load_engines(engines: dict, mutated: set[str]) -> None:
    """Load the server's model once per host (about a second each time otherwise), for the children
    to serve from. Skipped where the batch mutates a module the model's code imports, or where
    loading it started a process (a template process) that forked children would share."""
    import importlib
    from .judges import LOADED, module_name
    before = set(sys.modules)
    engine_module = importlib.import_module(ENGINE_MODULES[0])
    if any(module_name(path)[0] in sys.modules for path in mutated if path):
        for name in set(sys.modules) - before:      # a mutated module came with it: the children load it all
            del sys.modules[name]
        return
    for kind, built in engines.items():
        LOADED[kind] = engine_module.PeerEngine(built["engine"], "cpu")
    template = sys.modules.get("gpu_backend.chat_template")
    if template is not None and getattr(getattr(template, "TemplateProcess", None), "proc", None) is not None:
        LOADED.clear()


def fork_and_judge(root: Path, judge: str, settings: dict, mutant, source: str | None, selection: dict) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix="kvconform-mutant-"))
    log, out = workdir / "log.txt", workdir / "result.json"
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:                                            # the child
        _restore({signal.SIGTERM: signal.SIG_DFL, signal.SIGINT: signal.SIG_DFL})
        code = 0
        try:
            os.setsid()
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            from .judges import JUDGES, KIT_PACKAGES, install
            os.environ["KVCONFORM_MUTANT"] = mutant.id if mutant.path else "baseline"
            if source is not None:
                install(root, mutant.path, source, workdir, purge=KIT_PACKAGES if judge == "kit" else ())
            elif judge == "kit":
                install_nothing = [n for n in sys.modules if n.split(".")[0] in KIT_PACKAGES
                                   and not n.startswith("conformance.mutation")]
                for name in install_nothing:
                    del sys.modules[name]
            result = JUDGES[judge](selection, dict(settings, root=str(root)), workdir, log)
        except BaseException:                               # the harness itself failed: not a verdict
            result = {"status": "pending", "failure": "judging failed: " + traceback.format_exc()[-600:]}
            code = 1
        try:
            out.write_text(json.dumps(result))
        finally:
            os._exit(code)
    previous = _on_stop(lambda: _kill_group(pid))          # the host stopped: its child goes with it
    try:
        return _wait(pid, settings, log, out, workdir)
    finally:
        _restore(previous)


def _wait(pid: int, settings: dict, log: Path, out: Path, workdir: Path) -> dict:
    deadline = time.monotonic() + float(settings.get("deadline_s", 600))
    status = None
    while status is None:
        waited, status_code = os.waitpid(pid, os.WNOHANG)
        if waited:
            status = status_code
            break
        if time.monotonic() > deadline:
            _kill_group(pid)
            os.waitpid(pid, 0)
            _kill_group(pid)
            result = {"status": "killed", "verdict": "TIMEOUT", "profile": None, "case_id": None, "rule": None,
                      "failure": f"no verdict within {settings.get('deadline_s', 600)} s (the mutant loops or hangs)"}
            result["log_tail"] = _tail(log)
            _cleanup(workdir)
            return result
        time.sleep(0.05)
    _kill_group(pid)          # a template worker or server the child left behind
    if out.exists():
        result = json.loads(out.read_text())
    else:                     # the child died without a word: the mutant crashed the process
        signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        result = {"status": "killed", "verdict": "ERROR", "profile": None, "case_id": None, "rule": None,
                  "failure": f"the judging process died ({'signal ' + str(signum) if signum else 'exit ' + str(os.WEXITSTATUS(status))})"}
    result["log_tail"] = _tail(log)
    _cleanup(workdir)
    return result


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-1200:] if log.exists() else ""


def _cleanup(workdir: Path) -> None:
    import shutil
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
