"""Prompt ids of a chat request: the kit's own tokenization, checked against the server's (PEER-TOK-1).

With `--tokenizer DIR` the kit renders the model's chat template and tokenizes it itself
(reference/hf_tokenizer.py) under the loader the profile's runtime uses: llama.cpp reads the
tokenizer file as written (`tokenizers-raw`), vLLM and SGLang through transformers
(`transformers-auto`), spec/hf-tokenizer.md TOK-HF-2. Where the server offers its own rendering
and tokenization (llama.cpp `/apply-template` + `/tokenize`, vLLM `/tokenize` with messages),
every prompt is compared with it id for id before any count is judged. Without `--tokenizer`
the server's own ids are used, and the report says that nothing cross-checked them.

A prompt with images (images.py) is tokenized by the kit only: each image's token repeated as
many times as the model's image processor gives it (`preprocessor_config.json` of the
`--tokenizer` folder), and `images_of` says where each image lies and what it is, for the oracle.
"""
from __future__ import annotations

import json

from ..adapters.openai import NotOffered, OpenAIClient, ServerFailure
from .. import KvconformError
from . import PEER_PROFILES
from .images import ImagePlan, Vision, image_urls, kit_messages, read_vision


class TokenMismatch(Exception):
    """The kit and the server tokenize a prompt differently: no count of it can be judged."""


class TokenSource:
    def __init__(self, client: OpenAIClient, profile: str, tokenizer: str | None):
        self.client, self.profile = client, profile
        self.crosscheck = PEER_PROFILES[profile].crosscheck
        self.kit = None
        self.given = tokenizer       # as the user wrote it: a report run with a relative path names no machine's path
        if tokenizer is not None:
            from ..judge.oracle import load_hf_tokenizer
            try:
                self.kit = load_hf_tokenizer(tokenizer, PEER_PROFILES[profile].tokenizer_loader)
            except (OSError, ValueError) as e:
                raise KvconformError(f"--tokenizer: {e}", tokenizer) from None
            if self.kit.chat_template is None:
                raise KvconformError("--tokenizer: the folder has no chat template", tokenizer)
            _preflight(self.kit, tokenizer)
        self.vision: Vision | None = read_vision(tokenizer)
        """What the model folder says about images (None: a text model, or no folder given)."""
        self.offered = self.crosscheck is not None
        self._server: dict = {}
        self._kit: dict = {}

    def describe(self) -> dict:
        return {"kit_tokenizer": None if self.kit is None else self.given,
                "loader": None if self.kit is None else self.kit.loader,
                "server_crosscheck": self.crosscheck if self.offered else None}

    def usable(self) -> str | None:
        """Why no prompt can be tokenized (no kit tokenizer, no server endpoint), or None."""
        if self.kit is None and not self.offered:
            return (f"the {self.profile} profile's server offers no tokenization endpoint, so the kit needs the "
                    "model's tokenizer: pass --tokenizer DIR (tokenizer.json + tokenizer_config.json)")
        return None

    def image_problem(self) -> str | None:
        """Why image prompts cannot be laid out and judged here, or None when they can."""
        if self.kit is None:
            return ("image cases need the model's folder as --tokenizer (its tokenizer and its image processor, "
                    "preprocessor_config.json): the kit lays every image out itself")
        if self.vision is None:
            return "the --tokenizer folder has no preprocessor_config.json: the model takes no images"
        if self.vision.problem is not None:
            return self.vision.problem
        if self.kit.image_token_id is None:
            return "the tokenizer has no single image token (<|image_pad|> or <|image|>) to lay images out with"
        return None

    def image_plan(self) -> ImagePlan:
        problem = self.image_problem()
        return ImagePlan(None if problem is not None else self.kit.image_token_id, problem)

    def kit_ids(self, messages: list) -> list:
        key = json.dumps(messages, sort_keys=True)
        if key not in self._kit:
            urls = image_urls(messages)
            try:
                if urls:
                    problem = self.image_problem()
                    if problem is not None:
                        raise ValueError(problem)
                    ids = self.kit.chat_ids(kit_messages(messages), add_generation_prompt=True)
                    ids = self.kit.expand_images(ids, [self.vision.count(u) for u in urls])
                else:
                    ids = self.kit.chat_ids(messages, add_generation_prompt=True)
                self._kit[key] = list(ids)
            except ValueError as e:          # the template refuses this conversation, or exceeds a bound
                raise KvconformError(f"--tokenizer: {e}", self.kit.folder) from None
        return self._kit[key]

    def images_of(self, messages: list, ids: list) -> list:
        """(digest, start, length) of each image of the prompt: the k-th run of the image token
        is the k-th image (TOK-HF-7)."""
        urls = image_urls(messages)
        out, at = [], 0
        for url in urls:
            length = self.vision.count(url)
            at = ids.index(self.kit.image_token_id, at)
            out.append((self.vision.digest(url), at, length))
            at += length
        return out

    def server_ids(self, messages: list) -> list | None:
        """The server's ids of the prompt; None when it does not offer them (remembered)."""
        if not self.offered:
            return None
        key = json.dumps(messages, sort_keys=True)
        if key not in self._server:
            try:
                if self.crosscheck == "apply-template":
                    ids = self.client.tokenize(self.client.apply_template(messages))
                else:
                    ids = self.client.tokenize_messages(messages)
            except NotOffered:
                self.offered = False
                return None
            self._server[key] = ids
        return self._server[key]

    def ids(self, messages: list) -> list:
        """The ids the oracle predicts on. Raises TokenMismatch (PEER-TOK-1) or ServerFailure."""
        server = self.server_ids(messages)
        if self.kit is None:
            if server is None:
                raise ServerFailure("http", "the server stopped offering its tokenization endpoint")
            return server
        mine = self.kit_ids(messages)
        if server is not None and server != mine:
            at = next((i for i, (a, b) in enumerate(zip(mine, server)) if a != b), min(len(mine), len(server)))
            raise TokenMismatch(f"the server's own tokenization differs from the kit's at position {at}: "
                                f"kit {mine[at:at + 5]} ({len(mine)} ids), server {server[at:at + 5]} "
                                f"({len(server)} ids)")
        return mine

    def layout_ids(self, messages: list) -> list:
        """Ids for laying cases out: the kit's own where it has a tokenizer (the server's are
        compared with them when the case runs, PEER-TOK-1), else the server's."""
        if self.kit is not None:
            return self.kit_ids(messages)
        return self.ids(messages)


def _preflight(kit, folder: str) -> None:
    """The chat template is untrusted code: it must compile and render a one-message
    conversation within the bounds of reference/bounded_template.py before any request is sent."""
    try:
        kit.chat_ids([{"role": "user", "content": "hello"}], add_generation_prompt=True)
    except ValueError as e:
        raise KvconformError(f"--tokenizer: {e}", folder) from None
