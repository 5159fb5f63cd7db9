"""Every relative link of README.md and docs/*.md reaches a file of the repository, and
every ``#anchor`` a heading of its document (GitHub's rule: the heading lowercased, its
punctuation dropped, spaces turned into hyphens)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCED = re.compile(r"^```.*?^```", re.S | re.M)
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(doc: Path) -> set:
    return {slug(h) for h in HEADING.findall(FENCED.sub("", doc.read_text(encoding="utf-8")))}


def links(doc: Path) -> list:
    return [m.group(1) for m in LINK.finditer(FENCED.sub("", doc.read_text(encoding="utf-8")))
            if not m.group(1).startswith(("http://", "https://", "mailto:"))]


def test_slug_follows_github():
    assert slug("Importances at 1e7 rows: memory per phase") == "importances-at-1e7-rows-memory-per-phase"
    assert slug("Bands: bootstrap trials (`n_trials`)") == "bands-bootstrap-trials-n_trials"


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_every_relative_link_and_anchor_exists(doc):
    broken = []
    for target in links(doc):
        path, _, frag = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif frag and dest.suffix == ".md" and frag not in anchors(dest):
            broken.append(f"{target}: no heading #{frag} in {dest.name}")
    assert not broken, f"{doc.name}: " + "; ".join(broken)
