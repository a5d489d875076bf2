"""The parity suite: the runtimes' own unit-test assertions, run through the oracle (docs/parity.md).

`parity/*.json` (at the top of the kit: product data, not tests) holds one file per runtime
(spec/schemas/parity.schema.json). Each entry names a test of that runtime (repository, commit,
file, function, line), the scenario in the kit's terms, and the values the test asserts, typed
from the test. Running an entry simulates its
scenario with the oracle and compares each assertion's observation with the typed value. The
oracle never supplies an expected value here: a disagreement is a difference between the kit and
the runtime, to be fixed or documented as a deliberate profile difference.

    results = evaluate(load(SUITE_DIR))
    for runtime, tally in tallies(results).items(): ...
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from . import cache, engine, peer
from .. import KvconformError
from ..cases import schemas

ROOT = Path(__file__).resolve().parents[2]
SUITE_DIR = ROOT / "parity"
AGREE, DISAGREE, NOT_EXPRESSIBLE = "agree", "disagree", "not expressible"
SEE_ENTRY = "see entry"             # an assertion's not_expressible that defers to its entry's reason


@dataclass
class Outcome:
    runtime: str
    repository: str
    commit: str
    file: str
    test: str
    line: int
    entry: str
    what: str
    expected: object
    status: str                     # agree | disagree | not expressible
    observed: object = None
    reason: str = ""                # why not expressible
    explained: str = ""             # a disagreement's documented reason: deliberate (doc) or known (open fix)
    marked: bool = False            # the assertion carries a deliberate or known marker

    @property
    def source(self) -> str:
        return f"{self.repository}@{self.commit[:12]} {self.file}:{self.line} {self.test}"


def load(directory: Path = SUITE_DIR) -> list[dict]:
    """Every suite file of `directory`, schema-checked (KvconformError names file and JSON path)."""
    files = sorted(Path(directory).glob("*.json"))
    if not files:
        raise KvconformError("no parity suite files (*.json)", str(directory))
    docs = []
    for f in files:
        doc = schemas.read_json(f)
        schemas.check(doc, "parity", str(f))
        doc["_path"] = str(f)
        docs.append(doc)
    return docs


def evaluate(docs: list[dict]) -> list[Outcome]:
    return [o for doc in docs for o in evaluate_file(doc)]


def evaluate_file(doc: dict) -> list[Outcome]:
    out = []
    for entry in doc["entries"]:
        commit = entry.get("commit") or entry.get("release") or doc["commit"]
        run, reason = None, entry.get("not_expressible", "")
        if not reason:
            try:
                run = _run(entry["scenario"], doc)
            except engine.NotExpressible as e:
                reason = str(e)
        for a in entry["assertions"]:
            base = dict(runtime=doc["runtime"], repository=doc["repository"], commit=commit, file=entry["file"],
                        test=entry["test"], line=a["line"], entry=entry["id"], what=a["what"], expected=a["expected"])
            why = a.get("not_expressible") or reason
            if why == SEE_ENTRY:                    # the assertion shares its entry's reason: print that one
                why = entry.get("not_expressible") or why
            if why:
                out.append(Outcome(status=NOT_EXPRESSIBLE, reason=why, **base))
                continue
            try:
                observed = run.observe(a["observe"])
            except engine.NotExpressible as e:
                out.append(Outcome(status=NOT_EXPRESSIBLE, reason=str(e), **base))
                continue
            except (KeyError, IndexError, TypeError) as e:      # nothing there in this run: not what was asserted
                observed = f"absent ({type(e).__name__}: {e})"
            agrees = compare(observed, a.get("op", "=="), a["expected"])
            explained = ""
            if not agrees:
                explained = _explanation(a, entry["test"], entry["file"])
            marked = bool(a.get("deliberate") or a.get("known_disagreement"))
            out.append(Outcome(status=AGREE if agrees else DISAGREE, observed=observed, explained=explained,
                               marked=marked, **base))
    return out


def _run(scenario: dict, doc: dict):
    """The scenario's run: a peer's request sequence, an engine's request files, or (an engine
    entry with `cache`) the oracle's context cache driven step by step (docs/parity.md)."""
    if doc["kind"] == "peer":
        if "free_queue" in scenario:
            return peer.QueueRun(scenario)
        return peer.Run(scenario, doc["profile"], doc.get("settings"))
    if "cache" in scenario:
        return cache.Run(scenario)
    if "identity" in scenario:
        return cache.IdentityRun(scenario)
    return engine.Run(scenario, doc["profile"])


def compare(observed, op: str, expected) -> bool:
    if op == "contains":
        return isinstance(observed, str) and isinstance(expected, str) and expected in observed
    if op == "==":
        if isinstance(observed, bool) or isinstance(expected, bool):
            return observed is expected
        return observed == expected
    if not isinstance(observed, (int, float)) or isinstance(observed, bool):
        return False
    if op == ">":
        return observed > expected
    if op == "<":
        return observed < expected
    return observed > 0 and observed % expected == 0


def _explanation(assertion: dict, test: str, file: str) -> str:
    """A disagreement is explained only by a document that documents it (a deliberate profile
    difference: one paragraph of it names the test and the test's file, where its source lines
    are cited) or by an open fix named in the entry."""
    doc = assertion.get("deliberate")
    if doc and documents(ROOT / doc, test, file):
        return f"deliberate: {doc}"
    if assertion.get("known_disagreement"):
        return f"known: {assertion['known_disagreement']}"
    return ""


def documents(path: Path, test: str, file: str) -> bool:
    """Whether one paragraph of `path` names `test` (as a whole word) and `file`: the text that
    makes a disagreement a documented profile difference, which cannot then vanish unnoticed."""
    name = re.compile(rf"(?<![\w.]){re.escape(test)}(?!\w)")
    return any(name.search(p) and file in p for p in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")))


@dataclass
class Tally:
    translated: int = 0
    expressible: int = 0
    agree: int = 0
    tests: int = 0

    @property
    def agree_rate(self) -> float:
        return self.agree / self.expressible if self.expressible else 0.0


def tallies(outcomes: list[Outcome]) -> dict[str, Tally]:
    """Per runtime: assertions translated, expressible, agreeing, and test functions read."""
    out: dict[str, Tally] = {}
    tests: dict[str, set] = {}
    for o in outcomes:
        t = out.setdefault(o.runtime, Tally())
        tests.setdefault(o.runtime, set()).add((o.file, o.test))
        t.translated += 1
        t.expressible += o.status != NOT_EXPRESSIBLE
        t.agree += o.status == AGREE
    for runtime, t in out.items():
        t.tests = len(tests[runtime])
    return out


def unexplained(outcomes: list[Outcome]) -> list[Outcome]:
    return [o for o in outcomes if o.status == DISAGREE and not o.explained]
