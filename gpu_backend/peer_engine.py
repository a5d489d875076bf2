"""Greedy generation for the bundled OpenAI-compatible server, continuing from reused KV.

One request at a time: a per-request KV pool of one token per slot holds the reused prefix's KV
(copied in from the server's cache, never recomputed) and the KV computed for the rest of the
prompt and for every sampled token fed back. What comes out is what the cache stores: the KV of
the computed sequence `prompt + sampled[:-1]`.

    engine = PeerEngine(engine_dir, device)       # an attention-only engine with an hf tokenizer
    ids, text = engine.prompt(messages)           # chat template rendered and tokenized
    ids, text, spans = engine.layout(messages)    # the same, with the image spans (a vision engine)
    result = engine.generate(ids, reused_kv, max_tokens, lora, images=spans)

Images (a vision engine: built with --vision and a media counter) are laid out as the engine's
request files lay them out (hf_prompt.py): the k-th image token repeated as many times as the
counter gives the image, each position embedded by the vision encoder (model.encode_media);
a message content is a string or a list of ("text", str) and ("image", MediaItem) parts.

A cache whose runtime moves KV (llama.cpp's chunk reuse and context shift) hands the reused KV
as pieces, each with the positions it moves by, and bounds generation by its context; the keys
of moved KV are rotated to their new positions (RoPE composes: rotating by the move is what
llama.cpp's K-shift does), and `result["sequence"]` is what the KV then holds.
"""
import json
import os

import torch
from safetensors.torch import load_file

from .hf_prompt import HFText
from .kv_pool import KVPool
from .layers import apply_rope, rope_tables
from .model import ForwardBatch, Model
from .runtime import load_engine_config, resolve_device

PROMPT_MEMO = 512


