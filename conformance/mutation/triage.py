"""The committed triage of the campaign's survivors (docs/mutation-triage.json).

Every survivor (and every mutant no case executes) is explained there, keyed by the mutant's
stable key (`PATH::DEFINITION OPERATOR#INDEX: LINE TEXT`, operators.stable_key), which an edit
elsewhere in the module leaves as it is:

    {"gpu_backend/cache_store.py::CacheStore.evict NumberReplacer#0: if limit == 0:":
        {"equivalent": "the limit is read only when the pool is full, and 0 and -1 both mean unlimited",
         "change": "-if limit == 0:  +if limit == 1:"}}

An entry whose mutated line was edited stops matching: its mutant is listed again, as it should
be (the argument was about the old text). Keys of the older form (`path:line:operator:occurrence`,
which any edit above the line invalidated) explain nothing: `--check` names them, and
`migrate` (tools/migrate_mutation_triage.py) rewrites them by their recorded change.

`equivalent` is a one-line argument that no backend input can tell the mutant from the original;
a survivor that a new case now kills needs no entry (the campaign re-judges it: `--rejudge
survived`). `kvconform selftest --mutate --check` fails on any survivor without an entry.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from .. import KvconformError

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "docs" / "mutation-triage.json"


def load(path: Path = DEFAULT) -> dict:
    if not Path(path).exists():
        return {}
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise KvconformError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(doc, dict):
        raise KvconformError(f"{path}: $ must be an object of mutant id -> triage")
    for key, entry in doc.items():
        if key.startswith("_"):
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("equivalent"), str) or not entry["equivalent"].strip():
            raise KvconformError(f"{path}: $[{key!r}].equivalent must be a one-line argument (a non-empty string)")
    return {k: v for k, v in doc.items() if not k.startswith("_")}


LINE_KEYED = re.compile(r"^[^:]+\.py:\d+:\w+:\d+$")
"""A key of the older form, by line number."""


def explains(triage: dict, row: dict) -> bool:
    return bool(row.get("key")) and row["key"] in triage


def line_keyed(triage: dict) -> list[str]:
    """The entries still keyed by line number (they explain nothing)."""
    return [k for k in triage if LINE_KEYED.match(k)]


def unexplained(rows: list[dict], triage: dict) -> list[dict]:
    """The survivors (and mutants no case executes) that the triage does not call equivalent."""
    return [r for r in rows if r["status"] in ("survived", "not_covered") and not explains(triage, r)]


def migrate(doc: dict, root: Path) -> tuple[dict, list[str]]:
    """`doc` (a triage file's object) with each line-keyed entry rekeyed by its recorded change:
    the mutant of that module and operator whose mutation makes exactly that `-old  +new` change,
    nearest the old line. Returns (the new object, the keys that could not be placed)."""
    from .operators import apply, mutants_of, Mutant
    out, lost, cache = {}, [], {}
    for key, entry in doc.items():
        if not LINE_KEYED.match(key):
            out[key] = entry
            continue
        path, line, operator, _ = key.rsplit(":", 3)
        if path not in cache:
            cache[path] = mutants_of(root, path) if (root / path).exists() else []
        candidates = []
        for m in cache[path]:
            if m.operator != operator:
                continue
            try:
                made = changed_line(apply(root, m)[1])
            except Exception:
                continue
            if _same_change(made, entry.get("change", "")):
                candidates.append(m)
        if not candidates:
            lost.append(key)
            out[key] = entry
            continue
        best = min(candidates, key=lambda m: abs(m.line - int(line)))
        out[best.key] = dict(entry, change=changed_line(apply(root, best)[1]))
    return out, lost


def _same_change(a: str, b: str) -> bool:
    """Two `-old  +new` changes alike but for whitespace and trailing comments."""
    def parts(change: str) -> tuple[str, ...]:
        old, _, new = change.partition("  +")
        return tuple(re.sub(r"\s+", "", re.sub(r"\s#[^'\"]*$", "", side.strip())) for side in (old[1:], new))
    return parts(a) == parts(b)


def changed_line(diff: str | None) -> str:
    """The mutated line of a unified diff, as `-old  +new`."""
    lines = (diff or "").splitlines()
    old = next((l[1:].strip() for l in lines if l.startswith("-") and not l.startswith("---")), "")
    new = next((l[1:].strip() for l in lines if l.startswith("+") and not l.startswith("+++")), "")
    return f"-{old}  +{new}"
