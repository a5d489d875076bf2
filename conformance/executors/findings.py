"""What a campaign found: its distinct failures, and what each family and worker did.

Many seeds find the same bug. Two failures are the same when they break the same rule through
the same observable and shrink to the same shape; the shape is the reproducer's structure with
its lengths and contents left out (model kind, lookup and commit policy, a policy switch, and
per batch, per request, the kinds of input it holds, text, image, audio or an earlier answer fed
back, and whether it names a LoRA adapter), since two seeds shrink one bug to different lengths
and split its text into different messages. Observables are compared without request indices
(`responses[2].context_cache.plan` is `responses[].context_cache.plan`). Each distinct failure
keeps every occurrence (family, seed, reproducer) and is reported through its smallest
reproducer.
"""
from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..adapters.engines import digest
from ..generate import RULES
from ..judge.numerical_judge import merge_facts
from ..judge.verdicts import CaseResult, Failure, Verdict


def observable(what: str) -> str:
    return re.sub(r"\[\d+\]", "[]", what)


def shape(doc: dict) -> dict:
    """The structure of a reproducer, without lengths or contents."""
    meta = doc.get("_conformance") or {}
    size = max(1, int(doc.get("batch_size") or 1))
    requests = doc.get("requests") or []

    def one(request: dict) -> str:
        kinds = set()
        for message in request.get("messages") or []:
            content = message.get("content")
            items = content if isinstance(content, list) else [{"type": "text", "text": content}]
            kinds |= {"output" if i.get("type") == "text" and "{{output:" in str(i.get("text")) else str(i.get("type"))
                      for i in items if isinstance(i, dict)}
        return "+".join(sorted(kinds)) + (" lora" if request.get("lora_name") else "")
    return {"model": (meta.get("engine") or {}).get("model", "attention"),
            "lookup": doc.get("context_cache_lookup_policy", "use_cache"),
            "commit": doc.get("context_cache_commit_policy"), "policy_switch": "_policy_switch" in doc,
            "batches": [[one(r) for r in requests[k:k + size]] for k in range(0, len(requests), size)]}


def _plain(reason: str) -> str:
    """A reason without numbers (worker ids, counts, timings), to tell failures without a reproducer apart."""
    return re.sub(r"\d+", "N", reason.splitlines()[0] if reason else "")[:200]


def signature(result: CaseResult, reproducer: dict | None) -> dict:
    first = result.first_failure()
    if reproducer is None:
        return {"rule": first.rule if first else None, "observable": observable(first.what) if first else "kit",
                "shape": {"reason": _plain(first.line() if first else result.reason)}}
    return {"rule": first.rule if first else None, "observable": observable(first.what) if first else "case",
            "shape": shape(reproducer)}


@dataclass
class Tally:
    """Units, scenarios (examples of the generate phase), batches judged and busy time."""
    units: int = 0
    scenarios: int = 0
    batches: int = 0
    shrink_steps: int = 0
    busy_s: float = 0.0
    seeds: list = field(default_factory=list)

    def add(self, details: dict, seconds: float, seed: int | None = None) -> None:
        self.units += 1
        self.scenarios += int(details.get("examples", 0))
        self.batches += int(details.get("batches_checked", 0))
        self.shrink_steps += int(details.get("shrink_steps", 0))
        self.busy_s += seconds
        if seed is not None:
            self.seeds.append(seed)

    def to_json(self) -> dict:
        out = {"units": self.units, "scenarios": self.scenarios, "batches": self.batches,
               "shrink_steps": self.shrink_steps, "busy_s": round(self.busy_s, 1),
               "scenarios_per_busy_minute": round(60 * self.scenarios / self.busy_s, 1) if self.busy_s else 0.0}
        if self.seeds:
            out["seeds"] = seed_ranges(self.seeds)
        return out


def seed_ranges(seeds: list[int]) -> list[list[int]]:
    """[3, 4, 5, 9] -> [[3, 5], [9, 9]]: hours of seeds stay short in the report."""
    out = []
    for s in sorted(set(seeds)):
        if out and s == out[-1][1] + 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return out


@dataclass
class Distinct:
    key: str
    signature: dict
    family: str
    best: CaseResult
    occurrences: list = field(default_factory=list)


