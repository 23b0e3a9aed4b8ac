"""Each chapter's experiment: a small script whose real output is printed on the page.

A chapter shows its script with an include and, below it, what the script prints,
under a marker line that names the script::

    {{#include ../experiments/step_08_residual.py}}

    <!-- experiment-output: ../experiments/step_08_residual.py -->
    ```text
    ... the output of that script, as it really prints ...
    ```

The marker is an HTML comment, so the reader never sees it. This module finds the
markers, runs the scripts and compares what they print with the blocks:

    python -m course.authoring.experiments            # check every page; exit 1 with a diff on drift
    python -m course.authoring.experiments --write    # rewrite the blocks from real runs (instructors)
    python -m course.authoring.experiments 08         # only the scripts whose name contains "08"

``--write`` also adds the block after a marker that has none yet, so a new
experiment needs only the script, the include and the marker line.

The same module keeps the pages' **check outputs** true: what `pixi run sNN` prints
on an untouched stub and on a finished step. A second kind of marker names the step
and which of the two runs the block below it shows::

    <!-- check-output: 5 stub -->
    <!-- check-output: 5 solution -->

The test suite compares these blocks with the runs it makes anyway
(tests/test_course.py runs every stub's check and the check of copied solutions), after
:func:`normalize_check` has replaced timings, ``max |Δ|`` values and the scratch folder's
path. So the pages show real numbers from the last refresh, and a check whose wording
changes fails the suite until the pages follow:

    python -m course.authoring.experiments --check-outputs            # run both checks per step, compare
    python -m course.authoring.experiments --check-outputs --write    # and rewrite the blocks (instructors)

Every script runs in this one process, one after another, through :mod:`runpy`:
the working directory is the repository root, ``solutions/`` is on ``sys.path``
(so ``from step_07_attention import CausalSelfAttention`` is the finished code)
and :func:`course.runtime.setup` has run (fast eager MAX ops, CPU, float32).
A script must print the same text on every run: seed every random number (see
:func:`course.weights.init_like_gpt2`) and round what you print. Keep it to a few seconds: each
eager MAX op costs 5-50 ms, and an op family the course does not already use
costs 20-60 s to compile the first time.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import os
import re
import runpy
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from course.outline import ROOT, SOLUTIONS

BOOK = ROOT / "book" / "src"
EXPERIMENTS = ROOT / "book" / "experiments"

#: The marker line before an output block: ``<!-- experiment-output: ../experiments/x.py -->``.
MARKER = re.compile(r"^<!--\s*experiment-output:\s*(\S+)\s*-->\s*$")
#: The marker line before a check's output: ``<!-- check-output: 5 stub -->`` (or ``solution``).
CHECK_MARKER = re.compile(r"^<!--\s*check-output:\s*(\d+)\s+(stub|solution)\s*-->\s*$")
FENCE = "```"


@dataclass
class Experiment:
    """One marker on one page: the script it names and the output block under it."""

    chapter: Path
    script: Path
    marker_line: int  # index of the marker line in the chapter
    block: tuple[int, int] | None  # [start, end) of the block's lines, fences included; None if missing
    recorded: str  # the text between the fences ("" when there is no block)

    @property
    def name(self) -> str:
        return f"{self.chapter.name} ← {self.script.relative_to(ROOT)}"


@dataclass
class CheckOutput:
    """One check-output marker: step ``number``'s check on its ``stub`` or its ``solution``."""

    chapter: Path
    number: int
    kind: str  # "stub" or "solution"
    marker_line: int
    block: tuple[int, int] | None
    recorded: str

    @property
    def name(self) -> str:
        return f"{self.chapter.name} ← pixi run s{self.number:02d} on the {self.kind}"


