"""The book shows code only by including named anchors from solutions/; every include
must point at a file and an anchor that exist (mdBook would render a missing anchor
as an empty block without a word)."""

from __future__ import annotations

import re

import pytest

from course.outline import ROOT, available, step_path

pytestmark = pytest.mark.course

BOOK = ROOT / "book" / "src"
INCLUDE = re.compile(r"\{\{#include\s+([^}:\s]+)(?::([\w-]+))?\s*\}\}")
CHAPTERS = sorted(BOOK.glob("*.md"))


def test_book_has_chapters():
    """the book has an introduction and a chapter per available step"""
    names = {path.name for path in CHAPTERS}
    assert "introduction.md" in names
    for number in available():
        chapter = BOOK / step_path(number).with_suffix(".md").name
        assert chapter.name in names, f"no chapter for step {number:02d}"
        assert INCLUDE.search(chapter.read_text()), f"{chapter.name} includes no code from solutions/"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.name)
def test_includes_resolve(chapter):
    """every {{#include}} names an existing file and, if given, an anchor it defines"""
    for path, anchor in INCLUDE.findall(chapter.read_text()):
        target = (chapter.parent / path).resolve()
        assert target.is_file(), f"{chapter.name} includes {path}, which does not exist"
        if anchor:
            text = target.read_text()
            assert re.search(rf"ANCHOR: {anchor}\b", text), f"{chapter.name}: {path} has no ANCHOR {anchor}"
            assert re.search(rf"ANCHOR_END: {anchor}\b", text), f"{chapter.name}: {path} has no ANCHOR_END {anchor}"