class Findings:
    """Accumulates the results of a campaign's units."""

    def __init__(self, families: list[str], min_batches: int):
        self.min_batches = min_batches
        self.families = {f: Tally() for f in families}
        self.passing: dict[str, list[CaseResult]] = {f: [] for f in families}
        self.workers: dict[str, Tally] = {}
        self.distinct: dict[str, Distinct] = {}

    def add(self, family: str, seed: int, result: CaseResult, folder: Path, worker: str, seconds: float,
            elapsed_s: float) -> None:
        self.families[family].add(result.details, seconds, seed)
        self.workers.setdefault(worker, Tally()).add(result.details, seconds)
        if result.verdict < Verdict.TIMEOUT or (result.verdict == Verdict.TIMEOUT and not result.reproducer
                                                 and not result.failures):
            self.passing[family].append(result)    # no disagreement (a unit cut short by the clock included)
            return
        doc = json.loads((Path(folder) / result.reproducer).read_text()) if result.reproducer else None
        self._record(family, seed, result, signature(result, doc), elapsed_s)

    def add_lost(self, family: str, seed: int, result: CaseResult, elapsed_s: float) -> None:
        """A unit whose task never returned (ERROR with the reason)."""
        self.families[family].add({}, 0.0, seed)
        sig = {"rule": None, "observable": "task", "shape": {"reason": _plain(result.reason)}}
        self._record(family, seed, result, sig, elapsed_s)

    def _record(self, family: str, seed: int, result: CaseResult, sig: dict, elapsed_s: float) -> None:
        key = digest(sig, 8)
        found = self.distinct.get(key)
        if found is None:
            found = self.distinct[key] = Distinct(key, sig, family, result)
        elif _size(result) < _size(found.best):
            found.best = result
        found.occurrences.append({"family": family, "seed": seed, "verdict": str(result.verdict),
                                  "reproducer": result.reproducer,
                                  "requests": result.details.get("reproducer_requests"),
                                  "found_after_s": round(elapsed_s, 1)})

    # --- the report ---------------------------------------------------------------------------
    def entries(self) -> list[CaseResult]:
        """One entry per family that showed no failure, then one per distinct failure. A family
        counts as failing when any of its seeds failed, also where the distinct failure was first
        found by another family (the same bug reached through two families is one entry)."""
        failing = {o["family"] for d in self.distinct.values() for o in d.occurrences}
        out = [self._family_entry(f) for f in self.families if f not in failing]
        for d in self.distinct.values():
            entry = copy.deepcopy(d.best)
            entry.id = _failure_id(d)
            seen = ", ".join(f"{o['family']} seed {o['seed']}" for o in d.occurrences[:8])
            more = f" and {len(d.occurrences) - 8} more" if len(d.occurrences) > 8 else ""
            entry.reason = (entry.reason + "; " if entry.reason else "") + \
                f"found {len(d.occurrences)} time(s): {seen}{more}"
            entry.details = dict(entry.details, signature=d.signature, occurrences=d.occurrences)
            out.append(entry)
        return out

    def _family_entry(self, family: str) -> CaseResult:
        tally, units = self.families[family], self.passing[family]
        entry = CaseResult(f"generated/{family}", RULES[family], True, "conformance/generate", None)
        entry.details = tally.to_json()
        counted = f"{tally.units} seed(s), {tally.scenarios} scenarios, {tally.batches} batches judged"
        if units and all(r.verdict == Verdict.NOT_SUPPORTED for r in units):
            return entry.settle(Verdict.NOT_SUPPORTED, units[0].reason)
        if tally.batches < self.min_batches:
            return entry.settle(Verdict.TIMEOUT, f"{counted}: fewer than the {self.min_batches} batches a family "
                                                 "must judge, in the campaign's time")
        checked = None                 # outputs checked against the numerical reference, as `run` counts them
        for r in units:
            if (r.details or {}).get("reference"):
                checked = merge_facts(checked, r.details["reference"])
        if checked:
            entry.details["reference"] = checked
        warnings = [f for r in units for f in r.failures if f.verdict < Verdict.TIMEOUT][:5]
        for f in warnings:
            entry.add(Failure.from_json(f.to_json()))
        entry.reason = f"{counted}, " + ("no disagreement" if not warnings else "warnings only (first shown)")
        return entry

    def to_json(self) -> dict:
        return {"families": {f: t.to_json() for f, t in self.families.items()},
                "workers": {w: t.to_json() for w, t in sorted(self.workers.items())},
                "distinct_failures": [{"id": _failure_id(d), "verdict": str(d.best.verdict), **d.signature,
                                       "occurrences": len(d.occurrences), "reproducer": d.best.reproducer,
                                       "first_found_after_s": d.occurrences[0]["found_after_s"]}
                                      for d in self.distinct.values()]}


def _failure_id(d: Distinct) -> str:
    return f"generated/{d.family}/{d.signature['rule'] or d.signature['observable']}-{d.key}"


def _size(result: CaseResult) -> tuple:
    return (result.details.get("reproducer_requests") or 10 ** 9, len(json.dumps(result.to_json())))