def _block_under(chapter: Path, lines: list[str], i: int) -> tuple[tuple[int, int] | None, str]:
    """The fenced block right under line i (blank lines allowed between), or (None, "")."""
    j = i + 1
    while j < len(lines) and not lines[j].strip():
        j += 1
    if j < len(lines) and lines[j].strip().startswith(FENCE):
        end = next((k for k in range(j + 1, len(lines)) if lines[k].strip() == FENCE), None)
        if end is None:
            raise ValueError(f"{chapter.name}:{j + 1}: the output block under the marker never closes")
        return (j, end + 1), "\n".join(lines[j + 1 : end])
    return None, ""


def _marked(pattern: re.Pattern, chapters: list[Path] | None):
    """(chapter, marker line index, match, block, recorded) for every line ``pattern`` matches."""
    for chapter in sorted(BOOK.glob("*.md")) if chapters is None else chapters:
        lines = chapter.read_text().splitlines()
        for i, line in enumerate(lines):
            if match := pattern.match(line.strip()):
                yield (chapter, i, match, *_block_under(chapter, lines, i))


def find(chapters: list[Path] | None = None) -> list[Experiment]:
    """Every experiment marker in the book's chapters, in page order."""
    return [
        Experiment(chapter, (chapter.parent / match.group(1)).resolve(), i, block, recorded)
        for chapter, i, match, block, recorded in _marked(MARKER, chapters)
    ]


def find_check_outputs(chapters: list[Path] | None = None) -> list[CheckOutput]:
    """Every check-output marker in the book's chapters, in page order."""
    return [
        CheckOutput(chapter, int(match.group(1)), match.group(2), i, block, recorded)
        for chapter, i, match, block, recorded in _marked(CHECK_MARKER, chapters)
    ]


_TIMING = re.compile(r"\((\d+(?:\.\d+)?) s(, max \|Δ\| [-+.\deE]+)?(, argmax agrees \d+/\d+)?\)")
_DELTA = re.compile(r"max \|Δ\| = [-+.\deE]+")


_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def clean_check(text: str, steps_dir: Path | str | None = None) -> str:
    """A check's output as a page shows it: no colour codes, the scratch folder shown as
    ``steps/``, and no first-run compile notes (they depend on the machine's cache)."""
    text = _COLOUR.sub("", text)
    if steps_dir is not None:
        text = text.replace(str(steps_dir).rstrip("/") + "/", "steps/")
    return "\n".join(
        line for line in normalize(text).splitlines()
        if not line.startswith("First run on this machine") and not line.startswith("  … ")
    )


def normalize_check(text: str, steps_dir: Path | str | None = None) -> str:
    """:func:`clean_check`, and with what changes from run to run taken out too: timings
    and ``max |Δ|`` values. Both the page and a fresh run go through this before comparing."""
    lines = []
    for line in clean_check(text, steps_dir).splitlines():
        line = _TIMING.sub(lambda m: "(… s" + (", max |Δ| …" if m.group(2) else "") + (m.group(3) or "") + ")", line)
        lines.append(_DELTA.sub("max |Δ| = …", line))
    return "\n".join(lines)


def check_lines(text: str) -> list[str]:
    """The ✓/✗/! result lines of a (normalized) check output."""
    return [line for line in text.splitlines() if line[:1] in "✓✗!-" and not line.startswith("---")]


def _title(line: str) -> str:
    """A result line's check title, without its mark and timing."""
    return re.sub(r" \(… s[^()]*\)$", "", line[2:])


def compare_stub_output(number: int, output: str, steps_dir: Path | str) -> list[str]:
    """Problems between the page's block for step ``number``'s stub and a real run of
    ``python -m course.check N --steps-dir steps_dir`` on fresh stubs (empty: they agree)."""
    blocks = [c for c in find_check_outputs() if c.number == number and c.kind == "stub"]
    if not blocks:
        return [f"no page shows step {number:02d}'s check on its stub (a `<!-- check-output: {number} stub -->` block)"]
    actual = normalize_check(output, steps_dir)
    problems = []
    for block in blocks:
        shown = normalize_check(block.recorded)
        if block.block is None or shown != actual:
            problems.append(_drift(block, shown, actual))
    return problems


