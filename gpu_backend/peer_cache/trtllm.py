"""trtllm-kv-reuse: a tree of blocks keyed by tokens, adapter and salt; partial reuse (PEER-TRT-*)."""
from .common import concat_kv, shared_prefix


class _TrtBlock:
    __slots__ = ("tokens", "kv", "children")

    def __init__(self, tokens, kv):
        self.tokens, self.kv, self.children = tokens, kv, {}


class TrtBlockTree:
    """TensorRT-LLM block reuse (kvCacheManager.cpp, PEER-TRT-1..5): blocks of T tokens in a tree whose edges
    are (tokens, LoRA task id, salt, extra key); a request looks up its first N - 1 tokens, a
    partial last block included; a partly matching block is copied when it has children, else
    taken out of the tree and written into (without copy on partial reuse only such leaves are
    candidates); a finished request stores its computed sequence. Unbounded: never evicts (the
    kit cannot empty a TensorRT-LLM pool between cases, so eviction, PEER-TRT-6, is not served
    here: `max_blocks` is unset)."""
    settings = {"tokens_per_block": 32, "enable_block_reuse": True, "enable_partial_reuse": True,
                "copy_on_partial_reuse": True, "max_blocks": None}

    def __init__(self, tokens_per_block=32, enable_block_reuse=True, enable_partial_reuse=True,
                 copy_on_partial_reuse=True, max_blocks=None):
        if max_blocks is not None:
            raise ValueError("setting max_blocks: the bundled server does not evict blocks (PEER-TRT-6 is not "
                             "served): leave it unset")
        self.T, self.on = tokens_per_block, enable_block_reuse
        self.partial, self.copy = enable_partial_reuse, copy_on_partial_reuse
        self.reset()

    def reset(self):
        self.root = _TrtBlock((), None)

    def pages(self, context: int) -> dict:
        """trtllm-serve publishes none of its cache settings."""
        return {}

    def label(self, req) -> tuple:
        """PEER-TRT-2: what keys every block besides its tokens."""
        return (req.lora, req.salt, req.extra_key)

    def chunks(self, ids) -> list:
        return [tuple(ids[i:i + self.T]) for i in range(0, len(ids), self.T)]

    def reported(self, matched: int, n: int) -> int:
        """PEER-TRT-3: the tokens matched, a partly matched block's included."""
        return matched

    def _shared_with(self, node, chunk, label):
        """PEER-TRT-1 / PEER-TRT-4: (child, tokens shared) of the best child for `chunk`: an exact
        edge first, then the longest common prefix among the children that may be reused in part."""
        exact = node.children.get((chunk, label))
        if exact is not None:
            return exact, len(chunk), (chunk, label)
        best = (None, 0, None)
        if self.partial:
            for (tokens, other), child in node.children.items():
                if other != label or not (self.copy or not child.children):
                    continue
                n = shared_prefix(tokens, chunk)
                if n > best[1]:
                    best = (child, n, (tokens, other))
        return best

    def lookup(self, req):
        """PEER-TRT-3: the blocks of the first N - 1 tokens, the last of them possibly in part."""
        if not self.on:                                     # PEER-TRT-5: block reuse off
            return 0, None
        n, label = len(req.ids), self.label(req)
        node, matched, parts = self.root, 0, []
        for chunk in self.chunks(req.ids[:n - 1]):
            child, k, edge = self._shared_with(node, chunk, label)
            if child is None or k == 0:
                break
            parts.append(child.kv[:, :, :k])
            matched += k
            if edge != (chunk, label) or len(chunk) < self.T:     # reused in part: the match ends here
                if not child.children:                      # PEER-TRT-4:
                    node.children.pop(edge)                 # a leaf nobody holds: taken out, written into
                break                                       # (else copied: the tree keeps it)
            node = child
        c = self.reported(matched, n)
        use = min(matched, n - 1)
        return c, (concat_kv(parts)[:, :, :use] if use > 0 else None)

    def store(self, req, sequence, kv, sampled):
        """PEER-TRT-4: the computed sequence's blocks, a partial last one included, join the tree."""
        if not self.on:
            return
        label, node, at = self.label(req), self.root, 0
        for chunk in self.chunks(sequence):
            child = node.children.get((chunk, label))
            if child is None:
                child = _TrtBlock(chunk, kv[:, :, at:at + len(chunk)].clone())
                node.children[(chunk, label)] = child
            node, at = child, at + len(chunk)
