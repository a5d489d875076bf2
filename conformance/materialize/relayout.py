"""Laying a request out at another page size, keeping its page structure.

A case is written for its own engine; on an engine with another page size P1 it must still hold
the same page structure: the same number of pages, inputs that end at the same distance from a
boundary (k*P - 1, k*P, k*P + 1 stay k*P - 1, k*P, k*P + 1), media items that straddle the same
boundaries, and prefixes shared exactly as far as they were.

Larger pages (stretch): each page of P0 positions gets P1 - P0 filler positions at one point.
Where is decided from the request's own prefix only, never from what follows (a request that
stops there and one that goes on must stay equal up to that point, or a hybrid checkpoint at the
shorter one's end would no longer match the longer one): the first point from the middle of the
page (offset ceil(P0/2)) on where text can take it, i.e. after a text character, before one, or
inside a media item, which then grows. A full page without such a point cannot be stretched. A
partial last page that ends before its point gets no filler: k*P0 + 1 positions become
k*P1 + 1, k*P0 + P0 - 1 become k*P1 + P1 - 1. The filler is a function of its source position
only, so requests equal up to a point get equal filler there, and requests that differed still
differ (no source position is removed or changed).

Smaller pages (shrink): the middle P0 - P1 positions of each page (from offset ceil(P1/2) on)
are removed; they must be text (or placeholders of an item that keeps others). Requests that
differed only there would become equal, which the caller's structure check refuses.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .layout import Atom

FILLER = "abcdefghijklmnopqrstuvwxyz"


class CannotRelayout(Exception):
    """The request's page structure cannot be kept at the target page size."""


@dataclass
class Edits:
    """Edits of one request: text edits {(message, item): [(byte offset, bytes removed, inserted
    text)]} and media resizing {(message, item): placeholder delta}."""
    texts: dict = field(default_factory=dict)
    media: dict = field(default_factory=dict)

    def text(self, atom: Atom, offset: int, remove: int = 0, insert: str = "") -> None:
        self.texts.setdefault((atom.message, atom.item), []).append((offset, remove, insert))

    def resize(self, atom: Atom, delta: int) -> None:
        key = (atom.message, atom.item)
        self.media[key] = self.media.get(key, 0) + delta


def filler(position: int, size: int) -> str:
    """`size` letters for the insertion point at source position `position`."""
    return "".join(FILLER[(position * 7 + k) % len(FILLER)] for k in range(size))


def relayout(atoms: list[Atom], p0: int, p1: int) -> Edits:
    """The edits that turn pages of `p0` positions into pages of `p1`."""
    known = next((i for i, a in enumerate(atoms) if a.kind == "opaque"), len(atoms))
    widened = any(a.width != 1 for a in atoms[:known])
    if p1 > p0 or (p1 == p0 and widened):
        return _stretch(atoms, known, p0, p1)
    if p1 < p0:
        return _shrink(atoms, known, p0, p1)
    return Edits()


def _stretch(atoms: list[Atom], known: int, p0: int, p1: int) -> Edits:
    """Each page gets P1 - P0 filler positions, less what its atoms already take beyond one
    position each on the target engine (`Atom.width`), so that it still ends on a boundary."""
    out = Edits()
    middle = (p0 + 1) // 2
    for start in range(0, known, p0):
        end = min(start + p0, known)
        extra = p1 - p0 - sum(a.width - 1 for a in atoms[start:end])
        if extra < 0:
            raise CannotRelayout(f"page {start // p0} (positions {start}-{end - 1}) takes {p1 - extra} tokens on "
                                 f"this engine, more than its {p1}")
        if extra and not _insert(atoms, start, end, middle, extra, out) and end - start == p0:
            raise CannotRelayout(f"page {start // p0} (positions {start}-{end - 1}) has no text or media item "
                                 f"to stretch from {p0} to {p1} positions")
    return out


def _insert(atoms: list[Atom], start: int, end: int, middle: int, extra: int, out: Edits) -> bool:
    """Put the page's filler at its first usable point from `middle` on; False if it has none."""
    for j in range(start + middle, end + 1):
        prev = atoms[j - 1]
        following = atoms[j] if j < len(atoms) and atoms[j].kind != "opaque" else None
        if prev.kind == "text" and prev.boundary_after:
            out.text(prev, prev.offset + 1, insert=filler(j, extra))
        elif following is not None and following.kind == "text" and following.boundary_before:
            out.text(following, following.offset, insert=filler(j, extra))
        elif following is not None and prev.same_item(following):
            out.resize(prev, extra)
        else:
            continue
        return True
    return False


def _shrink(atoms: list[Atom], known: int, p0: int, p1: int) -> Edits:
    out = Edits()
    keep = (p1 + 1) // 2
    removed_of: dict = {}
    for start in range(0, known, p0):
        lo, hi = start + keep, min(start + keep + (p0 - p1), known)
        if lo >= hi:
            continue
        window = atoms[lo:hi]
        first, last = window[0], window[-1]
        if any(a.kind not in ("text", "media") for a in window) or \
                (first.kind == "text" and not first.boundary_before) or (last.kind == "text" and not last.boundary_after):
            raise CannotRelayout(f"page {start // p0}: positions {lo}-{hi - 1} are not all text or media, so the "
                                 f"page cannot shrink from {p0} to {p1} positions")
        for a in window:
            if a.kind == "text":
                out.text(a, a.offset, remove=1)
            else:
                out.resize(a, -1)
                key = (a.message, a.item)
                removed_of[key] = removed_of.get(key, 0) + 1
                if removed_of[key] >= a.count:
                    raise CannotRelayout(f"page {start // p0}: a media item would lose all its placeholders")
    return out


def apply_texts(request: dict, texts: dict) -> None:
    """Apply text edits to the request, in place ({(message, item): [(offset, removed, inserted)]})."""
    for (m, k), edits in texts.items():
        message = request["messages"][m]
        data = (message["content"] if k is None else message["content"][k]["text"]).encode("utf-8")
        for offset, remove, insert in sorted(edits, reverse=True):
            data = data[:offset] + insert.encode("utf-8") + data[offset + remove:]
        if k is None:
            message["content"] = data.decode("utf-8")
        else:
            message["content"][k]["text"] = data.decode("utf-8")
