"""trtllm-kv-reuse: TensorRT-LLM's block reuse, one block pool per attention window (PEER-TRT-*).

A pool is `max_blocks` numbered blocks (unset: as many as needed, never evicting), free blocks
waiting in one queue per retention priority; the stored blocks form a tree whose edges are (block
tokens, what else keys the request: LoRA task id, salt, extra key, the images a block overlaps).
Every distinct `max_attention_window` has its own pool and tree; a request runs through all of
them and reports the largest window's match (kvCacheManager.cpp at b35ac1b64368).
"""
import time

from .common import concat_kv

DEFAULT_PRIORITY = 35


class _Node:
    __slots__ = ("bid", "edge", "kv", "children", "parent", "refs", "priority", "duration", "expires", "owner")

    def __init__(self, bid):
        self.bid, self.edge, self.kv, self.children, self.parent = bid, None, None, {}, None
        self.refs, self.priority, self.duration, self.expires, self.owner = 0, DEFAULT_PRIORITY, None, None, None


class _Run:
    """A request in one window: its blocks (in order), how many of them left the window, its KV
    token count, and whether it may still store (another request took a block it let go)."""

    def __init__(self):
        self.blocks, self.gone, self.tokens, self.may_store = [], 0, 0, True


def parse_retention(doc):
    """`kv_cache_retention_config` -> (context ranges [(start, end | None, priority, duration)],
    decode priority, decode duration); ValueError for what KvCacheRetentionConfig refuses."""
    if doc is None:
        return [], DEFAULT_PRIORITY, None
    if not isinstance(doc, dict):
        raise ValueError("kv_cache_retention_config must be an object")

    def number(value, what, low=0, high=None):
        if value is None and what != "priority":
            return None
        if type(value) is not int or value < low or (high is not None and value > high):
            raise ValueError(f"kv_cache_retention_config: {what} must be an integer in [{low}, {high or 'inf'}]")
        return value
    ranges = sorted((number(r.get("token_start", 0), "token_start"), number(r.get("token_end"), "token_end"),
                     number(r.get("priority"), "priority", 0, 100), number(r.get("duration_ms"), "duration_ms"))
                    for r in (doc.get("token_range_retention_configs") or []) if isinstance(r, dict))
    for k, (start, end, _, _) in enumerate(ranges):
        nxt = ranges[k + 1][0] if k + 1 < len(ranges) else None
        if (end is None and nxt is not None) or (end is not None and (end <= start or (nxt is not None and end > nxt))):
            raise ValueError("kv_cache_retention_config: token ranges must be ordered, non-empty and not overlap")
    decode = doc.get("decode_retention_priority")
    return (ranges, DEFAULT_PRIORITY if decode is None else number(decode, "priority", 0, 100),
            number(doc.get("decode_duration_ms"), "decode_duration_ms"))