def compare_solution_output(output: str, steps_dir: Path | str) -> list[str]:
    """Problems between the pages' passing blocks and a real run of ``python -m course.check
    all --steps-dir steps_dir`` on copied solutions: every ✓ line a page shows must be in
    the run, with the same checks as that step's stub block, and the verdict must count them."""
    actual = set(check_lines(normalize_check(output, steps_dir)))
    stubs = {c.number: c for c in find_check_outputs() if c.kind == "stub"}
    problems = []
    for block in (c for c in find_check_outputs() if c.kind == "solution"):
        shown = normalize_check(block.recorded)
        lines = check_lines(shown)
        missing = [line for line in lines if line not in actual]
        if block.block is None or not lines or missing:
            problems.append(f"{block.name}: not in a real run: {missing or '(no block)'}; "
                            "`python -m course.authoring.experiments --check-outputs --write` refreshes it")
            continue
        ran = [line for line in lines if not line.startswith("-")]  # a skipped check is not counted
        if f"all {len(ran)} checks pass" not in shown:
            problems.append(f"{block.name}: the verdict does not count its {len(lines)} checks")
        stub = stubs.get(block.number)
        if stub is not None and sorted(map(_title, lines)) != sorted(map(_title, check_lines(normalize_check(stub.recorded)))):
            problems.append(f"{block.name}: not the same checks as the stub's block on the same page")
    return problems


def _drift(block: CheckOutput, shown: str, actual: str) -> str:
    lines = difflib.unified_diff(shown.splitlines(), actual.splitlines(), fromfile=f"{block.chapter.name} (on the page)",
                                 tofile="a real run (normalized)", lineterm="")
    return (f"{block.name}: the page differs from a real run; "
            "`python -m course.authoring.experiments --check-outputs --write` refreshes it\n" + "\n".join(lines))


