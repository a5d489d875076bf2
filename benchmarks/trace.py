"""Seeded synthetic request traces for the oracle benchmark (item 1).

A trace models retrieval-augmented chat traffic: every request is
    <|bos|> <|system|> SYSTEM PROMPT <|end|> <|user|> DOCUMENT \n\nQ: QUESTION <|end|> <|assistant|>
with one of a few shared system prompts, a document drawn from a fixed pool by a Zipf law
(popular documents recur, so their pages are reused), and a fresh per-request question.
Lengths are chosen so the mean prompt is about 2,048 tokens (bytes-v1: one ASCII character is
one token). Nothing is stored in the repository: `write_trace` writes the request file into a
temporary folder at benchmark time, streaming, so 100k requests (200M tokens) never sit in
memory as Python objects.
"""
from __future__ import annotations

import bisect
import json
import math
import random

ALPHABET = bytes(range(ord("a"), ord("z") + 1)) + b"     ,.eeaoint"
_TABLE = bytes(ALPHABET[i % len(ALPHABET)] for i in range(256))

DEFAULTS = dict(system_prompts=8, system_len=(256, 768), documents=2000, doc_len=(600, 2300),
                question_len=(16, 128), zipf_s=1.1,
                mean_tokens=2048)
SEPARATOR = "\n\nQ: "
CHAT_OVERHEAD = 6 + len(SEPARATOR)   # bos, system, end, user, end, assistant + the separator


def _text(rng: random.Random, n: int) -> str:
    return rng.randbytes(n).translate(_TABLE).decode("ascii")


class TraceModel:
    """The fixed pools (system prompts, documents) and the per-request draw of one seed."""

    def __init__(self, seed: int = 0, **kw):
        p = {**DEFAULTS, **kw}
        self.p = p
        lengths = random.Random(f"kvconform-bench-lengths-{seed}")
        texts = random.Random(f"kvconform-bench-texts-{seed}")
        order = list(range(p["documents"]))
        lengths.shuffle(order)                   # popularity rank -> document (not by length)
        self.rank_to_doc = order
        weights = [1.0 / (k + 1) ** p["zipf_s"] for k in range(p["documents"])]
        total, acc, self.cdf = sum(weights), 0.0, []
        for w in weights:
            acc += w / total
            self.cdf.append(acc)
        sys_len = [lengths.randint(*p["system_len"]) for _ in range(p["system_prompts"])]
        doc_len = [lengths.randint(*p["doc_len"]) for _ in range(p["documents"])]
        # scale document lengths so the expected prompt is mean_tokens long under the draw laws
        sys_p = [math.exp(-s) - (math.exp(-s - 1) if s < p["system_prompts"] - 1 else 0)
                 for s in range(p["system_prompts"])]
        e_sys = sum(a * b for a, b in zip(sys_p, sys_len))
        e_doc = sum(w / total * doc_len[order[k]] for k, w in enumerate(weights))
        e_rest = sum(p["question_len"]) / 2 + CHAT_OVERHEAD
        scale = (p["mean_tokens"] - e_sys - e_rest) / e_doc
        self.systems = [_text(texts, n) for n in sys_len]
        self.docs = [_text(texts, max(1, round(n * scale))) for n in doc_len]
        self.seed = seed
        self.max_tokens = max(map(len, self.systems)) + max(map(len, self.docs)) + p["question_len"][1] + CHAT_OVERHEAD

    def requests(self, n: int):
        """Yield (system, document, question) index/text triples of n requests."""
        rng = random.Random(f"kvconform-bench-requests-{self.seed}")
        p = self.p
        for _ in range(n):
            s = min(int(rng.expovariate(1.0)), p["system_prompts"] - 1)   # a few prompts dominate
            rank = min(bisect.bisect_left(self.cdf, rng.random()), p["documents"] - 1)
            q = _text(rng, rng.randint(*p["question_len"]))
            yield s, self.rank_to_doc[rank], q

    def message_list(self, s: int, d: int, q: str) -> list:
        return [{"role": "system", "content": self.systems[s]},
                {"role": "user", "content": self.docs[d] + SEPARATOR + q}]

    def tokens_of(self, s: int, d: int, q: str) -> int:
        return len(self.systems[s]) + len(self.docs[d]) + len(q) + CHAT_OVERHEAD


def write_trace(path: str, n: int, *, seed: int = 0, batch_size: int = 1, max_generate_length: int = 1,
                **kw) -> dict:
    """Write a request file of n requests; return its statistics (tokens, distinct documents...)."""
    model = TraceModel(seed, **kw)
    tokens = 0
    docs, longest = set(), 0
    with open(path, "w") as f:
        f.write('{"batch_size": %d, "max_generate_length": %d, '
                '"context_cache_commit_policy": "prefill_state_only", "requests": [\n'
                % (batch_size, max_generate_length))
        for i, (s, d, q) in enumerate(model.requests(n)):
            if i:
                f.write(",\n")
            json.dump({"messages": model.message_list(s, d, q)}, f)
            t = model.tokens_of(s, d, q)
            tokens += t
            longest = max(longest, t)
            docs.add(d)
        f.write("\n]}\n")
    return {"requests": n, "prompt_tokens": tokens, "mean_tokens": tokens / n, "max_tokens": longest,
            "distinct_documents": len(docs), "seed": seed}


def oracle_engine_args(max_tokens: int, P: int = 128, pool_pages: int = 4096, batch_size: int = 1) -> dict:
    """Build arguments of the simulated engine: inputs up to `max_tokens` (TraceModel.max_tokens)."""
    cap = P * math.ceil((max_tokens + 64) / P)
    return {"maxInputLen": max_tokens + 1, "maxKVCacheCapacity": cap, "maxKVPoolPages": pool_pages,
            "tokensPerPage": P, "maxBatchSize": batch_size}
