"""The rule ids spec/context-reuse.md defines: what `--rule`, case files and reports may cite."""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

SPEC_RULES_FILE = Path(__file__).resolve().parent.parent / "spec" / "context-reuse.md"


@lru_cache(maxsize=1)
def spec_rule_ids() -> frozenset[str]:
    """The ids of the rule headings `**CR-XXX-n (...)**` of spec/context-reuse.md."""
    return frozenset(re.findall(r"\*\*(CR-[A-Z]+-\d+) \(", SPEC_RULES_FILE.read_text(encoding="utf-8")))