def _run_check(number: int, steps_dir: Path) -> str:
    import subprocess

    result = subprocess.run([sys.executable, "-m", "course.check", str(number), "--steps-dir", str(steps_dir)],
                            cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    return result.stdout + result.stderr


def refresh_check_outputs(write: bool, only: list[str]) -> int:
    """Runs each marked step's check on fresh stubs and on copied solutions; compares (or rewrites)."""
    import shutil
    import tempfile

    from course.authoring import render

    blocks = find_check_outputs()
    if only:
        blocks = [b for b in blocks if any(f"{b.number:02d}" == part.zfill(2) for part in only)]
    problems, rewrite = 0, []
    with tempfile.TemporaryDirectory() as stubs, tempfile.TemporaryDirectory() as copies:
        render.render_all(Path(stubs))
        for path in SOLUTIONS.glob("step_*.py"):
            shutil.copy(path, Path(copies) / path.name)
        for block in blocks:
            folder = Path(stubs if block.kind == "stub" else copies)
            real = clean_check(_run_check(block.number, folder), folder)
            if block.block is not None and normalize_check(block.recorded) == normalize_check(real):
                print(f"✓ {block.name}", file=sys.stderr)
            elif write:
                rewrite.append((block, real))
                print(f"✎ {block.name}: output block rewritten", file=sys.stderr)
            else:
                problems += 1
                print("✗ " + _drift(block, normalize_check(block.recorded), normalize_check(real)), file=sys.stderr)
    for block, real in sorted(rewrite, key=lambda item: (item[0].chapter, -item[0].marker_line)):
        write_block(block, real)
    if problems:
        print(f"{problems} of {len(blocks)} check outputs need attention; `python -m course.authoring.experiments "
              "--check-outputs --write` rewrites them from real runs", file=sys.stderr)
        return 1
    return 0


def normalize(text: str) -> str:
    """Output as a page shows it: no trailing spaces, no trailing blank lines."""
    return "\n".join(line.rstrip() for line in text.rstrip().splitlines())


def prepare() -> None:
    """What every script can rely on: the repository root, solutions/ importable, MAX set up."""
    os.chdir(ROOT)
    if str(SOLUTIONS) not in sys.path:
        sys.path.insert(0, str(SOLUTIONS))
    from course import runtime

    runtime.setup()


def run(script: Path) -> tuple[str, str | None, float]:
    """Runs one script here; returns (what it printed, the traceback or None, seconds)."""
    import numpy as np

    printed = io.StringIO()
    options = np.get_printoptions()
    argv, cwd = sys.argv, os.getcwd()
    started = time.perf_counter()
    error = None
    try:
        sys.argv = [str(script)]
        with contextlib.redirect_stdout(printed):
            runpy.run_path(str(script), run_name="__main__")
    except BaseException as exc:  # noqa: BLE001 - report any failure of a script, including SystemExit
        if isinstance(exc, KeyboardInterrupt):
            raise
        error = traceback.format_exc()
    finally:
        sys.argv = argv
        os.chdir(cwd)
        np.set_printoptions(**options)
    return normalize(printed.getvalue()), error, time.perf_counter() - started


def diff(experiment: Experiment, actual: str) -> str:
    """A unified diff from the page's block to the script's real output."""
    lines = difflib.unified_diff(
        experiment.recorded.splitlines(),
        actual.splitlines(),
        fromfile=f"{experiment.chapter.relative_to(ROOT)} (on the page)",
        tofile=f"{experiment.script.relative_to(ROOT)} (printed now)",
        lineterm="",
    )
    return "\n".join(lines)


def write_block(experiment: Experiment | CheckOutput, actual: str) -> None:
    """Replaces (or adds) the output block under an experiment's or a check's marker."""
    lines = experiment.chapter.read_text().splitlines()
    block = [f"{FENCE}text", *actual.splitlines(), FENCE]
    if experiment.block is None:
        lines[experiment.marker_line + 1 : experiment.marker_line + 1] = block
    else:
        start, end = experiment.block
        lines[start:end] = block
    experiment.chapter.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.authoring.experiments", description=__doc__.split("\n\n")[0])
    parser.add_argument("only", nargs="*", help="run only the scripts whose file name contains one of these")
    parser.add_argument("--write", action="store_true", help="rewrite the pages' output blocks from real runs")
    parser.add_argument("--check-outputs", action="store_true",
                        help="the pages' `pixi run sNN` outputs instead: run each step's check on a fresh stub and on "
                             "its solution (about 10 s each) and compare; `only` selects steps by number")
    args = parser.parse_args(argv)
    if args.check_outputs:
        return refresh_check_outputs(args.write, args.only)

    experiments = find()
    if args.only:
        experiments = [e for e in experiments if any(part in e.script.name for part in args.only)]
    if not experiments:
        print("no experiments found", file=sys.stderr)
        return 1
    prepare()
    problems, rewrite = 0, []
    for experiment in experiments:
        if not experiment.script.is_file():
            print(f"✗ {experiment.name}: the script does not exist", file=sys.stderr)
            problems += 1
            continue
        actual, error, seconds = run(experiment.script)
        if error is not None:
            print(f"✗ {experiment.name} failed ({seconds:.1f} s):\n{error}", file=sys.stderr)
            problems += 1
        elif experiment.block is not None and actual == normalize(experiment.recorded):
            print(f"✓ {experiment.name} ({seconds:.1f} s)", file=sys.stderr)
        elif args.write:
            rewrite.append((experiment, actual))
            print(f"✎ {experiment.name}: output block rewritten ({seconds:.1f} s)", file=sys.stderr)
        else:
            problems += 1
            shown = diff(experiment, actual) if experiment.block is not None else "(no output block under the marker)"
            print(f"✗ {experiment.name}: the page's output differs from a real run ({seconds:.1f} s)\n{shown}",
                  file=sys.stderr)
    # Bottom-up within each page, so that a rewritten block never moves one still to write.
    for experiment, actual in sorted(rewrite, key=lambda item: (item[0].chapter, -item[0].marker_line)):
        write_block(experiment, actual)
    if problems:
        hint = "" if args.write else "; `python -m course.authoring.experiments --write` rewrites the blocks from real runs"
        print(f"{problems} of {len(experiments)} experiments need attention{hint}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
