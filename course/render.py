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

    python -m course.render           # write steps/ (never over a learner's edits)
    python -m course.render --check   # exit 1 if steps/ is not what solutions/ renders
    python -m course.render --out DIR # render into another folder

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

from course.outline import SOLUTIONS, STEPS

STUB_OPEN = re.compile(r"^(?P<indent>\s*)# ANCHOR: (?P<name>[\w-]+) \| stub: (?P<stub>.*)$")
ANCHOR_LINE = re.compile(r"^\s*# ANCHOR(_END)?: [\w-]+")
MANIFEST = ".stubs.json"
BANNER = (
    "# Your file for step {number}: fill in its TODOs, then run `{check}`.\n"
    "# (Rendered from solutions/{name} by `python -m course.render`.)\n"
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


def render_all(out_dir: Path = STEPS, *, force: bool = False) -> list[str]:
    """Writes every stub into ``out_dir``; returns the files it had to leave alone."""
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest_path = out_dir / MANIFEST
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    kept: list[str] = []
    for solution in sorted(SOLUTIONS.glob("step_*.py")):
        text = render_text(solution.read_text(), solution.name)
        target = out_dir / solution.name
        if target.exists() and not force:
            current = _digest(target.read_text())
            if current != manifest.get(solution.name) and target.read_text() != text:
                kept.append(solution.name)
                continue
        target.write_text(text)
        manifest[solution.name] = _digest(text)
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return kept


def stale(steps_dir: Path = STEPS) -> list[str]:
    """The step files that differ from what the solutions render, with the reason."""
    problems = []
    for solution in sorted(SOLUTIONS.glob("step_*.py")):
        target = steps_dir / solution.name
        if not target.exists():
            problems.append(f"steps/{solution.name} is missing")
        elif target.read_text() != render_text(solution.read_text(), solution.name):
            problems.append(f"steps/{solution.name} differs from its rendering")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.render", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only report stale stubs; exit 1 if any")
    parser.add_argument("--out", type=Path, default=STEPS, help="folder to render into (default: steps/)")
    parser.add_argument("--force", action="store_true", help="overwrite stubs a learner has edited")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale(args.out)
        for problem in problems:
            print(problem)
        if problems:
            print("Run `python -m course.render` to refresh them (it keeps a learner's edits).")
        return 1 if problems else 0
    kept = render_all(args.out, force=args.force)
    for name in kept:
        print(f"kept {args.out.name}/{name}: it has edits of yours (use --force to replace it)")
    print(f"rendered {len(list(SOLUTIONS.glob('step_*.py'))) - len(kept)} stub(s) into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
