"""trtllm-kv-reuse's own cases: eviction from a pool the case first fills, retention, attention windows."""
from __future__ import annotations

from .layout import (MAX_EVICTION_TOKENS, QUESTIONS, SYSTEM, PeerCase, Step, Unsupported, _rules, at_least, chat,
                     filler, fit, long_prompt)


def fill_to(make, ids, low: int, high: int, target: int) -> list | None:
    """Messages make(m) whose prompt is `target` tokens long, else any length in [low, high], else None."""
    def length(m):
        return len(ids(make(m)))
    base = length(0)
    m = fit(length, target, target - base, 40)
    if m is None:
        m = at_least(make, ids, low)
    return make(m) if low <= length(m) <= high else None


def _trt_pool(case_id: str, rule: str, count, ids, settings, U, needs_retention: bool):
    """What every TensorRT-LLM eviction case needs: a known pool (`max_blocks` K), a server that
    takes retention configs where the case sends them, and a flush: one request of K blocks
    (K*T - 1 tokens, one sampled), which takes every block of the pool whatever earlier cases left
    and frees them in a known order, so the case starts from a pool the oracle knows (PEER-TRT-6).
    -> (flush messages, K, context note) or an Unsupported."""
    rules = _rules(count, "PEER-TRT-6", *([rule] if rule != "PEER-TRT-6" else []))
    K, T = settings["max_blocks"], U
    if K is None:
        return Unsupported(case_id, "eviction", rules, "the server's pool size is not known: pass --peer-setting "
                           "max_blocks=K (the primary pool's blocks per window) to judge eviction; trtllm-serve "
                           "publishes no cache setting")
    if needs_retention and not settings["retention_config"]:
        return Unsupported(case_id, "eviction", rules, "the server is not known to take kv_cache_retention_config "
                           "in the request body (trtllm-serve's OpenAI routes forward none): pass --peer-setting "
                           "retention_config=true to a server that does")
    if K < 9:
        return Unsupported(case_id, "eviction", rules, f"max_blocks={K} is too small: the layout needs 9 blocks (a "
                           "pool-filling request, two prompts of 3 blocks, one that evicts)")
    if K * T > MAX_EVICTION_TOKENS + 4 * T:
        return Unsupported(case_id, "eviction", rules, f"max_blocks={K} of {T} tokens needs a {K * T}-token request "
                           f"to fill the pool; this case writes at most {MAX_EVICTION_TOKENS + 4 * T}")

    def make(m):
        return chat("Fill the pool. " + filler(m, 83), QUESTIONS[3])
    flush = fill_to(make, ids, (K - 1) * T + 1, K * T - 1, K * T - 1)
    if flush is None:
        return Unsupported(case_id, "eviction", rules, f"no filler gives a prompt of {(K - 1) * T + 1}..{K * T - 1} "
                           f"tokens (K = {K} blocks of {T}) with this tokenizer")
    return flush, rules


def _trt_prompt(head: str, seed: int, question: str, ids, T: int, blocks: int):
    """A prompt of `blocks` blocks ending mid-block (at least 2T + 1 tokens when blocks >= 3)."""
    def make(m):
        return chat(head + " " + filler(m, seed), question)
    target = (blocks - 1) * T + T // 2 + 1
    return fill_to(make, ids, (blocks - 1) * T + 1, blocks * T - 1, target)