class PeerEngine:
    def __init__(self, engine_dir: str, device: str = "cpu"):
        self.cfg = load_engine_config(engine_dir)
        if any(kind != "attention" for kind in self.cfg["layer_kinds"]):
            raise ValueError("the server needs an attention-only engine")
        if not isinstance(self.cfg["tokenizer"], dict):
            raise ValueError("the server needs an engine built with --tokenizer (a chat template)")
        self.device = resolve_device(device)
        self.model = Model(self.cfg, os.path.join(engine_dir, self.cfg["weights"]), self.device)
        self.text = HFText(engine_dir, self.cfg)
        self.allowed = self.text.allowed.to(self.device)
        self.lora_paths = {name: os.path.join(engine_dir, spec["path"]) for name, spec in self.cfg["lora_adapters"].items()}
        self.loras = {name: self._load_lora(path) for name, path in self.lora_paths.items()}
        self.layers = len(self.cfg["layer_kinds"])
        self._prompts: dict = {}

    def _load_lora(self, path: str) -> dict:
        t = load_file(path, device=str(self.device))
        return {k[:-len(".lora_A")]: (t[k].float(), t[k[:-len("lora_A")] + "lora_B"].float())
                for k in t if k.endswith(".lora_A")}

    @property
    def vision(self) -> bool:
        """Whether the engine takes images (it has a vision encoder and a media counter)."""
        return self.text.counter is not None

    def image_count(self, h: int, w: int) -> int:
        """Tokens of an h x w image under the engine's media counter (CounterRefusal: refused)."""
        return self.text.image_count(h, w)

    def prompt(self, messages: list) -> tuple[list, str]:
        """(ids, rendered text) of `[{"role", "content"}]` with the generation prompt."""
        ids, text, _ = self.layout(messages)
        return ids, text

    def layout(self, messages: list) -> tuple[list, str, list]:
        """(ids, rendered text, media spans) of the messages with the generation prompt; a content
        is a string or a list of ("text", str) / ("image", MediaItem) parts. The last PROMPT_MEMO
        layouts are remembered (a client asks /tokenize, then chats)."""
        key = json.dumps([(m["role"], m["content"] if isinstance(m["content"], str) else
                           [(kind, value if kind == "text" else value.digest.hex()) for kind, value in m["content"]])
                          for m in messages])
        if key not in self._prompts:
            flat = [(m["role"], [("text", m["content"])] if isinstance(m["content"], str) else list(m["content"]))
                    for m in messages]
            ids, spans, text = self.text.layout(flat, chat=True, add_generation_prompt=True)
            if len(self._prompts) >= PROMPT_MEMO:
                self._prompts.pop(next(iter(self._prompts)))
            self._prompts[key] = ([int(t) for t in ids], text, spans)
        ids, text, spans = self._prompts[key]
        return list(ids), text, list(spans)

    def tokenize(self, text: str) -> list:
        return list(self.text.tok.encode(text, add_special_tokens=False).ids)

    @torch.no_grad()
    def generate(self, ids: list, reused_kv, max_tokens: int, lora: str | None = None,
                 logit_bias: dict | None = None, images: list = (), context: int | None = None,
                 shift=None) -> dict:
        """Greedy decoding of at most `max_tokens` tokens (the EOS ends it). `reused_kv`: the KV
        of the first `reused` prompt positions, [layers, 2, reused, kv heads, head dim], or
        pieces [(KV, positions it moves by)] laid end to end; `images`: the media spans of the
        prompt (its positions take the encoder's embeddings). With `context`, the sequence held
        never reaches it: before a sampled token is fed back into `context - 1` held tokens,
        generation stops, or with `shift(held, context) -> (kept, discarded)` the tokens after
        the first `kept` are discarded and the rest moved down."""
        n = len(ids)
        reused_kv = self._placed(reused_kv)
        reused = 0 if reused_kv is None else reused_kv.shape[2]
        if not 0 <= reused < n:
            raise ValueError(f"reused {reused} of {n} prompt tokens: at least one must be computed")
        room = n + max_tokens if context is None else min(n + max_tokens, context)
        pool = KVPool(layers=self.layers, pages=room, P=1, kv_heads=self.cfg["num_kv_heads"],
                      head_dim=self.cfg["head_dim"], dtype=torch.float16, device=self.device)
        if reused:
            pool.write_positions(torch.arange(reused, device=self.device), reused_kv.to(self.device))
        adapter = None if lora is None else self.loras[lora]
        logits = self._forward(pool, ids[reused:], reused, adapter, self._media(images, reused, n))
        bias = torch.zeros_like(logits)
        for token, value in (logit_bias or {}).items():
            if 0 <= token < bias.shape[-1]:
                bias[token] = value
        sampled, logprobs, held = [], [], list(ids)
        while True:
            lp = torch.log_softmax((logits + bias).masked_fill(~self.allowed, float("-inf")), dim=-1)
            token = int(lp.argmax())
            sampled.append(token)
            logprobs.append(float(lp[token]))
            if token == self.text.eos or len(sampled) >= max_tokens:
                break
            if context is not None and len(held) + 1 >= context:
                if shift is None:
                    break                                       # the slot is full: generation stops
                kept, discarded = shift(len(held), context)
                self._discard(pool, len(held), kept, discarded)
                held = held[:kept] + held[kept + discarded:]
            logits = self._forward(pool, [token], len(held), adapter)
            held.append(token)
        kv = pool.read_positions(torch.arange(len(held), device=self.device)).clone()
        return {"sampled": sampled, "logprobs": logprobs, "kv": kv, "reused": reused, "sequence": held,
                "text": self.text.text(sampled)}

    def _moved(self, kv, by: int):
        """KV [layers, 2, T, kv heads, head dim] moved by `by` positions: keys rotated by that
        many positions (values do not carry a position)."""
        if by == 0:
            return kv
        keys = kv[:, 0].float()                                 # [layers, T, kv heads, head dim]
        cos, sin = rope_tables(torch.full((1, keys.shape[1]), by, device=keys.device), self.cfg["head_dim"],
                               self.model.theta)
        return torch.stack([apply_rope(keys, cos, sin).to(kv.dtype), kv[:, 1]], dim=1)

    def _placed(self, reused):
        """One KV tensor for the reused positions: pieces are moved and laid end to end."""
        if reused is None or isinstance(reused, torch.Tensor):
            return reused
        parts = [self._moved(kv, by) for kv, by in reused]
        return torch.cat(parts, dim=2) if parts else None

    def _discard(self, pool, held: int, kept: int, discarded: int) -> None:
        """Positions kept .. kept + discarded - 1 dropped, the rest moved down (a context shift)."""
        rest = torch.arange(kept + discarded, held, device=self.device)
        moved = self._moved(pool.read_positions(rest), -discarded)
        pool.write_positions(torch.arange(kept, held - discarded, device=self.device), moved)

    def _media(self, spans: list, start: int, end: int):
        """(flat indices into the positions start..end-1, embeddings) of the image positions
        computed there, or None: the reused positions' KV came from the cache."""
        index, embeds = [], []
        for span in spans:
            lo, hi = max(span.start, start), min(span.start + span.count, end)
            if lo < hi:
                rows = self.model.encode_media(span.modality, span.data, count=span.count)[lo - span.start:hi - span.start]
                index.append(torch.arange(lo - start, hi - start, device=self.device))
                embeds.append(rows)
        if not index:
            return None
        return torch.cat(index), torch.cat(embeds).to(self.model.w["embed"].dtype)

    def _forward(self, pool, tokens: list, start: int, adapter, media=None):
        T = len(tokens)
        dev = self.device
        positions = torch.arange(start, start + T, device=dev)
        fb = ForwardBatch(ids=torch.tensor([tokens], device=dev), positions=positions[None],
                          lengths=torch.tensor([T], device=dev), valid=torch.ones(1, T, dtype=torch.bool, device=dev),
                          write_slots=positions, read_slots=torch.arange(start + T, device=dev)[None],
                          rec_state=[], lora=adapter, all_valid=True,
                          media_index=None if media is None else media[0],
                          media_embeds=None if media is None else media[1])
        hidden = self.model.forward(fb, pool)
        return self.model.logits(hidden[0, -1])
