"""Scenarios written in engine-relative terms: a case whose requests are a function of the engine.

Most cases keep their meaning when their pages are laid out at another page size
(conformance/materialize). A few depend on the size of the engine's page pool, which a layout
cannot change: a pool full of records, or enough resident pages for the birthday bound. Those
are written here as functions of the engine description; the committed case file is the
scenario built for the case's own engine (tools/make_cases.py), and a fixed engine under test
gets the scenario built for it. A case names its scenario in `_conformance.scenario`.

A scenario returns the request file (without `_conformance`) and the runtime flags, or raises
CannotBuild when the engine cannot hold it (the runner's NOT_SUPPORTED, with the reason).
"""
from __future__ import annotations

import math
import random
from typing import Callable

from .schemas import MAX_INPUT_BYTES

LETTERS = "abcdefghijklmnopqrstuvwxyz"
SCENARIOS: dict[str, Callable] = {}


class CannotBuild(ValueError):
    """The scenario cannot be written for this engine (its pool or limits are too small for it)."""


def scenario(name: str):
    def register(fn):
        SCENARIOS[name] = fn
        return fn
    return register


def build(name: str, engine, base_runtime: dict) -> tuple[dict, dict]:
    """The request file and runtime flags of scenario `name` on `engine` (an EngineConfig)."""
    return SCENARIOS[name](engine, dict(base_runtime))


def _user(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


def _words(rng: random.Random, length: int) -> str:
    return "".join(rng.choice(LETTERS) for _ in range(length))


GREEDY = {"top_k": 1, "apply_chat_template": False}


@scenario("id/distinct-pages-birthday")
def distinct_pages(engine, runtime: dict) -> tuple[dict, dict]:
    """CR-ID-6 by the birthday bound: distinct inputs of up to 10 pages each, every one a miss,
    until the lookups have met enough resident keys that a 16-bit digest collides with
    probability 1 - exp(-5) or more (sum over looked-up pages of the keys then held, at least
    5 * 2^16), and at least 2,560 distinct pages. A collision shows as a false hit, an
    `existing` publication, or a record that maps another prefix's page (the pool's free count)."""
    P = engine.tokens_per_page
    pages = max(1, min(10, engine.max_input_len // P))
    held = max(1, min(engine.kv_pool_pages, 2560))      # keys resident once the cache is full
    probes = max(2560, math.ceil(5 * 2 ** 16 / held))
    requests = math.ceil(probes / pages)
    size = requests * (pages * P + 100)                  # bytes of the request file, about
    if size > MAX_INPUT_BYTES:                           # a runtime refuses a file that large unread
        raise CannotBuild(f"the birthday bound needs {requests} requests of {pages * P} tokens on a pool of "
                          f"{engine.kv_pool_pages} page(s), a request file of about {size} bytes, more than the "
                          f"{MAX_INPUT_BYTES} an input file may have")
    rng = random.Random(5)
    doc = dict(GREEDY, batch_size=min(8, engine.max_batch_size), max_generate_length=1, num_logprobs=0,
               requests=[_user(_words(rng, pages * P)) for _ in range(requests)])
    return doc, dict(runtime, contextCacheMaxRecords=max(4096, requests))


def _documents(engine, seed: int) -> tuple[int, list[str]]:
    """(pages per document, documents): distinct inputs of L complete pages and one more token,
    L chosen so that about four of them fill the engine's page pool (at most max_input_len)."""
    P = engine.tokens_per_page
    pages = max(1, min(engine.max_input_len // P - 1, engine.kv_pool_pages // 4))
    count = engine.kv_pool_pages // pages + 1          # one more than the pool holds
    rng = random.Random(seed)
    return pages, [_words(rng, pages * P + 1) for _ in range(count)]


@scenario("cap/pool-fill")
def pool_fill(engine, runtime: dict) -> tuple[dict, dict]:
    """Pool pressure as a fraction of the engine's pool (CR-CAP-3, CR-CAP-4): one document more
    than the pool can hold, each of L complete pages, so the last admissions evict the least
    recently used records; then the first document again (evicted: a miss that evicts again)
    and the last but one (still held: a hit of L pages)."""
    _, docs = _documents(engine, seed=11)
    requests = [_user(d) for d in docs] + [_user(docs[0]), _user(docs[-2])]
    doc = dict(GREEDY, batch_size=1, max_generate_length=1, num_logprobs=0,
               context_cache_commit_policy="prefill_state_only", requests=requests)
    return doc, runtime


@scenario("cap/hit-does-not-protect")
def hit_does_not_protect(engine, runtime: dict) -> tuple[dict, dict]:
    """A pool filled exactly by the records of k documents of whole pages, then a request that
    extends the least recently used document by a page: it pins that record's pages and needs a
    private one, and the planner walks the records from the least recently used: first the
    record that supplied the hit (CR-CAP-5: a vanilla hit neither touches nor protects it;
    evicting it frees nothing, its pages are pinned, CR-CAP-2), then the next, which frees the
    page. So `records.evicted` counts both; a backend whose hit touched its record evicts only
    the second. The second document, asked again, misses (and evicts the third)."""
    P, C, most = engine.tokens_per_page, engine.kv_pool_pages, engine.max_input_len // engine.tokens_per_page - 1
    for k in range(4, max(5, C + 1)):
        pages, rest = divmod(C, k)
        if pages >= 1 and pages + rest <= most:          # the first document takes the remainder
            break
    else:
        raise CannotBuild(f"a pool of {C} page(s) cannot be filled by documents of whole pages that fit "
                          f"max_input_len {engine.max_input_len} at {P} tokens per page")
    rng = random.Random(13)
    full = [_words(rng, (pages + (rest if i == 0 else 0)) * P) for i in range(k)]
    longer = full[0] + _words(random.Random(17), P)
    requests = [_user(d) for d in full] + [_user(longer), _user(full[1])]
    doc = dict(GREEDY, batch_size=1, max_generate_length=1, num_logprobs=0,
               context_cache_commit_policy="prefill_state_only", requests=requests)
    return doc, runtime