def _trt_eviction(case_id, rule, what, a_retention, count, ids, settings, U):
    """Flush, A (3 blocks, `a_retention`), B (3 blocks), C (evicts the flush's blocks and one more),
    then A and B again: which of A and B lost a block is what `rule` decides. Each prompt has a
    salt of its own, so no block of one matches another's in part (the chat template they share
    would otherwise be copied, with the priority of the block it copies, PEER-TRT-8)."""
    pool = _trt_pool(case_id, rule, count, ids, settings, U, a_retention is not None)
    if isinstance(pool, Unsupported):
        return pool
    flush, rules = pool
    K, T = settings["max_blocks"], U
    a = _trt_prompt(SYSTEM, 89, QUESTIONS[0], ids, T, 3)
    b = _trt_prompt("Reply in one word.", 97, QUESTIONS[1], ids, T, 3)
    c = _trt_prompt("Think step by step.", 101, QUESTIONS[2], ids, T, K - 5)
    if None in (a, b, c):
        return Unsupported(case_id, "eviction", rules, f"no filler gives prompts of exactly 3 and {K - 5} blocks of "
                           f"{T} with this tokenizer")
    steps = [Step(flush, salt="fill"), Step(a, salt="a", retention=a_retention), Step(b, salt="b"), Step(c, salt="c"),
             Step(a, salt="a", reuse=True, retention=a_retention), Step(b, salt="b", reuse=True)]
    return PeerCase(case_id, "eviction", f"a request of all {K} blocks, prompts A and B of 3 blocks, C of {K - 5}, then "
                    f"A and B again: {what}", rules, steps,
                    {"max_blocks": K, "block_size": T, "prompt_tokens": [len(ids(x.messages)) for x in steps[:4]]})


def _trt_blocks(count, ids, settings, U):
    return _trt_eviction("eviction/trt-blocks", "PEER-TRT-6", "C takes the free blocks in queue order, head first: "
                         "the flush's, then A's last block", None, count, ids, settings, U)


def _trt_priority(count, ids, settings, U):
    return _trt_eviction("eviction/trt-priority", "PEER-TRT-8", "A's blocks have retention priority 90, so C evicts "
                         "B's last block, not A's", {"token_range_retention_configs": [
                             {"token_start": 0, "token_end": None, "priority": 90}]}, count, ids, settings, U)


def _trt_duration(count, ids, settings, U):
    """Flush, A (3 blocks at priority 10 for 0 ms), B (3 blocks), A again: A's duration has run out
    when B arrives, so its blocks wait at the default priority behind the flush's and B takes
    the flush's; were A still at 10, B would take A's (PEER-TRT-9). A duration of 0 ms runs out
    before the next request whatever the server's clock says, so the case is deterministic."""
    case_id, rule = "eviction/trt-duration", "PEER-TRT-9"
    pool = _trt_pool(case_id, rule, count, ids, settings, U, True)
    if isinstance(pool, Unsupported):
        return pool
    flush, rules = pool
    T = U
    a = _trt_prompt(SYSTEM, 103, QUESTIONS[3], ids, T, 3)
    b = _trt_prompt("Reply in one word.", 107, QUESTIONS[0], ids, T, 3)
    if None in (a, b):
        return Unsupported(case_id, "eviction", rules, f"no filler gives prompts of exactly 3 blocks of {T}")
    low = {"token_range_retention_configs": [{"token_start": 0, "token_end": None, "priority": 10, "duration_ms": 0}]}
    steps = [Step(flush, salt="fill"), Step(a, salt="a", retention=low), Step(b, salt="b"),
             Step(a, salt="a", reuse=True, retention=low)]
    return PeerCase(case_id, "eviction", "a request of all blocks, A at retention priority 10 for 0 ms, B, then A "
                    "again: A's priority has run out, so B takes the pool-filling request's blocks, not A's", rules,
                    steps, {"max_blocks": settings["max_blocks"], "block_size": T,
                            "prompt_tokens": [len(ids(x.messages)) for x in steps[:3]]})


