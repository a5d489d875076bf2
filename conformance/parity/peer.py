"""Peer scenarios of the parity suite: request sequences through `reference.peers.simulator`.

A scenario names the profile's settings and a list of steps. A step is a request (its prompt
ids, the ids it samples, and what keys its cache entries: LoRA adapter, salt, extra key, images,
and the fields later profiles add), or a reset of the cache. Each request is first predicted
(the count the server reports, `cached`) and then, unless the step says `commit: false`,
committed (what it leaves cached). Ids are the upstream test's own: a peer profile speaks of
token ids as the server sees them.
"""
from __future__ import annotations

import reference.peers as peers

from .engine import NotExpressible, expand

REQUEST_FIELDS = ("lora", "lora_path", "salt", "extra_key", "skip_prefix_cache")


class Run:
    def __init__(self, scenario: dict, profile: str, settings: dict | None):
        merged = dict(settings or {}, **(scenario.get("settings") or {}))
        try:
            self.sim = peers.simulator(profile, merged)
        except peers.PeerProfileError as e:
            raise NotExpressible(f"reference.peers.simulator: {e}") from None
        self.cached: list = []
        self.lengths: list = []
        self.states: list = []
        for k, step in enumerate(scenario["steps"]):
            if step.get("reset"):
                self.sim.reset()
                self.cached.append(None)
                self.lengths.append(None)
                self.states.append(self._state())
                continue
            request = _request(step, k)
            self.lengths.append(len(request.ids))
            try:
                self.cached.append(self.sim.predict(request))
                if step.get("commit", True):
                    self.sim.commit(request, expand(step.get("sampled", [0])))
            except peers.PeerProfileError as e:
                raise NotExpressible(f"step {k}: {e}") from None
            self.states.append(self._state())

    def _state(self) -> dict:
        """What the profile's simulator exposes beyond the count: vLLM's free block queue, the
        tokens llama.cpp's slot holds (what /slots/N?action=save reports as n_saved)."""
        free = getattr(self.sim, "free", None)
        tokens = getattr(self.sim, "tokens", None)
        return {"free_queue": list(free) if free is not None else None,
                "slot_tokens": len(tokens) if tokens is not None else None}

    def observe(self, what: dict):
        step, value = what["step"], what.get("value", "cached")
        if value == "cached":
            return self.cached[step]
        if value == "prompt_n":                 # llama.cpp timings.prompt_n: the prompt less what was cached
            return self.lengths[step] - self.cached[step]
        state = self.states[step][value]
        if state is None:
            raise NotExpressible(f"the {type(self.sim).__name__} simulator has no {value}")
        return state


def _request(step: dict, k: int):
    fields = {key: step[key] for key in REQUEST_FIELDS if key in step}
    if "images" in step:
        fields["images"] = [peers.ImageItem(*i) for i in step["images"]]
    try:
        return peers.PeerRequest(expand(step["prompt"]), **fields)
    except TypeError as e:
        raise NotExpressible(f"step {k}: reference.peers.PeerRequest: {e}") from None
