"""The campaign's store: one SQLite file, one row per mutant, written as each verdict comes back.

A campaign stopped at any point (Ctrl-C, a lost machine) resumes where it was: mutants with a
verdict are not judged again. A module whose text changed since its mutants were listed has its
rows dropped and is listed again (its verdicts judged other code). Only the driver writes.

Statuses: `killed` (some case or test caught it: FAIL, ERROR or TIMEOUT, the case and the rule
recorded), `survived` (every case that executes its line passed), `not_covered` (no case
executes its line: survived without a run), `invalid` (no such mutation could be made), and
`pending`.
"""
from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from .operators import Mutant

COLUMNS = ("id", "key", "path", "line", "column", "operator", "occurrence", "module_digest", "judge", "status", "verdict",
           "profile", "case_id", "rule", "failure", "diff", "seconds", "log_tail", "judged_at")
FINISHED = ("killed", "survived", "not_covered", "invalid")


class Store:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path)
        self.db.execute("CREATE TABLE IF NOT EXISTS mutants (id TEXT PRIMARY KEY, path TEXT, line INTEGER, "
                        "column INTEGER, operator TEXT, occurrence INTEGER, module_digest TEXT, judge TEXT, "
                        "status TEXT, verdict TEXT, profile TEXT, case_id TEXT, rule TEXT, failure TEXT, diff TEXT, "
                        "seconds REAL, log_tail TEXT, judged_at REAL)")
        self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        if "key" not in {r[1] for r in self.db.execute("PRAGMA table_info(mutants)")}:
            self.db.execute("ALTER TABLE mutants ADD COLUMN key TEXT")      # a store from before triage keys
        self.db.commit()

    def close(self) -> None:
        self.db.close()

    # --- mutants ---------------------------------------------------------------------------------
    def add(self, mutants: list[Mutant], judge: str) -> int:
        """Record `mutants` (all of one module); rows of the module at another digest are dropped.
        Returns how many were new."""
        if not mutants:
            return 0
        path, digest = mutants[0].path, mutants[0].module_digest
        self.db.execute("DELETE FROM mutants WHERE path = ? AND module_digest != ?", (path, digest))
        before = self.db.total_changes
        self.db.executemany(
            "INSERT INTO mutants (id, key, path, line, column, operator, occurrence, module_digest, judge, status) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending') ON CONFLICT(id) DO NOTHING",
            [(m.id, m.key, m.path, m.line, m.column, m.operator, m.occurrence, m.module_digest, judge)
             for m in mutants])
        added = self.db.total_changes - before
        self.db.executemany("UPDATE mutants SET key = ? WHERE id = ? AND key IS NULL", [(m.key, m.id) for m in mutants])
        self.db.commit()
        return added

    def pending(self, ids: list[str]) -> list[str]:
        marks = ",".join("?" * len(ids))
        rows = self.db.execute(f"SELECT id FROM mutants WHERE id IN ({marks}) AND status NOT IN "
                               f"({','.join('?' * len(FINISHED))})", (*ids, *FINISHED)) if ids else []
        return [r[0] for r in rows]

    def record(self, result: dict) -> None:
        fields = {k: result.get(k) for k in COLUMNS if k in result and k != "id"}
        fields["judged_at"] = time.time()
        sets = ", ".join(f"{k} = ?" for k in fields)
        self.db.execute(f"UPDATE mutants SET {sets} WHERE id = ?", (*fields.values(), result["id"]))
        self.db.commit()

    def rows(self, paths: list[str] | None = None) -> list[dict]:
        query = f"SELECT {', '.join(COLUMNS)} FROM mutants"
        args: tuple = ()
        if paths:
            query += f" WHERE path IN ({','.join('?' * len(paths))})"
            args = tuple(paths)
        return [dict(zip(COLUMNS, r)) for r in self.db.execute(query + " ORDER BY path, line, operator, occurrence",
                                                                args)]

    # --- meta (case maps, settings) ---------------------------------------------------------------
    def get(self, key: str):
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, value) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, json.dumps(value)))
        self.db.commit()
