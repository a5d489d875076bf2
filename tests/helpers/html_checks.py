"""Checks of report.html shared by the report tests: well-formed, self-contained, its data intact.

    problems = html_problems(text)        # [] for a good page
    maps = embedded_page_maps(text)       # the JSON the page draws from
    exe = chromium()                      # Debian's chromium, or None
"""
from __future__ import annotations

import json
import os
import shutil
from html.parser import HTMLParser
from pathlib import Path

BLOCK = {"address", "article", "aside", "blockquote", "details", "div", "dl", "fieldset", "figure", "footer", "form",
         "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "main", "nav", "ol", "p", "pre", "section", "table", "ul"}
"""Elements that end an open <p> when an HTML parser meets them (the page would not be the tree it says)."""
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("KVCONFORM_TEST_ARTIFACTS") or ROOT / "test-artifacts")


class _Checker(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.ids: set[str] = set()
        self.problems: list[str] = []
        self.scripts: dict[str, str] = {}
        self._script_id = None
        self.doctype = False
        self.csp = None

    def handle_decl(self, decl):
        self.doctype = decl.lower() == "doctype html"

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            if a["id"] in self.ids:
                self.problems.append(f"duplicate id {a['id']!r}")
            self.ids.add(a["id"])
        for key in ("src", "href", "action", "data"):
            value = a.get(key) or ""
            if "://" in value or value.startswith("//"):
                self.problems.append(f"<{tag} {key}={value!r}> reaches outside the report folder")
        if tag == "link" or (tag == "script" and "src" in a):
            self.problems.append(f"<{tag}> loads an external resource")
        if tag == "meta" and (a.get("http-equiv") or "").lower() == "content-security-policy":
            self.csp = a.get("content")
        if tag == "script":
            self._script_id = a.get("id") or f"inline-{len(self.scripts)}"
            self.scripts[self._script_id] = ""
        if tag in BLOCK and self.stack and self.stack[-1] == "p":
            self.problems.append(f"<{tag}> inside <p>")
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes <{self.stack[-1] if self.stack else 'nothing'}>")
            if tag in self.stack:
                while self.stack and self.stack.pop() != tag:
                    pass
            return
        self.stack.pop()
        if tag == "script":
            self._script_id = None

    def handle_data(self, data):
        if self._script_id is not None:
            self.scripts[self._script_id] += data
        if "@import" in data or "url(http" in data:
            self.problems.append("a stylesheet reaches outside the page")


def html_problems(text: str) -> list[str]:
    """What is wrong with the page: unbalanced elements, duplicate ids, anything fetched from
    outside, no Content-Security-Policy forbidding fetches, an embedded JSON that does not parse."""
    c = _Checker()
    c.feed(text)
    c.close()
    problems = list(c.problems)
    if not c.doctype:
        problems.append("no <!doctype html>")
    if c.stack:
        problems.append(f"unclosed elements: {c.stack}")
    if not c.csp or "default-src 'none'" not in c.csp:
        problems.append(f"no Content-Security-Policy with default-src 'none': {c.csp!r}")
    try:
        json.loads(c.scripts.get("kv-pagemaps", ""))
    except ValueError as e:
        problems.append(f"the embedded page maps are not JSON: {e}")
    return problems


def embedded_page_maps(text: str) -> dict:
    c = _Checker()
    c.feed(text)
    return json.loads(c.scripts["kv-pagemaps"])


def chromium() -> str | None:
    """Debian's chromium (`apt-get install chromium`; .ci/run installs it), if present."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None
