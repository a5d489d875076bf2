"""The campaign: mutants listed, case maps measured, batches judged on a worker pool, verdicts stored.

A unit of work is a batch of mutants of one module (`--batch` of them), judged by one host
process (host.py) on a worker of the pool: a local process (`--jobs N`) or a Ray task
(`--executor ray`, the pools of conformance/executors). At most as many units are in flight as
the pool has workers, and each verdict is written to the store as its unit comes back, so an
interrupted campaign loses at most the units in flight; running the same command again
resumes it.

Before any mutant, a baseline unit judges the unmutated kit through the same path (host, fork,
`kvconform run` or pytest): it must survive, or the campaign stops (a harness that catches
everything would report a perfect kill rate).
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

from .. import KvconformError
from .casemap import merge_selections, selection_for, script_users, statement_line
from .host import judge_batch
from .judges import SCRIPTS
from .operators import Mutant, apply, mutants_of
from .store import Store
from .targets import (EDGE_PROFILES, KIT_TESTS, PEER_DEPLOYMENTS, PEER_TOKENIZER, ROOT, VISION_TOKENIZER, judge_of,
                      peer_deployments)


def tree_digest(root: Path, folders: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for folder in folders:
        for f in sorted((root / folder).rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts and f.suffix in (".py", ".json", ".jinja", ".txt") \
                    and not f.is_relative_to(root / "conformance" / "mutation"):     # the campaign's own code
                h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def casemap(store: Store, root: Path, judge: str, paths: list[str], progress, cases: list[str],
            profiles: list[str] | None) -> dict:
    """The case map of `judge`'s modules, measured once per state of the sources, the cases and
    the judging code (which cases the unmutated backend passes depends on it) and per case
    selection; a map measured for more profiles serves a run that names fewer."""
    every = list(EDGE_PROFILES) if judge == "edge" else peer_deployments(None)
    chosen = [p for p in EDGE_PROFILES if not profiles or p in profiles] if judge == "edge" else \
        peer_deployments(profiles)
    selection = hashlib.sha256(json.dumps(sorted(cases)).encode()).hexdigest()[:8]
    key = f"casemap:{judge}:{selection}:{tree_digest(root, ('gpu_backend', 'cases', 'conformance', 'reference'))}"
    known = store.get(key)
    if known and set(paths) <= set(known["lines"]) and set(chosen) <= set(known["cases"]):
        return dict(known, cases={p: c for p, c in known["cases"].items() if p in chosen})
    if known and judge == "peer" and set(paths) <= set(known["lines"]):
        measure = [p for p in chosen if p not in known["cases"]]   # deployments only: the map's others stand
    else:
        measure = sorted(set(chosen) | set(known["cases"] if known else ()), key=every.index)
        known = None
    progress(f"measuring which cases execute each line of {len(paths)} {judge} module(s) (once per state "
             f"of the sources and cases{', for ' + str(len(measure)) + ' new deployment(s)' if known else ''})")
    request = {"root": str(root), "judge": judge, "paths": sorted(set(paths) | set(known["lines"] if known else ())),
               "profiles": measure if judge == "edge" else {p: PEER_DEPLOYMENTS[p] for p in measure}, "cases": cases,
               "engines": engines(store, root) if judge == "peer" else None}
    done = subprocess.run([sys.executable, "-m", "conformance.mutation.casemap"], input=json.dumps(request),
                          capture_output=True, text=True, cwd=root)
    if done.returncode != 0:
        raise KvconformError(f"measuring the case map failed: {done.stderr.strip().splitlines()[-1:]}")
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    if known:                   # the new deployments' contexts added to the map's
        lines = {path: {line: list(ctx) for line, ctx in by_line.items()} for path, by_line in known["lines"].items()}
        for path, by_line in doc["lines"].items():
            for line, ctx in by_line.items():
                lines.setdefault(path, {}).setdefault(line, [])
                lines[path][line] = sorted(set(lines[path][line]) | set(ctx))
        doc = {"lines": lines, "cases": {p: known["cases"].get(p, doc["cases"].get(p)) for p in every
                                          if p in known["cases"] or p in doc["cases"]}}
    store.put(key, doc)
    return dict(doc, cases={p: c for p, c in doc["cases"].items() if p in chosen})


def diff_of(root: Path, mutant: Mutant) -> str | None:
    try:
        return apply(root, mutant)[1]
    except KvconformError:
        return None


def script_owner(relpath: str) -> str:
    """The module that starts the script `relpath` (SCRIPTS), as a path: its lines that start the
    script are what the case map measures for it."""
    return SCRIPTS[relpath][0].replace(".", "/") + ".py"


def engines(store: Store, root: Path) -> dict:
    """The bundled server's engines, built once next to the store: one per tokenizer loader around
    Phi-3-mini, and "vision" (transformers-auto) around the vision model folder. Each as {"engine":
    folder, "tokenizer": the model folder the kit reads}."""
    folder = store.path.parent / "server-engines"
    vision = folder / "vision-tokenizer"
    if not (vision / "preprocessor_config.json").exists():
        vision.mkdir(parents=True, exist_ok=True)
        for name in VISION_TOKENIZER["files"]:
            (vision / name).write_bytes((root / VISION_TOKENIZER["from"] / name).read_bytes())
        (vision / "preprocessor_config.json").write_text(json.dumps(VISION_TOKENIZER["preprocessor_config.json"]))
    kinds = {"tokenizers-raw": ("tokenizers-raw", root / PEER_TOKENIZER),
             "transformers-auto": ("transformers-auto", root / PEER_TOKENIZER),
             "vision": ("transformers-auto", vision)}
    out = {}
    for kind, (loader, tokenizer) in kinds.items():
        target = folder / kind / "engine"
        if not (target / "config.json").exists():
            code = ("import sys; from conformance.adapters.bundled_server import default_engine; "
                    "print(default_engine(sys.argv[1], sys.argv[2], sys.argv[3]))")
            done = subprocess.run([sys.executable, "-c", code, str(tokenizer), loader, str(folder / kind)],
                                  capture_output=True, text=True, cwd=root)
            if done.returncode != 0:
                raise KvconformError(f"building the server's {kind} engine failed: {done.stderr.strip()[-300:]}")
        out[kind] = {"engine": str(target), "tokenizer": str(tokenizer)}
    return out


def case_id_of(path: str) -> str:
    """A curated case file's id as a report names it: its path under cases/, less `.json`."""
    parts = Path(path).with_suffix("").parts
    return "/".join(parts[parts.index("cases") + 1:]) if "cases" in parts else Path(path).stem


