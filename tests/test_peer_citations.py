"""Every statement about a peer in the README and docs/ says where the peer says so (issue 27,
point 7): each paragraph, list item or table row that names Dapr, Orleans, Temporal, APScheduler,
Quartz, Volcano or Celery carries a web link (a doc page, a file in the peer's repository, a
release note). A heading counts with the paragraph under it.

What this cannot check is that the link still says what the sentence says: that was checked by
hand against what each peer ships (the links to repositories name the commit read). It does stop a
new claim from landing without any source, as "Dapr's default failure policy is drop" once did.
The benchmark table between the results markers is generated; ``tests/test_benchmark_parts.py``
checks that every published figure in it links to its source.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PEER = re.compile(r"\b(Dapr|Orleans|Temporal|APScheduler|Quartz|Volcano|Celery)\b")
WEB_LINK = re.compile(r"\]\(https?://[^)\s]+\)")
LINK_TARGET = re.compile(r"\]\([^)]*\)")  # a peer's name in a URL or an anchor is not a statement
GENERATED = ("<!-- results:start -->", "<!-- results:end -->")
STARTS_ITEM = re.compile(r"^\s*(?:[-*]|\d+\.)\s")


def units(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each paragraph, list item and table row outside code blocks
    and the generated table; a heading is joined to the paragraph under it."""
    out: list[tuple[int, str]] = []
    current: list[str] = []
    start = 0
    fenced = generated = False

    def close() -> None:
        nonlocal current
        if current:
            out.append((start, "\n".join(current)))
        current = []

    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
            close()
            continue
        if stripped in GENERATED:
            generated = stripped == GENERATED[0]
            close()
            continue
        if fenced or generated:
            continue
        heading_above = len(current) == 1 and current[0].lstrip().startswith("#")
        if not stripped:
            if not heading_above:
                close()
            continue
        if (stripped.startswith("|") or STARTS_ITEM.match(line) or stripped.startswith("#")) and not heading_above:
            close()
        if not current:
            start = number
        current.append(line)
        if stripped.startswith("|"):
            close()
    close()
    return out


def mentions(page: Path) -> list[tuple[int, str]]:
    return [(n, u) for n, u in units(page.read_text()) if PEER.search(LINK_TARGET.sub("]", u))]


def test_the_pages_name_peers_and_the_check_sees_them() -> None:
    # Guards the parser: a check that found no mention would pass on anything.
    found = {page.name: len(mentions(page)) for page in PAGES}
    assert found["reference.md"] >= 8 and found["operations.md"] >= 2 and found["README.md"] >= 1, found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_statement_about_a_peer_links_to_its_source(page: Path) -> None:
    uncited = [f"{page.name}:{n}: {u.strip()[:160]}" for n, u in mentions(page) if not WEB_LINK.search(u)]
    assert not uncited, "a peer is named without a link to where the peer says so:\n" + "\n".join(uncited)


def test_a_paragraph_without_a_link_is_caught() -> None:
    text = "# Comparison\n\nLike Dapr, jobs retry.\n\n| policy | peer |\n|---|---|\n| drop | Dapr `drop` |\n"
    assert [n for n, u in units(text) if PEER.search(u) and not WEB_LINK.search(u)] == [1, 7]
    cited = "# Comparison\n\nLike [Dapr](https://docs.dapr.io/), jobs retry.\n\n```python\n# Dapr\n```\n"
    assert [n for n, u in units(cited) if PEER.search(LINK_TARGET.sub("]", u)) and not WEB_LINK.search(u)] == []
