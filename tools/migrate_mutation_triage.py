"""Rekey a mutation triage file's line-numbered entries by their stable keys (docs/mutation.md section 6).

    python tools/migrate_mutation_triage.py [docs/mutation-triage.json]

Each entry keyed `path:line:operator:occurrence` is matched, by its recorded `change`, to the
mutant of today's module that makes that change (nearest the old line) and rekeyed
`PATH::DEFINITION OPERATOR#INDEX: LINE TEXT`. An entry whose change no mutant makes any more (the
line was edited) is kept as it was and named: its argument was about text that is gone.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conformance.mutation import triage  # noqa: E402


def main(argv: list[str]) -> int:
    if argv and argv[0].startswith("-") or len(argv) > 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 0 if argv[0] in ("-h", "--help") else 2
    path = Path(argv[0]) if argv else triage.DEFAULT
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        print(f"{path}: not a readable triage file: {e}", file=sys.stderr)
        return 2
    if not isinstance(doc, dict):
        print(f"{path}: $: expected a JSON object of triage entries", file=sys.stderr)
        return 2
    about = {k: v for k, v in doc.items() if k.startswith("_")}
    entries = {k: v for k, v in doc.items() if not k.startswith("_")}
    rekeyed, lost = triage.migrate(entries, ROOT)
    path.write_text(json.dumps({**about, **rekeyed}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{path}: {len(entries) - len(lost)} entr(ies) keyed stably, {len(lost)} left as they were "
          f"(their change is made by no mutant now){': ' + ', '.join(lost) if lost else ''}")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
