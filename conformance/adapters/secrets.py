"""Secrets the kit knows never leave it: masked in everything it writes or prints.

The kit learns a secret when it reads one (the API key of `--api-key-env`, a password in
`--base-url`) and registers it here. From then on every file the report folder gets
(report.json, junit.xml, summary.md, transcripts, through `conformance/report/folder.py`) and
everything printed on stdout and stderr has each registered value replaced by `***` (a server
that echoes the key in an error body, as misconfigured gateways do, leaks nothing). URLs are
shown and stored without their credentials (`display_url`).

    register(value)          mask(text) -> str          display_url(url) -> str
"""
from __future__ import annotations

import json
import sys
import threading
from urllib.parse import urlsplit, urlunsplit

MASK = "***"
_SECRETS: set[str] = set()
_LOCK = threading.Lock()


def register(value: str | None) -> None:
    """Mask `value` from now on (and the streams of this process with it)."""
    if not value:
        return
    with _LOCK:
        _SECRETS.add(value)
        escaped = json.dumps(value)[1:-1]          # as it appears inside a JSON string
        if escaped != value:
            _SECRETS.add(escaped)
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if not isinstance(stream, _Masking):
                setattr(sys, name, _Masking(stream))


def mask(text: str) -> str:
    if not _SECRETS or not isinstance(text, str):
        return text
    for secret in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def display_url(url: str | None) -> str | None:
    """`url` without `user:password@` (the password registered as a secret): how the kit prints
    and stores a URL. The client keeps the original to authenticate."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return mask(url)
    if parts.username is None and parts.password is None:
        return url
    register(parts.password)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class _Masking:
    """A text stream that masks the registered secrets in what is written to it."""

    def __init__(self, inner):
        self._inner = inner

    def write(self, text):
        return self._inner.write(mask(text))

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._inner, name)
