"""Engine scenarios of the parity suite: request files run through the oracle (reference.Simulator).

A scenario is a list of request files sent to one runtime instance, in the kit's terms: an engine
(build arguments, spec/engine.md), runtime flags, and per request its tokens, LoRA adapter,
generated tokens and last EAGLE acceptance. Upstream tests name token ids (`makeTokens(n)` is
1..n); only which sequences agree on which prefixes matters to a cache, so the ids are relabelled
position by position to bytes-v1 letters: at each position the k-th distinct id of the scenario
becomes the k-th letter. Two sequences then agree on a prefix exactly when the upstream ones do.
An engine may instead be given as a description (`engine_config`, spec/engine.md section 2) where
the build arguments cannot state the test's geometry; `{"slot_bytes": ...}` reads its snapshot
slot sizes (CR-HYB-1). Edge-LLM's tests below the request level run as cache scenarios
(cache.py).
"""
from __future__ import annotations

import copy
import json
import string

from ..judge import oracle
from ..judge.oracle import EOS

LABELS = string.ascii_letters + string.digits
REASONS = (oracle.InputError, oracle.NeedsTranscript, oracle.OutOfScope, oracle.Unreported,
           oracle.DeploymentRejected)


class NotExpressible(Exception):
    """The scenario cannot be run by the oracle; the message says why."""


def expand(items) -> list[int]:
    """Token items: an id, or [first, count] for first .. first + count - 1 (makeTokens(n) = [1, n])."""
    out: list[int] = []
    for item in items:
        if isinstance(item, list):
            first, count = item
            out.extend(range(first, first + count))
        else:
            out.append(item)
    return out


class Run:
    """One scenario run: the responses of every file and the profile after each."""

    def __init__(self, scenario: dict, semantics_profile: str):
        if "case" in scenario:                  # a case file of the kit (cases/...), run as it is
            scenario = _case_scenario(scenario["case"])
        try:
            self.engine = (oracle.engine_of(scenario["engine_config"]) if "engine_config" in scenario
                           else oracle.derive_engine(scenario["engine"]))
        except oracle.InputError as e:
            raise NotExpressible(f"the kit cannot build this engine: {e}") from None
        runtime = dict(scenario.get("runtime") or {}, semanticsProfile=semantics_profile)
        if "snapshot_slots" in scenario:
            s_r, s_p = oracle.slot_sizes(self.engine)
            rec, partial = scenario["snapshot_slots"]
            runtime["contextCacheRecurrentSnapshotPoolBytes"] = rec * s_r
            runtime["contextCachePartialKVSnapshotPoolBytes"] = partial * s_p
        self.sim = oracle.Simulator(self.engine, oracle.RuntimeFlags.from_case_runtime(runtime))
        self.responses: list[list[dict]] = []
        self.profiles: list[dict] = []
        if self.sim.rejection is not None:
            return
        files = scenario["files"]
        if "documents" in scenario:
            requests = [(doc, scenario["base_dir"], None, None) for doc in scenario["documents"]]
        else:
            labels = _relabel(files)
            requests = [(*_request_file(f, labels[k]),) for k, f in enumerate(files)]
            requests = [(doc, ".", generated, accepted) for doc, generated, accepted in requests]
        for k, (doc, base_dir, generated, accepted) in enumerate(requests):
            try:
                self.responses.append(self.sim.run(doc, base_dir, generated, last_accepted=accepted))
            except REASONS as e:
                raise NotExpressible(f"the oracle cannot run request file {k}: {type(e).__name__}: {e}") from None
            self.profiles.append(copy.deepcopy(self.sim.profile()))

    def observe(self, what: dict):
        if "slot_bytes" in what:               # CR-HYB-1: bytes of one recurrent / partial-KV snapshot slot
            return dict(zip(("recurrent", "partial_kv"), oracle.slot_sizes(self.engine)))[what["slot_bytes"]]
        if "rejected" in what:
            r = self.sim.rejection
            return (r.rule if r else None) if what["rejected"] == "rule" else r is not None
        if self.sim.rejection is not None:
            raise NotExpressible(f"the oracle refuses the deployment ({self.sim.rejection.rule})")
        if "request" in what:
            f, r = what["request"]
            response = self.responses[f][r]
            if what["fact"] == "status":
                return response["status"]
            if response["status"] != "ok":
                return f"its batch failed: {response['error']}"
            return dotted(response["context_cache"], what["fact"])
        after = what["after"]
        if "profile" in what:
            return dotted(self.profiles[after], what["profile"])
        if "delta" in what:
            before = dotted(self.profiles[after - 1], what["delta"]) if after else 0
            return dotted(self.profiles[after], what["delta"]) - before
        pool = dotted(self.profiles[after], f"context_cache.resource_pools.{what['held']}")
        return pool["capacity"] - pool["free"]