class Campaign:
    def __init__(self, store: Store, pool, root: Path = ROOT, batch: int = 6, deadline_s: float = 600.0,
                 timeout_s: float = 60.0, progress=None, cases: list[str] | None = None,
                 profiles: list[str] | None = None, limit: int | None = None):
        self.store, self.pool, self.root, self.batch = store, pool, root, batch
        self.cases, self.profiles, self.limit = cases or [], profiles, limit
        self.settings = {"deadline_s": deadline_s, "timeout": timeout_s}
        self.progress = progress or (lambda text: print(text, file=sys.stderr))

    def list_mutants(self, targets: list[tuple[str, set[int] | None]]) -> dict[str, list[Mutant]]:
        out: dict[str, list[Mutant]] = {}
        for rel, lines in targets:
            found = mutants_of(self.root, rel, lines=lines)
            self.store.add(found, judge_of(rel))
            out.setdefault(judge_of(rel), []).extend(found)
        return out

    def selection(self, judge: str, maps: dict, mutant: Mutant) -> dict:
        if judge == "kit":
            return {"tests": KIT_TESTS.get(mutant.path, [])} if KIT_TESTS.get(mutant.path) else {}
        if mutant.path in SCRIPTS:          # a script of its own process: the cases that start it
            attribute = SCRIPTS[mutant.path][1]
            source = (self.root / script_owner(mutant.path)).read_text(encoding="utf-8")
            return merge_selections([selection_for(maps[judge], script_owner(mutant.path), line)
                                     for line in script_users(source, attribute)])
        source = (self.root / mutant.path).read_text(encoding="utf-8")
        return selection_for(maps[judge], mutant.path, statement_line(source, mutant.line),
                             import_time="users" if judge == "peer" else "all")

    def run(self, targets: list[tuple[str, set[int] | None]], rejudge: tuple[str, ...] = ()) -> None:
        listed = self.list_mutants(targets)
        if rejudge:
            ids = [m.id for ms in listed.values() for m in ms]
            marks = ",".join("?" * len(ids))
            self.store.db.execute(f"UPDATE mutants SET status = 'pending' WHERE id IN ({marks}) AND status IN "
                                  f"({','.join('?' * len(rejudge))})", (*ids, *rejudge))
            self.store.db.commit()
        maps = {}
        units = []
        taken = 0
        for judge, mutants in listed.items():
            todo = set(self.store.pending([m.id for m in mutants]))
            if not todo:
                continue
            if judge in ("edge", "peer"):
                measured = {m.path for m in mutants} | {script_owner(m.path) for m in mutants if m.path in SCRIPTS}
                maps[judge] = casemap(self.store, self.root, judge, sorted(measured), self.progress, self.cases,
                                      self.profiles)
            settings = dict(self.settings, engines=engines(self.store, self.root) if judge == "peer" else None)
            items_by_path: dict[str, list] = {}
            for m in mutants:
                if m.id not in todo:
                    continue
                if self.limit is not None and taken >= self.limit:
                    break
                taken += 1
                chosen = self.selection(judge, maps, m)
                if not chosen:          # the diff too, so that the survivors' list and the triage show the change
                    self.store.record({"id": m.id, "status": "not_covered", "verdict": None,
                                       "failure": "no case executes this line", "diff": diff_of(self.root, m)})
                    continue
                item = {"mutant": m.to_json(), "selection": chosen}
                if judge == "edge":
                    item["first"] = self.likely_killers(m.path, chosen)
                items_by_path.setdefault(m.path, []).append(item)
            if not items_by_path:
                continue
            self._baseline(judge, settings, next(iter(items_by_path.values()))[0]["selection"])
            for items in items_by_path.values():
                units += [(judge, settings, items[k:k + self.batch]) for k in range(0, len(items), self.batch)]
        self._judge(units)

    def likely_killers(self, path: str, selection: dict, most: int = 6) -> dict:
        """{profile: the selected cases that killed most of this module's mutants so far} (at most
        `most`; the module's judge's kills where the module has none yet): run first."""
        rows = self.store.db.execute("SELECT case_id, COUNT(*) FROM mutants WHERE status = 'killed' AND "
                                     "case_id IS NOT NULL AND path = ? GROUP BY case_id", (path,)).fetchall()
        if not rows:
            rows = self.store.db.execute("SELECT case_id, COUNT(*) FROM mutants WHERE status = 'killed' AND "
                                         "case_id IS NOT NULL AND judge = 'edge' GROUP BY case_id").fetchall()
        kills = dict(rows)
        if not kills:
            return {}
        out = {}
        for profile, cases in selection.items():
            ranked = sorted((c for c in cases if kills.get(case_id_of(c))), key=lambda c: -kills[case_id_of(c)])
            if ranked:
                out[profile] = ranked[:most]
        return out

    def _baseline(self, judge: str, settings: dict, selection: dict) -> None:
        """The unmutated kit through the very path mutants take: it must survive."""
        small = {p: cases[:3] for p, cases in selection.items()} if judge != "kit" else selection
        item = {"mutant": Mutant("", "baseline", 0, 0, 0, "", "").to_json(), "selection": small}
        got = judge_batch(str(self.root), judge, settings, [item])
        if not got or got[0].get("status") != "survived":
            reason = (got[0].get("failure") or got[0].get("log_tail") or "") if got else "no result"
            raise KvconformError(f"the unmutated kit does not survive its own {judge} judging, so no kill would mean "
                                 f"anything: {str(reason)[-400:]}")

    def _judge(self, units: list) -> None:
        total = sum(len(items) for _, _, items in units)
        done, started = 0, time.monotonic()
        queue = list(units)
        in_flight = {}
        try:
            while queue or in_flight:
                while queue and len(in_flight) < self.pool.slots:
                    judge, settings, items = queue.pop(0)
                    key = f"mutants:{items[0]['mutant']['path']}:{items[0]['mutant']['line']}"
                    ticket = self.pool.submit(key, judge_batch, str(self.root), judge, settings, items)
                    in_flight[ticket] = items
                for ticket in self.pool.wait(list(in_flight), timeout=1.0):
                    items = in_flight.pop(ticket)
                    try:
                        results = self.pool.result(ticket)
                    except Exception as e:          # the unit never came back: judged again on resume
                        self.progress(f"  a unit of {len(items)} mutant(s) did not come back: {e}")
                        continue
                    for r in results:
                        self.store.record(r)
                        done += 1
                        self.progress(f"  [{done}/{total}] {r['id']}: {r['status']}"
                                      + (f" by {r.get('case_id') or r.get('verdict')} [{r.get('rule') or '-'}]"
                                         if r["status"] == "killed" else "")
                                      + f" ({r.get('seconds', 0):.1f} s)")
        except KeyboardInterrupt:
            getattr(self.pool, "stop", lambda: None)()      # the units in hand are judged again on resume
            raise
        finally:
            self.pool.cancel(list(in_flight))
        self.progress(f"judged {done} mutant(s) in {time.monotonic() - started:.0f} s")
