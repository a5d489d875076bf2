"""The options of `kvconform simulate --trace` that have a syntax of their own: a profile with
its settings (`vllm-apc:block_size=16,eagle=true`) and a capacity list or range (`1e4:1e9:11`,
`4096,65536,inf`, `3M`). Each is an argparse `type`, so a bad one is a usage error (one line,
exit code 2). The profile's name and settings are checked against the oracle later
(conformance/judge/traffic.py)."""
from __future__ import annotations

import argparse
import json
import math
import re

MAX_CAPACITY = 1 << 50
"""The largest finite capacity (tokens or pages): far above any pool, and small enough that
every pool size stays an exact integer."""
MAX_POINTS = 200
SUFFIX = {"k": 10 ** 3, "K": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12}
UNBOUNDED = ("inf", "none", "unbounded")


def profile_spec(text: str) -> tuple[str, dict, str]:
    """`NAME[:KEY=VALUE,...]` -> (name, settings, the spec as written). A value is JSON where it
    parses (16, true, null, 0.5, "x"), else the text itself (prefill_state_only); `none` and
    `inf` are null (unset: unbounded)."""
    name, _, rest = text.partition(":")
    name = name.strip()
    if not name:
        raise argparse.ArgumentTypeError(f"expected NAME[:KEY=VALUE,...], got {text!r}")
    settings = {}
    for part in filter(None, (p.strip() for p in rest.split(","))) if rest else ():
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE, got {part!r}")
        key = key.strip()
        if key in settings:
            raise argparse.ArgumentTypeError(f"{text!r}: {key} is given twice")
        settings[key] = _value(value.strip())
    return name, settings, text


def _value(text: str):
    if text.lower() in UNBOUNDED:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def capacities(text: str) -> list:
    """A comma-separated list of capacities, each a count (`4096`, `1e6`, `3M`), `inf`, or a range
    `LOW:HIGH:N` of N counts spaced evenly on a log scale from LOW to HIGH (both included,
    rounded to integers). Returns the distinct values in increasing order, unbounded (None)
    last."""
    values: set = set()
    for item in (p.strip() for p in text.split(",")):
        if not item:
            raise argparse.ArgumentTypeError(f"{text!r}: an empty item")
        if item.lower() in UNBOUNDED:
            values.add(None)
        elif ":" in item:
            values.update(_range(item))
        else:
            values.add(_count(item))
    if len(values) > MAX_POINTS:
        raise argparse.ArgumentTypeError(f"{len(values)} capacities: at most {MAX_POINTS}")
    return sorted(v for v in values if v is not None) + ([None] if None in values else [])


def _count(item: str) -> int:
    m = re.fullmatch(r"([0-9.eE+]+)([kKMGT]?)", item)
    try:
        value = float(m.group(1)) * SUFFIX.get(m.group(2), 1) if m else math.nan
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value == int(value) and 0 <= value <= MAX_CAPACITY):
        raise argparse.ArgumentTypeError(f"{item!r} is not a capacity: an integer 0..{MAX_CAPACITY} (4096, 1e6, 3M) "
                                         "or inf")
    return int(value)


def _range(item: str) -> list[int]:
    parts = item.split(":")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"{item!r}: a range is LOW:HIGH:N")
    low, high = _count(parts[0]), _count(parts[1])
    try:
        n = int(parts[2])
    except ValueError:
        n = 0
    if not 2 <= n <= MAX_POINTS or not 0 < low < high:
        raise argparse.ArgumentTypeError(f"{item!r}: a range needs 0 < LOW < HIGH and 2 <= N <= {MAX_POINTS}")
    step = (math.log(high) - math.log(low)) / (n - 1)
    return [low] + [round(math.exp(math.log(low) + i * step)) for i in range(1, n - 1)] + [high]
