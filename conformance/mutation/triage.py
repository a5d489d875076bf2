"""The committed triage of the campaign's survivors (docs/mutation-triage.json).

Every survivor (and every mutant no case executes) is explained there, keyed by mutant id
(`path:line:operator:occurrence`):

    {"gpu_backend/cache_store.py:88:NumberReplacer:14":
        {"equivalent": "the limit is read only when the pool is full, and 0 and -1 both mean unlimited",
         "change": "-        if limit == 0:  +        if limit == 1:"}}

`equivalent` is a one-line argument that no backend input can tell the mutant from the original;
a survivor that a new case now kills needs no entry (the campaign re-judges it: `--rejudge
survived`). `kvconform selftest --mutate --check` fails on any survivor without an entry.
"""
from __future__ import annotations

import json
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


def unexplained(rows: list[dict], triage: dict) -> list[dict]:
    """The survivors (and mutants no case executes) that the triage does not call equivalent."""
    return [r for r in rows if r["status"] in ("survived", "not_covered") and r["id"] not in triage]


def changed_line(diff: str | None) -> str:
    """The mutated line of a unified diff, as `-old  +new`."""
    lines = (diff or "").splitlines()
    old = next((l[1:].strip() for l in lines if l.startswith("-") and not l.startswith("---")), "")
    new = next((l[1:].strip() for l in lines if l.startswith("+") and not l.startswith("+++")), "")
    return f"-{old}  +{new}"
