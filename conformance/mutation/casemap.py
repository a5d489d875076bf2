"""Which curated cases execute each line: the per-module case map that keeps judging cheap.

A mutant can change nothing before its line runs, so the only cases that can catch it are those
that execute its line. The map is measured once per campaign (and kept in the store, keyed by
the digest of the sources and cases it was measured on): every curated case of each semantics
profile run in process on the unmutated backend, every peer case of each peer profile against
the bundled server, under Coverage.py with one dynamic context per case. Lines that run when the
module is imported (definitions, constants, defaults) belong to every case.

Only cases the unmutated backend passes are kept (a mutant cannot be caught by a case the
original fails). A mutant on a line no case executes is `not_covered`: a survivor without a run.

Run as `python -m conformance.mutation.casemap` (JSON in, JSON out) so that measuring imports
nothing into the process that drives the campaign.
"""
from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

ALL = "*"
"""The context of lines that run at import time: every case."""


def statement_line(source: str, line: int) -> int:
    """The line Coverage.py records for the statement that holds `line` (a condition continued on
    a second line is recorded at its statement's first line)."""
    best = None
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno):
            if best is None or (node.end_lineno - node.lineno) <= (best.end_lineno - best.lineno):
                best = node
    if best is None:
        return line
    if isinstance(best, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and best.body[0].lineno <= line:
        return line
    return best.lineno


def _measure(root: Path, relpaths: list[str], run) -> dict:
    """{relpath: {line: [context, ...]}} for what `run(switch)` executes; `switch(name)` names the
    context of what runs next."""
    import coverage
    files = {str(root / p): p for p in relpaths}
    cov = coverage.Coverage(data_file=None, include=list(files), branch=False, config_file=False)
    cov.start()
    try:
        kept = run(cov.switch_context)
    finally:
        cov.stop()
    data = cov.get_data()
    out = {}
    for full, rel in files.items():
        lines = data.contexts_by_lineno(full) or {}
        out[rel] = {str(line): sorted({c if c else ALL for c in contexts}) for line, contexts in lines.items()}
    return {"lines": out, "cases": kept}


def _import_all(relpaths: list[str]) -> None:
    """Import the measured modules before any case runs, so the lines that run at import time
    (definitions, defaults, constants) are recorded outside every case: they belong to all."""
    import importlib
    for rel in relpaths:
        parts = rel[:-3].split("/")
        importlib.import_module(".".join(parts[:-1] if parts[-1] == "__init__" else parts))


def edge_map(root: Path, relpaths: list[str], profiles: list[str], cases: list[str] | None = None) -> dict:
    import torch
    torch.set_num_threads(1)
    from ..adapters import make_adapter
    from ..run.execute import run_case
    from ..run.suite import case_cost, make_plan

    def run(switch):
        kept = {}
        _import_all(relpaths)        # definitions and constants run now, outside any case: every case's
        adapter = make_adapter("inprocess", device="cpu")
        manifest = adapter.capabilities()
        for profile in profiles:
            plan = make_plan(cases or None, None, None, None, False, generated=False, curated=True, families=None,
                             shard=None, profile=profile)
            kept[profile] = []
            for case in sorted(plan.cases, key=case_cost):
                switch(f"{profile}\t{case.path}")
                result = run_case(case, adapter, manifest)
                switch("")
                if result.conformant and result.verdict.name != "NOT_SUPPORTED":
                    kept[profile].append(str(case.path))
        adapter.close()
        return kept
    return _measure(root, relpaths, run)


def peer_map(root: Path, relpaths: list[str], deployments: dict, engines: dict) -> dict:
    """Per peer deployment (one context per deployment: its suite is run whole, since the server's
    cache carries from case to case where the profile offers no reset, and a mutant's damage
    may show only in a later case)."""
    import tempfile
    import torch
    torch.set_num_threads(1)
    from ..adapters.bundled_server import serving
    from .judges import _kvconform, outcome_of
    from .targets import peer_setting_args

    def run(switch):
        kept = {}
        _import_all(relpaths)
        for name, d in deployments.items():
            report = Path(tempfile.mkdtemp(prefix="kvconform-map-"))
            engine = engines[d["engine"]]
            switch(f"{name}\t{name}")
            with serving(d["profile"], engine["engine"], d["settings"]) as url:
                argv = ["run", "--backend", "openai", "--base-url", url, "--profile", d["profile"], "--tokenizer",
                        engine["tokenizer"], "--report", str(report), "--force", "--no-progress",
                        *peer_setting_args(d["settings"])]
                rc = _kvconform(argv)
            switch("")
            kept[name] = [name] if outcome_of(report, rc, name, report / "none")["status"] == "survived" else []
        return kept
    return _measure(root, relpaths, run)


def script_users(source: str, attribute: str) -> list[int]:
    """The first statement line of each function of a module that reads `attribute`: the functions
    that start a module running as a script of its own (the template worker) and talk to it.
    Coverage.py in this process never sees the script's lines, and the process is started once and
    then kept, so the cases that call these functions stand for every line of the script."""
    out = set()
    for fn in ast.walk(ast.parse(source)):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                isinstance(node, ast.Name) and node.id == attribute and isinstance(node.ctx, ast.Load)
                for node in ast.walk(fn)):
            first = fn.body[0]
            if isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant) and len(fn.body) > 1:
                first = fn.body[1]      # the docstring is not recorded as executed
            out.add(first.lineno)
    return sorted(out)


def merge_selections(selections: list[dict]) -> dict:
    """The union of several {profile: [case, ...]} selections, each profile's cases in first-seen order."""
    out: dict[str, list] = {}
    for chosen in selections:
        for profile, cases in chosen.items():
            out.setdefault(profile, [])
            out[profile] += [c for c in cases if c not in out[profile]]
    return out


def selection_for(casemap: dict, relpath: str, line: int, import_time: str = "all") -> dict:
    """{profile: [case, ...]} of the cases that execute `line` of `relpath` (statement line), in
    the map's order (cheapest first); {} when none does.

    A line run at import time (a constant, a default, a definition) is executed before any case.
    `import_time="all"`: it belongs to every case. `import_time="users"`: to the profiles (peer
    deployments) that run some other line of the module. The peer caches are imported together
    (gpu_backend/peer_cache/__init__.py), so every deployment imports SGLang's module, but only
    SGLang deployments run its code: a constant of it changes what only that code reads. A module
    none of whose lines runs after import (a table of the others) belongs to every profile."""
    contexts = casemap["lines"].get(relpath, {}).get(str(line))
    if contexts is None:
        return {}
    users = None
    if ALL in contexts and import_time == "users":
        users = {c.split("\t", 1)[0] for ctx in casemap["lines"].get(relpath, {}).values() for c in ctx if c != ALL}
        users = users or None           # a module whose code runs only at import (a table): every profile
    out = {}
    for profile, cases in casemap["cases"].items():
        if ALL in contexts:
            if users is None or profile in users:
                out[profile] = list(cases)
            continue
        named = {c.split("\t", 1)[1] for c in contexts if c.startswith(profile + "\t")}
        chosen = [c for c in cases if c in named]
        if chosen:
            out[profile] = chosen
    return out


def main() -> int:
    request = json.loads(sys.stdin.read())
    root = Path(request["root"])
    if request["judge"] == "edge":
        doc = edge_map(root, request["paths"], request["profiles"], request.get("cases"))
    else:
        doc = peer_map(root, request["paths"], request["profiles"], request["engines"])
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
