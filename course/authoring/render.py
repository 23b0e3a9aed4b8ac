"""Renders the learner's stubs in ``steps/`` from the finished files in ``solutions/``.

A solution marks each piece the learner writes as a named mdBook anchor whose
opening line also carries the stub that replaces it::

    # TODO 1: Create c_fc, ...
    # ANCHOR: c_fc | stub: self.c_fc = None
    self.c_fc = Linear(config.n_embd, config.inner_dim)
    # ANCHOR_END: c_fc

The stub keeps the TODO comment and puts the stub line where the block was. The
book includes the same anchors from ``solutions/``, and mdBook drops every
``ANCHOR`` line from what it shows, so one file feeds the code, the stubs and
the book.

Usage::

    python -m course.authoring.render           # write steps/ (never over a learner's edits)
    python -m course.authoring.render --check   # exit 1 if steps/ is not what solutions/ renders
    python -m course.authoring.render --out DIR # render into another folder

``steps/.stubs.json`` records the hash of each rendered stub. A file whose hash no
longer matches was edited by a learner, and ``render`` leaves it alone unless
given ``--force``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

from course.outline import SOLUTIONS, STEPS, available, step_path

STUB_OPEN = re.compile(r"^(?P<indent>\s*)# ANCHOR: (?P<name>[\w-]+) \| stub: (?P<stub>.*)$")
ANCHOR_LINE = re.compile(r"^\s*# ANCHOR(_END)?: [\w-]+")
MANIFEST = ".stubs.json"
BANNER = (
    "# Your file for step {number}: fill in its TODOs, then run `{check}`.\n"
    "# (Rendered from solutions/{name} by `python -m course.authoring.render`.)\n"
)


def render_text(source: str, name: str) -> str:
    """Returns the stub version of one solution file's text."""
    out: list[str] = []
    closing: str | None = None
    for line in source.splitlines(keepends=True):
        if closing is not None:
            if line.strip() == closing:
                closing = None
            continue
        if match := STUB_OPEN.match(line):
            out.append(f"{match['indent']}{match['stub']}\n")
            closing = f"# ANCHOR_END: {match['name']}"
        elif not ANCHOR_LINE.match(line):
            out.append(line)
    if closing is not None:
        raise ValueError(f"solutions/{name}: `{closing}` never comes")
    number = re.match(r"step_(\d+)_", name)[1]
    body = "".join(out).rstrip() + "\n"
    return BANNER.format(number=number, name=name, check=f"pixi run s{number}") + body


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _rendered():
    """Each solution's file name with the stub text it renders to, in step order."""
    for solution in sorted(SOLUTIONS.glob("step_*.py")):
        yield solution.name, render_text(solution.read_text(), solution.name)


def _manifest(out_dir: Path) -> dict[str, str]:
    try:
        return json.loads((out_dir / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}  # none yet, or unreadable: treat every existing file as edited


def render_all(out_dir: Path = STEPS, *, force: bool = False) -> tuple[list[str], list[str]]:
    """Writes the stubs into ``out_dir``; returns (files written, files left alone as edited)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = _manifest(out_dir)
    written: list[str] = []
    kept: list[str] = []
    for name, text in _rendered():
        target = out_dir / name
        current = target.read_text() if target.exists() else None
        edited = current is not None and _digest(current) != manifest.get(name)
        if current != text and edited and not force:
            kept.append(name)
            continue
        if current != text:
            target.write_text(text)
            written.append(name)
        manifest[name] = _digest(text)
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return written, kept


def stale(steps_dir: Path = STEPS) -> list[str]:
    """The step files that differ from what the solutions render, with the reason."""
    problems = []
    for name, text in _rendered():
        target = steps_dir / name
        if not target.exists():
            problems.append(f"{steps_dir.name}/{name} is missing")
        elif target.read_text() != text:
            problems.append(f"{steps_dir.name}/{name} differs from its rendering")
    return problems


def compare_with_manifest(steps_dir: Path = STEPS) -> tuple[list[str], list[str]]:
    """(stale, edited) for ``steps_dir`` against its manifest (``.stubs.json``).

    stale: solutions whose rendering is not the one the manifest records (an
    instructor changed a solution and did not re-render). edited: step files that
    are not their recorded rendering any more, which is what a learner's work is.
    """
    manifest = _manifest(steps_dir)
    stale, edited = [], []
    for name, text in _rendered():
        if manifest.get(name) != _digest(text):
            stale.append(f"solutions/{name} renders a stub that {steps_dir.name}/{MANIFEST} does not record")
        target = steps_dir / name
        if not target.exists():
            edited.append(f"{steps_dir.name}/{name} is missing")
        elif _digest(target.read_text()) != manifest.get(name):
            edited.append(f"{steps_dir.name}/{name} has edits")
    return stale, edited


TODO_LINE = re.compile(r"^\s*# TODO (\d+):")


def unfinished_todos(source: str, learner: str) -> list[int]:
    """The TODOs of one solution whose stub line is still in the learner's file, just below the TODO.

    A TODO counts as done once the line after its comment block is no longer the
    stub's (``self.c_fc = None``, ``return None``, ...), whatever the learner wrote.
    """
    stubs: dict[int, str] = {}
    todo = None
    for line in source.splitlines():
        if found := TODO_LINE.match(line):
            todo = int(found[1])
        elif (match := STUB_OPEN.match(line)) and todo is not None:
            stubs[todo] = f"{match['indent']}{match['stub']}".rstrip()
            todo = None
    lines = learner.splitlines()
    left = []
    for i, line in enumerate(lines):
        found = TODO_LINE.match(line)
        if not found or int(found[1]) not in stubs:
            continue
        j = i + 1
        while j < len(lines) and lines[j].lstrip().startswith("#"):
            j += 1
        if j < len(lines) and lines[j].rstrip() == stubs[int(found[1])]:
            left.append(int(found[1]))
    return left


def unfinished(steps_dir: Path = STEPS, numbers: list[int] | None = None) -> dict[int, list[int]]:
    """{step number: its TODOs still stubbed} for the learner's files in ``steps_dir``.

    A missing file counts as wholly unfinished (its TODO list is empty then)."""
    result = {}
    for number in numbers if numbers is not None else available():
        solution = step_path(number)
        target = steps_dir / solution.name
        if not target.exists():
            result[number] = []
            continue
        left = unfinished_todos(solution.read_text(), target.read_text())
        if left:
            result[number] = left
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.authoring.render", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only report stale stubs; exit 1 if any")
    parser.add_argument("--out", type=Path, default=STEPS, help="folder to render into (default: steps/)")
    parser.add_argument("--force", action="store_true", help="overwrite stubs a learner has edited")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale(args.out)
        for problem in problems:
            print(problem)
        if problems:
            print("Run `python -m course.authoring.render` to refresh them (it keeps a learner's edits).")
        return 1 if problems else 0
    written, kept = render_all(args.out, force=args.force)
    for name in written:
        print(f"wrote {args.out.name}/{name}")
    for name in kept:
        print(f"kept {args.out.name}/{name}: it has edits of yours (use --force to replace it)")
    if not written and not kept:
        print(f"{args.out.name}/ is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