class _Window:
    """One attention window's pool and tree (PEER-TRT-1..9)."""

    def __init__(self, owner, size):
        self.o, self.size = owner, size
        self.root = _Node(-1)
        self.nodes = [_Node(b) for b in range(owner.K or 0)]
        self.queues = {DEFAULT_PRIORITY: list(self.nodes)}
        self.live = []

    # --- free blocks -----------------------------------------------------------------------------
    def _unqueue(self, node):
        for queue in self.queues.values():
            if node in queue:
                queue.remove(node)
        node.expires = None

    def _queue(self, node):
        if self.o.K is None:
            return
        self.queues.setdefault(self.o.queue_priority(node), []).append(node)
        if node.duration is not None and node.priority != DEFAULT_PRIORITY:
            node.expires = self.o.now() + node.duration

    def expire(self, now):
        """PEER-TRT-9: free blocks whose duration ran out go to the default queue's tail."""
        due = sorted((n for q in self.queues.values() for n in q if n.expires is not None and self.o.expired(n, now)),
                     key=lambda n: n.expires)
        for node in due:
            self._unqueue(node)
            node.priority = DEFAULT_PRIORITY
            self.queues.setdefault(DEFAULT_PRIORITY, []).append(node)

    def _cut(self, node):
        """A node and its subtree leave the tree."""
        for child in list(node.children.values()):
            self._cut(child)
        if node.parent is not None:
            node.parent.children.pop(node.edge, None)
            node.parent = None

    def _new(self, run, priority, duration):
        """PEER-TRT-6: the head of the lowest-priority non-empty queue (or a fresh block)."""
        if self.o.K is None:
            node = _Node(len(self.nodes))
            self.nodes.append(node)
        else:
            queue = next((self.queues[p] for p in sorted(self.queues) if self.queues[p]), None)
            if queue is None:
                raise RuntimeError(f"out of KV blocks ({self.o.K})")
            node = queue[0]
            self._unqueue(node)
            self._cut(node)
            if node.owner is not None and node.owner is not run and node.owner in self.live:
                node.owner.may_store = False             # PEER-TRT-7: it let this block go and still runs
        node.priority, node.duration, node.owner, node.kv = priority, duration, run, None
        node.refs += 1
        run.blocks.append(node)
        return node

    # --- a request -------------------------------------------------------------------------------
    def _child(self, parent, chunk, label):
        """(child, tokens shared, exact) of the best child for `chunk`: its exact edge, else the
        longest shared prefix among children a partial reuse may take."""
        exact = parent.children.get((chunk, label))
        if exact is not None:
            return exact, len(chunk), True
        best, best_k = None, 0
        if self.o.partial:
            for (tokens, other), child in parent.children.items():
                if other == label and (self.o.copy or (child.refs == 0 and not child.children)):
                    k = 0
                    while k < min(len(tokens), len(chunk)) and tokens[k] == chunk[k]:
                        k += 1
                    if k > best_k:
                        best, best_k = child, k
        return best, best_k, False

    def admit(self, req, ranges):
        """PEER-TRT-3/4/8: match, reuse or copy, allocate the prompt's blocks; (run, matched, KV)."""
        run, n, T = _Run(), len(req.ids), self.o.T
        run.tokens = n
        self.live.append(run)
        chunks = self.o.chunks(req, req.ids[:n - 1]) if self.o.on else []
        if self.o.on and n % T == 1:
            chunks.append(((), self.o.label(req, n - 1, n - 1)))
        node, matched, parts = (self.root if self.o.on else None), 0, []
        for i in range(-(-n // T)):
            hit = next((r for r in ranges if r[0] <= i * T and (r[1] is None or i * T < r[1])), None)
            priority, duration = (hit[2], hit[3]) if hit else (None, None)
            chunk, label = chunks[i] if i < len(chunks) else ((), None)
            child, k, exact = self._child(node, chunk, label) if node is not None and chunk else (None, 0, False)
            if child is None or k == 0:
                self._new(run, DEFAULT_PRIORITY if priority is None else priority, duration)
                node = None
                continue
            matched += k
            parts.append(child.kv[:, :, :k])
            if exact and len(chunk) == T:                  # a whole block: claimed, the match goes on
                self._unqueue(child)
                child.priority = child.priority if priority is None else priority
                child.duration = duration
                child.refs += 1
                run.blocks.append(child)
                node = child
                continue
            if child.refs > 0 or child.children or not self.o.takes_leaf(child):   # shared or inner: copy
                self._new(run, child.priority, child.duration)
            else:                                            # a private leaf: out of the tree, written into
                self._cut(child)
                self._unqueue(child)
                child.priority = child.priority if priority is None else priority
                child.duration = duration
                child.refs += 1
                run.blocks.append(child)
            node = None
        return run, matched, parts

    def grow(self, run, tokens, decode):
        """`addToken` up to `tokens`: blocks leave a sliding window, a token starting a block takes one."""
        T = self.o.T
        while run.tokens < tokens:
            run.tokens += 1
            while self.size is not None and run.tokens - run.gone * T >= self.size + T:
                front = run.blocks[run.gone]
                run.gone += 1
                front.refs -= 1
                if front.refs == 0:
                    self._queue(front)
            if (run.tokens - 1) % T == 0:
                self._new(run, *decode)

    def finish(self, req, run, sequence, kv):
        """PEER-TRT-4/7: store the computed sequence's blocks, then free what the run holds."""
        if run in self.live:
            self.live.remove(run)
        if self.o.on and self.o.may_store(run, self.size, sequence):
            node, at = self.root, 0
            for chunk, label in self.o.chunks(req, sequence):
                block = run.blocks[at // self.o.T] if at // self.o.T < len(run.blocks) else None
                child = node.children.get((chunk, label))
                if child is None and block is not None:
                    block.edge, block.parent, block.kv = (chunk, label), node, kv[:, :, at:at + len(chunk)].clone()
                    node.children[(chunk, label)] = block
                    child = block
                if child is None:
                    break
                node, at = child, at + len(chunk)
        for block in self.o.free_order(run.blocks[run.gone:]):
            block.refs -= 1
            if block.refs == 0:
                self._queue(block)


class TrtBlockTree:
    """TensorRT-LLM block reuse (kvCacheManager.cpp, PEER-TRT-1..10): blocks of T tokens in a tree
    per attention window; a request looks up its first N - 1 tokens, a partial last block
    included; a partly matching block is copied when shared or inner, else taken out and written
    into; a finished request stores its computed sequence. With `max_blocks` each window has that
    many blocks, freed into one queue per retention priority and taken lowest priority first;
    with `retention_config` the request's `kv_cache_retention_config` sets them."""
    settings = {"tokens_per_block": 32, "enable_block_reuse": True, "enable_partial_reuse": True,
                "copy_on_partial_reuse": True, "max_blocks": None, "max_attention_window": None,
                "retention_config": False}

    def __init__(self, tokens_per_block=32, enable_block_reuse=True, enable_partial_reuse=True,
                 copy_on_partial_reuse=True, max_blocks=None, max_attention_window=None, retention_config=False):
        self.T, self.on = tokens_per_block, enable_block_reuse
        self.partial, self.copy, self.K = enable_partial_reuse, copy_on_partial_reuse, max_blocks
        self.window_sizes = sorted(set(max_attention_window or [])) or [None]
        self.retention = retention_config
        self.reset()

    def reset(self):
        self.windows = [_Window(self, size) for size in self.window_sizes]
        self._runs = None

    def pages(self, context: int) -> dict:
        """trtllm-serve publishes none of its cache settings."""
        return {}

    # --- seams -----------------------------------------------------------------------------------
    def label(self, req, start: int, end: int) -> tuple:
        """PEER-TRT-2 / PEER-TRT-10: what keys a block of tokens [start, end) besides its tokens."""
        images = tuple((img.digest, 0 if img.start >= start else start - img.start)
                       for img in getattr(req, "images", ()) if end > img.start and start < img.start + img.length)
        return (req.lora, req.salt, req.extra_key, images)

    def reported(self, matched: int, n: int) -> int:
        """PEER-TRT-3: the tokens matched, a partly matched block's included."""
        return matched

    def queue_priority(self, node) -> int:
        """PEER-TRT-8: the queue a freed block waits in."""
        return node.priority

    def free_order(self, blocks: list) -> list:
        """PEER-TRT-6: a finished request frees its blocks last block first."""
        return list(reversed(blocks))

    def takes_leaf(self, node) -> bool:
        """PEER-TRT-4: a partly matched leaf nobody holds is taken out of the tree and written into."""
        return True

    def may_store(self, run, window, sequence) -> bool:
        """PEER-TRT-7: a request stores unless another took a block it let go out of its window."""
        return run.may_store

    def expired(self, node, now) -> bool:
        """PEER-TRT-9: a free block's priority duration has run out."""
        return node.expires <= now

    def now(self) -> float:
        return time.monotonic() * 1000.0

    # --- requests --------------------------------------------------------------------------------
    def chunks(self, req, ids) -> list:
        return [(tuple(ids[i:i + self.T]), self.label(req, i, min(i + self.T, len(ids))))
                for i in range(0, len(ids), self.T)]

    def _retention(self, req):
        return parse_retention(req.retention) if self.retention else ([], DEFAULT_PRIORITY, None)

    def lookup(self, req):
        """PEER-TRT-3/7: every window admits the request; the largest window's match is reported."""
        ranges, *decode = self._retention(req)
        now = self.now()
        for window in self.windows:
            window.expire(now)
        admitted = [window.admit(req, ranges) for window in self.windows]
        self._runs = [run for run, _, _ in admitted]
        _, matched, parts = admitted[-1]
        use = min(matched, len(req.ids) - 1)
        return self.reported(matched, len(req.ids)), (concat_kv(parts)[:, :, :use] if use > 0 else None)

    def store(self, req, sequence, kv, sampled):
        """PEER-TRT-4: the KV of the computed sequence grows the runs, then each window stores it."""
        _, *decode = self._retention(req)
        for window, run in zip(self.windows, self._runs or []):
            window.grow(run, max(len(req.ids), len(sequence)), decode)
            window.finish(req, run, sequence, kv)
        self._runs = None
