"""The friendly check runner behind ``pixi run sNN``: pytest, reported for learners.

    python -m course.check 4                      # step 04 on your steps/
    python -m course.check all                    # every step, in order
    python -m course.check 4 --target solutions   # the finished code

It runs the step's pytest checks (``pytest -m step04 --target steps``) with a
plugin that prints one ✓/✗ line per check, the reason for each ✗ in plain
words, and a verdict. The exit code is pytest's: 0 when every check passes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console
from rich.markup import escape

from course.outline import OUTLINE, ROOT, STEPS, available, marker

console = Console(highlight=False, soft_wrap=True)

#: How many lines of a learner's own print() output to show under a failed check.
SHOWN_OUTPUT_LINES = 12


class Report:
    """A pytest plugin that prints for learners instead of pytest's own terminal output."""

    def __init__(self, label: str, again: str):
        self.label, self.again = label, again
        self.passed = self.failed = 0
        self.problems: list[str] = []
        self.started = time.perf_counter()

    def pytest_collectreport(self, report):
        if report.failed:
            last = report.longreprtext.strip().splitlines()[-1]
            self.problems.append(f"the checks in {report.nodeid} could not load: {last}")

    def pytest_collection_finish(self, session):
        if not session.items and not self.problems:
            self.problems.append("no checks were selected")

    def pytest_runtest_logreport(self, report):
        if report.when == "call" and report.passed:
            self.passed += 1
            delta = dict(report.user_properties).get("max_delta")
            extra = f", max |Δ| {delta:.1e}" if delta is not None else ""
            console.print(f"[green]✓[/] {escape(report.course_title)} [dim]({report.duration:.1f} s{extra})[/]")
        elif report.failed:
            self.failed += 1
            reason = getattr(report, "course_reason", None) or report.longreprtext.strip().splitlines()[-1]
            console.print(f"[red]✗[/] {escape(report.course_title)}")
            console.print(f"  [red]{escape(reason)}[/]")
            printed = report.capstdout.strip().splitlines()
            if printed:
                console.print("  [dim]your code printed:[/]")
                for line in printed[-SHOWN_OUTPUT_LINES:]:
                    console.print(f"  [dim]│[/] {escape(line)}")
        elif report.skipped and report.when != "teardown":
            reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            console.print(f"[yellow]-[/] {escape(report.course_title)} [yellow](skipped: {escape(reason)})[/]")

    def pytest_internalerror(self, excrepr):
        self.problems.append(f"internal error in the checks: {str(excrepr).strip().splitlines()[-1]}")
        return True

    def pytest_sessionfinish(self, session, exitstatus):
        for problem in self.problems:
            console.print(f"[red]✗ {escape(problem)}[/]")
        seconds = f"[dim]({time.perf_counter() - self.started:.1f} s)[/]"
        total = self.passed + self.failed
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            console.print(f"[bold yellow]{self.label}: interrupted after {total} checks.[/] {seconds}")
        elif exitstatus == pytest.ExitCode.OK and total:
            console.print(f"[bold green]{self.label}: all {total} checks pass[/] {seconds}")
        elif total:
            console.print(
                f"[bold red]{self.label}: {self.failed} of {total} checks fail.[/] "
                f"Fix the first ✗ above, then run {self.again} again. {seconds}"
            )
        else:
            console.print(f"[bold red]{self.label}: no check ran.[/] {seconds}")


def _cache_is_cold() -> bool:
    return not (Path.home() / ".cache" / "modular" / ".mogg_cache").exists()


def run(numbers: list[int], target: str, steps_dir: Path, extra: list[str]) -> int:
    """Runs the checks of ``numbers`` on ``target`` with the learner's report."""
    if len(numbers) == 1:
        label, title = f"Step {numbers[0]:02d}", OUTLINE[numbers[0]]
        again = f"`pixi run s{numbers[0]:02d}` (or `python -m course.check {numbers[0]}`)"
    else:
        label, title = "Steps " + ", ".join(f"{n:02d}" for n in numbers), "all available steps"
        again = "`pixi run check-all` (or `python -m course.check all`)"
    console.print(f"[bold]{label} · {title}[/] [dim](checking {target}/)[/]")
    if _cache_is_cold():
        console.print("[yellow]First run on this machine: MAX compiles the kernels it needs (2-4 minutes, once).[/]")
    # Only these steps' test files: a problem in another step's checks cannot stop this one.
    files = [str(path) for n in numbers for path in sorted((ROOT / "tests").glob(f"test_step_{n:02d}_*.py"))]
    args = [
        *files,
        "-m",
        " or ".join(marker(n) for n in numbers),
        "--target",
        target,
        "--steps-dir",
        str(steps_dir),
        "-p",
        "no:terminal",
        "-p",
        "no:cacheprovider",
        # Its full garbage collection at exit costs ~0.7 s of a ~8 s check.
        "-p",
        "no:unraisableexception",
        "-W",
        "ignore",
        *extra,
    ]
    return int(pytest.main(args, plugins=[Report(label, again)]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.check", description=__doc__.split("\n")[0])
    parser.add_argument("step", help="a step number (4 or 04), or 'all'")
    parser.add_argument("--target", choices=("steps", "solutions"), default="steps")
    parser.add_argument("--steps-dir", type=Path, default=STEPS, help="the folder --target steps reads")
    args, extra = parser.parse_known_args(argv)
    if args.step == "all":
        numbers = available()
    else:
        number = int(args.step) if args.step.isdigit() else None
        if number not in OUTLINE:
            parser.error(f"step must be a number from 1 to {len(OUTLINE)}, or 'all'")
        if number not in available():
            console.print(f"Step {number:02d} ({OUTLINE[number]}) is not in the course yet.")
            return 0
        numbers = [number]
    return run(numbers, args.target, args.steps_dir.resolve(), extra)


if __name__ == "__main__":
    sys.exit(main())
