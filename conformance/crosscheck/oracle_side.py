"""The oracle's side of a stream: the same steps through the peer profile's simulator.

Observations have the drivers' shape (tools/crosscheck/drive_*.py), one per step:

- a request: `cached` (the count it reports); on the vLLM pool also `admitted` (whether it fitted
  the free queue, PEER-VLLM-9), `blocks` (the blocks it took, in order) and `free_queue`;
- a release: `free_queue`; a reset: `reset` (accepted or refused, PEER-API-4) and `free_queue`;
- `{"undefined": why}` where the profile defines nothing (a request that cannot get blocks or
  slots even after evicting), and the stream stops there on both sides.

A request that does not fit (vLLM) is dropped, nothing changed, as a scheduler leaves it
waiting; a release of a request that was never admitted releases nothing. Block ids and the free
queue are observed only on a bounded pool (`cache_blocks` set): they are the spec's numbering
(PEER-VLLM-5) there and arbitrary otherwise.
"""
from __future__ import annotations

from ..judge import peer_oracle
from .streams import PROFILE

REQUEST_FIELDS = ("lora", "lora_path", "salt", "extra_key", "skip_prefix_cache")


def observe(stream: dict) -> list:
    """Every step's observation of `stream` on a fresh simulator of its runtime's profile."""
    runtime = stream["runtime"]
    error = peer_oracle.PeerProfileError
    try:
        sim = peer_oracle.simulator(PROFILE[runtime], stream.get("settings"))
    except error as e:                      # settings the profile does not define
        return [{"undefined": str(e)}]
    bounded = runtime == "vllm" and sim.K is not None
    held, out = {}, []
    for step in stream["steps"]:
        try:
            seen = _step(sim, step, held, bounded)
        except error as e:
            out.append({"undefined": str(e)})
            break
        out.append(seen)
        if "undefined" in seen:
            break
    return out


def _step(sim, step: dict, held: dict, bounded: bool) -> dict:
    queue = (lambda: {"free_queue": sim.free_queue()}) if bounded else dict
    if step.get("reset"):
        accepted = sim.reset_prefix_cache() if hasattr(sim, "reset_prefix_cache") else _reset(sim)
        return {"reset": accepted, **queue()}
    if "release" in step:
        run = held.pop(step["release"], None)
        if run is not None:
            sim.release(run)
        return queue()
    request = peer_oracle.PeerRequest(list(step["prompt"]), **{k: step[k] for k in REQUEST_FIELDS if k in step})
    sampled = list(step.get("sampled") or [0])
    cached = sim.predict(request)
    if not hasattr(sim, "hold"):
        if step.get("hold"):
            return {"undefined": "a held request (the profile runs one request at a time)"}
        sim.commit(request, sampled)
        return {"cached": cached}
    run = sim.hold(request, sampled)
    seen = {"cached": cached, "admitted": run is not None}
    if run is not None:
        if bounded:
            seen["blocks"] = list(run.blocks)
            if len(getattr(run, "tables", ())) > 1:           # every KV-cache group's table
                seen["group_blocks"] = run.group_blocks()
        if step.get("hold"):
            held[step["hold"]] = run
        else:
            sim.release(run)
    return {**seen, **queue()}


def _reset(sim) -> bool:
    sim.reset()
    return True


def play(stream: dict) -> None:
    """The stream through the simulator with nothing observed: what the speed comparison times,
    the same calls a server's count needs (predict, then hold and release, or commit)."""
    runtime = stream["runtime"]
    sim = peer_oracle.simulator(PROFILE[runtime], stream.get("settings"))
    for step in stream["steps"]:
        request = peer_oracle.PeerRequest(list(step["prompt"]), **{k: step[k] for k in REQUEST_FIELDS if k in step})
        sampled = step.get("sampled") or [0]
        sim.predict(request)
        if hasattr(sim, "hold"):
            run = sim.hold(request, sampled)
            if run is not None:
                sim.release(run)
        else:
            sim.commit(request, sampled)