def _case_scenario(relative: str) -> dict:
    """A kit case file as a one-file scenario: its engine, runtime flags and request file."""
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / relative
    doc = json.loads(path.read_text(encoding="utf-8"))
    meta = doc.pop("_conformance")
    return {"engine": meta["engine"], "runtime": meta.get("runtime"), "files": [None], "documents": [doc],
            "base_dir": str(path.parent)}


def dotted(doc, path: str):
    """`publications.-1.pages`: keys, list indices (negative from the end) and `count` (a length)."""
    for part in path.split("."):
        if part == "count":
            doc = len(doc)
        elif isinstance(doc, list):
            doc = doc[int(part)]
        else:
            doc = doc[part]
    return doc


def _relabel(files: list) -> list:
    """Per file, per request: (prompt labels, generated labels), relabelled position by position
    over every sequence of the scenario (prompts, and prompts followed by generated ids)."""
    seen: list[dict] = []

    def label(pos: int, token: int) -> str:
        while len(seen) <= pos:
            seen.append({})
        table = seen[pos]
        if token not in table:
            if len(table) == len(LABELS):
                raise NotExpressible(f"more than {len(LABELS)} distinct ids at position {pos}")
            table[token] = LABELS[len(table)]
        return table[token]

    out = []
    for f in files:
        labelled = []
        for r in f["requests"]:
            prompt = expand(r["tokens"])
            history = prompt + list(r.get("generated", []))
            labels = [label(i, t) for i, t in enumerate(history)]
            labelled.append((labels[:len(prompt)], labels[len(prompt):]))
        out.append(labelled)
    return out


def _request_file(f: dict, labels: list) -> tuple[dict, list | None, list | None]:
    """The request file (bytes-v1 text, chat template off, greedy) with its transcript."""
    gen_max = max((len(g) for _, g in labels if g), default=1)
    requests, generated, accepted = [], [], []
    loras = {}
    for r, (prompt, gen) in zip(f["requests"], labels):
        request = {"messages": [{"role": "user", "content": "".join(prompt)}]}
        if r.get("lora"):
            request["lora_name"] = r["lora"]
            loras[r["lora"]] = f"lora/{r['lora']}.safetensors"
        if r.get("disable_spec_decode"):
            request["disable_spec_decode"] = True
        requests.append(request)
        ids = [ord(c) for c in gen] or [EOS]
        if len(ids) < gen_max:
            ids[-1] = EOS                      # it ended before max_generate_length
        generated.append(ids)
        accepted.append(r.get("last_accepted"))
    doc = {"apply_chat_template": False, "add_generation_prompt": False, "top_k": 1,
           "max_generate_length": gen_max, "requests": requests}
    if loras:
        doc["available_lora_weights"] = loras
    if f.get("lookup"):
        doc["context_cache_lookup_policy"] = f["lookup"]
    if f.get("commit"):
        doc["context_cache_commit_policy"] = f["commit"]
    if f.get("batch_size"):
        doc["batch_size"] = f["batch_size"]
    return doc, generated, accepted if any(a is not None for a in accepted) else None