def _trt_window(off: int, name: str):
    """A prompt of W - 1, W or W + 1 tokens (W the smallest attention window) sent twice; the W - 1
    prompt samples 3 tokens, so its sequence outgrows the window while it decodes. A sliding
    window stores the whole computed sequence all the same (PEER-TRT-7)."""
    case_id = f"boundaries/trt-window-{name}"

    def build(count, ids, settings, U):
        rules = _rules(count, "PEER-TRT-7")
        windows = settings["max_attention_window"]
        if not windows:
            return Unsupported(case_id, "boundaries", rules, "no attention window is set: pass --peer-setting "
                               "max_attention_window=W[,W...] (kv_cache_config.max_attention_window) to judge windows")
        W = min(windows)
        target = W + off
        if target < 2 * U + 1:
            return Unsupported(case_id, "boundaries", rules, f"the smallest window ({W}) is shorter than 2B + 2 tokens "
                               f"(B = {U}): a prompt at its edge cannot reuse a whole block beyond the first")

        def make(m):
            return chat(SYSTEM + " " + filler(m, 109), QUESTIONS[1])
        prompt = fill_to(make, ids, target, target, target)
        if prompt is None:
            return Unsupported(case_id, "boundaries", rules, f"no filler gives a prompt of exactly {target} tokens")
        first = Step(prompt, 3 if off < 0 else 1)
        return PeerCase(case_id, "boundaries", f"a prompt of W{off:+d} tokens (W = {W}, the smallest window; B = {U}) "
                        "sent twice" + (", the first sampling 3 tokens past the window" if off < 0 else ""), rules,
                        [first, Step(prompt, reuse=True)], {"window": W, "prompt_tokens": target})
    return case_id, build


def _ranges(*ranges, **more) -> dict:
    """A retention config of token ranges (start, end or None, priority[, duration_ms])."""
    out = [dict(zip(("token_start", "token_end", "priority", "duration_ms"), r)) for r in ranges]
    return {"token_range_retention_configs": out, **more}


RETENTION_CHECKS = (   # (config, refused): each check of KvCacheRetentionConfig's constructor, each side of it
    (_ranges((0, None, 101)), True), (_ranges((0, None, 100)), False),
    (_ranges((0, None, -1)), True), (_ranges((0, None, 0)), False),
    (_ranges((0, 16, 50), (16, None, 50)), False), (_ranges((0, 16, 50), (15, None, 50)), True),
    (_ranges((16, 16, 50)), True), (_ranges((16, 17, 50)), False),
    (_ranges((0, None, 50), (16, 32, 50)), True),
    (_ranges((0, None, 50, -1)), True), (_ranges((0, None, 50, 0)), False),
    (_ranges((0, None, 50), decode_retention_priority=101), True),
    (_ranges((0, None, 50), decode_retention_priority=100, decode_duration_ms=-1), True),
    (_ranges((0, None, 50), decode_retention_priority=100, decode_duration_ms=0), False),
)


def _trt_retention_checks(count, ids, settings, U):
    """PEER-TRT-8: one prompt sent under retention configs on each side of each check the runtime's
    `KvCacheRetentionConfig` makes (priorities 0..100, durations >= 0, ranges ordered, non-empty,
    not overlapping, an open end only last): the refused ones are an HTTP 400 and cache nothing,
    the others are served and reuse the prompt."""
    case_id, rules = "isolation/trt-retention-checks", _rules(count, "PEER-TRT-8")
    if not settings["retention_config"]:
        return Unsupported(case_id, "isolation", rules, "the server is not known to take kv_cache_retention_config "
                           "in the request body (trtllm-serve's OpenAI routes forward none): pass --peer-setting "
                           "retention_config=true to a server that does")
    prompt = long_prompt(SYSTEM, QUESTIONS[2], 131, ids, U)
    steps = [Step(prompt, retention=config, reuse=not refused and k > 1)
             for k, (config, refused) in enumerate(RETENTION_CHECKS)]
    return PeerCase(case_id, "isolation", "one prompt under retention configs each side of each check "
                    "KvCacheRetentionConfig makes: the refused are HTTP 400, the others served", rules, steps)


TRT_CASES = {"isolation/trt-retention-checks": _trt_retention_checks, "eviction/trt-blocks": _trt_blocks, "eviction/trt-priority": _trt_priority,
             "eviction/trt-duration": _trt_duration, **dict(_trt_window(o, n) for o, n in ((-1, "W-1"), (0, "W"),
                                                                                               (1, "W+1")))}
