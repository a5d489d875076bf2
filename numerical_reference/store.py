"""The result cache of the numerical reference: one SQLite file under the kit's cache folder
(`$KVCONFORM_REFERENCE_CACHE`, else `reference-v{VERSION}.sqlite` in `$KVCONFORM_CACHE`, default
`.kvconform-cache/` at the repository root: the folder the runner keeps its engines in).

A reference result is a pure function of its key (scoring.Inputs.key: the digest of the engine's
description and weights, the adapter file's digest, the input tokens and media identities, the
logit bias, the emission set and the generated tokens), so it is computed once and read back by
every later run, shard and selftest variant that asks the same question. SQLite serialises
concurrent writers (`kvconform selftest` runs two worker processes); a cache that cannot be
opened or written is skipped, never an error: the result is then simply computed.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
from pathlib import Path

_LOCAL = threading.local()
VERSION = 1      # bump when the forward or the scoring changes what a key means


def cache_root() -> Path:
    """The kit's cache folder, found as the runner finds it (conformance/adapters/engines.py)."""
    return Path(os.environ.get("KVCONFORM_CACHE") or Path(__file__).resolve().parent.parent / ".kvconform-cache")


def _db() -> sqlite3.Connection | None:
    conn = getattr(_LOCAL, "conn", None)
    pid = getattr(_LOCAL, "pid", None)
    if conn is not None and pid == os.getpid():
        return conn
    path = Path(os.environ.get("KVCONFORM_REFERENCE_CACHE") or cache_root() / f"reference-v{VERSION}.sqlite")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), timeout=30, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE IF NOT EXISTS scored (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    except (sqlite3.Error, OSError):
        conn = None
    _LOCAL.conn, _LOCAL.pid = conn, os.getpid()
    return conn


def get(key: str):
    conn = _db()
    if conn is None:
        return None
    try:
        row = conn.execute("SELECT value FROM scored WHERE key = ?", (key,)).fetchone()
    except sqlite3.Error:
        return None
    return json.loads(row[0]) if row else None


def put(key: str, value) -> None:
    conn = _db()
    if conn is None:
        return
    try:
        conn.execute("INSERT OR REPLACE INTO scored (key, value) VALUES (?, ?)", (key, json.dumps(value)))
    except sqlite3.Error:
        pass
