"""Reading a trace file (spec/trace-replay.md section 1): hash-id JSONL (Mooncake's format),
chat-log JSONL, or a request file of the kit. Every entry is checked here, before anything is
replayed; a bad one is one KvconformError naming the file and the line (`trace.jsonl: line 17:
hash_ids: ...`), which the command turns into one line on stderr and exit code 2.

Nothing here tokenizes: a chat-log entry keeps its messages and a request file its JSON
document, for conformance/judge/traffic.py, which owns the tokenizers.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from .. import KvconformError
from ..judge.traffic import MAX_TOKENS

HASH_IDS, CHAT, REQUESTS = "hash-ids", "chat", "requests"
FORMATS = (HASH_IDS, CHAT, REQUESTS)
MAX_BLOCK_SIZE = 1 << 20


@dataclass
class Entry:
    """One request of a trace, checked: where it is (`source`: "line 17"), its timestamp (None
    when the trace has none), the tokens it samples (`output`, None: the format's default), and
    its prompt: `hash_ids` with `n` (hash-id traces) or `messages` (chat logs)."""
    source: str
    timestamp: float | None
    output: int | None
    n: int = 0
    hash_ids: list | None = None
    messages: list | None = None
    line: int = 0


@dataclass
class Trace:
    """A trace file read: its format, its entries in file order (hash-id and chat traces) or its
    request document (request files), and the block size of its hash ids."""
    file: str
    format: str
    block_size: int
    entries: list = field(default_factory=list)
    document: dict | None = None


def read_trace(file: str, fmt: str | None = None, block_size: int = 512) -> Trace:
    """Read and check `file`, line by line; `fmt` forces a format (else told from the content)."""
    fmt = fmt or detect(file)
    if fmt == REQUESTS:
        try:
            with open(file, "rb") as f:
                doc = json.loads(f.read().decode("utf-8"))
        except OSError as e:
            raise KvconformError(f"cannot read: {e.strerror}", file) from None
        except (ValueError, RecursionError) as e:
            raise KvconformError(f"not a JSON request file: {e}", file) from None
        if not isinstance(doc, dict) or "requests" not in doc:
            raise KvconformError("a request file is a JSON object with 'requests'", file, "$")
        return Trace(file, REQUESTS, block_size, document=doc)
    trace = Trace(file, fmt, block_size)
    read_line = _hash_ids_line if fmt == HASH_IDS else _chat_line
    stamped = None
    for number, line in _lines(file):
        where = f"line {number}"
        entry = read_line(_object(line, file, where), file, where, block_size)
        entry.line = number
        if stamped is None:
            stamped = entry.timestamp is not None, number
        elif (entry.timestamp is not None) != stamped[0]:
            has = "has" if stamped[0] else "has no"
            raise KvconformError(f"timestamp {'missing' if stamped[0] else 'given'}, but line {stamped[1]} {has} one "
                                 "(a trace gives every line a timestamp or none)", file, where)
        trace.entries.append(entry)
    if not trace.entries:
        raise KvconformError("the trace holds no request", file)
    return trace


def _lines(file: str):
    """(line number, text) of each non-blank line, read one at a time."""
    try:
        with open(file, "rb") as f:
            for number, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise KvconformError(f"not UTF-8 text (byte {e.start} of the line)", file, f"line {number}") from None
                if line.strip():
                    yield number, line
    except OSError as e:
        raise KvconformError(f"cannot read: {e.strerror}", file) from None


def detect(file: str) -> str:
    """The format of a trace from its first non-blank line: an object with `hash_ids` (hash-id
    trace), with `messages` or a `body` holding them (chat log); a file that is one JSON object
    with `requests` is a request file."""
    first = next(_lines(file), None)
    if first is None:
        raise KvconformError("the trace is empty", file)
    number, line = first
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        obj = None
    if isinstance(obj, dict) and "hash_ids" in obj:
        return HASH_IDS
    if isinstance(obj, dict) and ("messages" in obj or isinstance(obj.get("body"), dict)):
        return CHAT
    if isinstance(obj, dict) and "requests" in obj or (obj is None and line.lstrip().startswith("{")
                                                        and _is_request_file(file)):
        return REQUESTS
    raise KvconformError("not a trace: the first line is no object with 'hash_ids' (a hash-id trace) or "
                         "'messages' (a chat log), and the file is no request file (an object with 'requests'); "
                         "--trace-format names the format", file, f"line {number}")


def _is_request_file(file: str) -> bool:
    """Whether the whole file is one JSON object with `requests` (a request file written over
    several lines, whose first line alone is no JSON)."""
    try:
        with open(file, "rb") as f:
            doc = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and "requests" in doc


def _object(line: str, file: str, where: str) -> dict:
    try:
        obj = json.loads(line)
    except ValueError as e:
        raise KvconformError(f"not JSON: {e}", file, where) from None
    except RecursionError:
        raise KvconformError("not JSON: nested too deeply", file, where) from None
    if not isinstance(obj, dict):
        raise KvconformError(f"expected a JSON object, got {type(obj).__name__}", file, where)
    return obj


def _count(obj: dict, key: str, file: str, where: str, low: int = 1, required: bool = True):
    if key not in obj:
        if required:
            raise KvconformError(f"missing {key!r}", file, where)
        return None
    value = obj[key]
    if type(value) is not int or not low <= value <= MAX_TOKENS:
        raise KvconformError(f"{key} must be an integer in {low}..{MAX_TOKENS}, got {_show(value)}", file, where)
    return value


def _timestamp(obj: dict, file: str, where: str) -> float | None:
    value = obj.get("timestamp")
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value):
        raise KvconformError(f"timestamp must be a finite number, got {_show(value)}", file, where)
    return value


def _hash_ids_line(obj: dict, file: str, where: str, block_size: int) -> Entry:
    """{"timestamp", "input_length", "output_length", "hash_ids"} (spec/trace-replay.md section 1)."""
    n = _count(obj, "input_length", file, where)
    output = _count(obj, "output_length", file, where, low=0, required=False)
    ids = obj.get("hash_ids")
    if ids is None:
        raise KvconformError("missing 'hash_ids'", file, where)
    if not isinstance(ids, list) or not all(type(h) is int and h >= 0 for h in ids):
        bad = next((h for h in ids if not (type(h) is int and h >= 0)), None) if isinstance(ids, list) else ids
        raise KvconformError(f"hash_ids must be a list of integers >= 0, holds {_show(bad)}", file, where)
    blocks = -(-n // block_size)
    if len(ids) != blocks:
        raise KvconformError(f"hash_ids: {len(ids)} ids for input_length {n}, expected ceil({n} / {block_size}) = "
                             f"{blocks} (--block-size {block_size})", file, where)
    return Entry(where, _timestamp(obj, file, where), max(output, 1) if output is not None else None, n=n,
                 hash_ids=ids)


def _chat_line(obj: dict, file: str, where: str, block_size: int) -> Entry:
    """{"messages": [...], "timestamp", "output_length" | "max_tokens" | "max_completion_tokens"},
    or an OpenAI batch line whose `body` holds them."""
    body = obj["body"] if "messages" not in obj and isinstance(obj.get("body"), dict) else obj
    if "messages" not in body:
        raise KvconformError("missing 'messages'", file, where)
    if not isinstance(body["messages"], list) or not body["messages"]:
        raise KvconformError("messages must be a non-empty list", file, where)
    output = None
    for key in ("output_length", "max_tokens", "max_completion_tokens"):
        output = _count(body, key, file, where, required=False)
        if output is not None:
            break
    return Entry(where, _timestamp(obj, file, where) if "timestamp" in obj else _timestamp(body, file, where),
                 output, messages=body["messages"])


def _show(value) -> str:
    text = json.dumps(value) if not isinstance(value, (str, bytes)) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
