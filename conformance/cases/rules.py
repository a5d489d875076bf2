"""The rule ids the spec defines: what `--rule`, case files and reports may cite.

Context-reuse rules (`CR-*`, spec/context-reuse.md) and the tokenizer rules of real tokenizers
and media token counts (`TOK-HF-*`, spec/hf-tokenizer.md; `TOK-MEDIA-*`, spec/media-tokens.md).
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

SPEC = Path(__file__).resolve().parents[2] / "spec"
RULE_FILES = ("context-reuse.md", "hf-tokenizer.md", "media-tokens.md")
SPEC_RULES_FILE = SPEC / "context-reuse.md"


@lru_cache(maxsize=1)
def spec_rule_ids() -> frozenset[str]:
    """The ids of the rule headings `**CR-XXX-n (...)**` / `**TOK-XXX-n (...)**` of the spec."""
    return frozenset(rule for name in RULE_FILES
                     for rule in re.findall(r"\*\*((?:CR|TOK)-[A-Z]+-\d+) \(", (SPEC / name).read_text(encoding="utf-8")))
