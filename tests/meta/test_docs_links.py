"""Every relative link in README.md and docs/ points at a file of the tree, and every `#anchor`
at a heading of its page: the manual moves pages about, and a dead link is a lost fact."""
import re
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)\)|\!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


@lru_cache(maxsize=None)
def anchors(page: Path) -> frozenset[str]:
    """GitHub's anchors for the page's headings (lower case, punctuation dropped, spaces to
    hyphens, a repeated heading numbered)."""
    seen, out = {}, set()
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        if m := re.match(r"^#{1,6}\s+(.*\S)\s*$", line):
            slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return frozenset(out)


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def dead_links(page: Path, root: Path = ROOT) -> list[str]:
    out = []
    for m in LINK.finditer(FENCE.sub("", page.read_text(encoding="utf-8"))):
        target = m.group(1) or m.group(2)
        if re.match(r"^[a-z]+:", target):
            continue                                  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists():
            out.append(f"{page.relative_to(root)}: {target}: no such file")
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            out.append(f"{page.relative_to(root)}: {target}: no such heading")
    return out


def test_every_link_of_the_manual_leads_somewhere():
    dead = [d for page in pages() for d in dead_links(page)]
    assert dead == [], "\n".join(dead)


def test_a_dead_link_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A page\n\n[ok](#a-page) [gone](missing.md) [no heading](#elsewhere)\n"
                    "```\n[inside a code block](not-a-link.md)\n```\n")
    assert [d.split(": ", 1)[1] for d in dead_links(page, tmp_path)] == [
        "missing.md: no such file", "#elsewhere: no such heading"]
