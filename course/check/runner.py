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
import os
import sys
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console
from rich.markup import escape

from course.check.hints import REPORT_TO, shown, versions
from course.outline import OUTLINE, ROOT, SOLUTIONS, STEPS, available, marker

console = Console(highlight=False, soft_wrap=True)

#: How many lines of a learner's own print() output to show under a failed check.
SHOWN_OUTPUT_LINES = 12


#: Seconds a check may stay quiet before the runner says why.
QUIET_SECONDS = 4.0
MAX_CACHE = Path.home() / ".cache" / "modular"


def _newest_in_cache() -> float:
    """The newest modification time of a file in MAX's kernel cache (0 when it is empty).

    Files only: every eager op touches the cache's folders (temporary files come and
    go), while a new file appears only when MAX compiles something.
    """
    newest, folders = 0.0, [MAX_CACHE]
    while folders:
        try:
            entries = list(os.scandir(folders.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    folders.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
            except OSError:
                pass
    return newest


class CompileNotice:
    """Says so when a check has been quiet for a while because MAX is compiling.

    MAX compiles each kernel the first time a machine uses it (20-60 s on a laptop)
    and writes it to its cache. A background thread watches that cache while a check
    runs; once the check has been quiet for QUIET_SECONDS and the cache has grown
    since it started, it shows a status line (a plain line when not on a terminal).
    """

    def __init__(self, quiet: float = QUIET_SECONDS):
        self.quiet = quiet
        self.out = _uncaptured_console()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.stop()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(self._stopped, time.perf_counter()), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ends the watch; returns once its thread is gone, so no notice follows a result line.

        Joined, never left running: a thread alive while MAX shuts down can abort the
        process ("terminate called without an active exception")."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _watch(self, stopped: threading.Event, started: float) -> None:
        before = _newest_in_cache()
        status = None
        while not stopped.wait(1.0):
            quiet = time.perf_counter() - started
            if quiet < self.quiet or _newest_in_cache() <= before:
                continue
            text = (
                f"MAX is compiling a kernel this machine has not used before ({quiet:.0f} s). "
                "It happens once: later runs reuse it."
            )
            if stopped.is_set():  # the check ended while the cache was read
                break
            if not self.out.is_terminal:
                self.out.print(f"  [dim]… {text}[/]")
                return
            if status is None:
                status = self.out.status(f"[dim]{text}[/]")
                status.start()
            else:
                status.update(f"[dim]{text}[/]")
        if status is not None:
            status.stop()


def _uncaptured_console() -> Console:
    """A console on a copy of the real stdout: pytest captures fd 1 while a check runs."""
    try:
        out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1, encoding="utf-8")
    except (AttributeError, OSError, ValueError):  # no real stdout (an embedding host)
        return console
    return Console(file=out, highlight=False, soft_wrap=True)


class Report:
    """A pytest plugin that prints for learners instead of pytest's own terminal output."""

    def __init__(self, label: str, again: str):
        self.label, self.again = label, again
        self.passed = self.failed = self.broken = 0
        self.problems: list[str] = []
        self.started = time.perf_counter()
        self.notice = CompileNotice()

    def pytest_runtest_logstart(self, nodeid, location):
        self.notice.start()

    def pytest_runtest_logfinish(self, nodeid, location):
        self.notice.stop()

    def pytest_collectreport(self, report):
        if report.failed:
            last = report.longreprtext.strip().splitlines()[-1]
            self.problems.append(
                f"the course's checks in {report.nodeid} could not load ({versions()}): {last} "
                f"— not your code; {REPORT_TO}"
            )

    def pytest_collection_finish(self, session):
        if not session.items and not self.problems:
            self.problems.append("no checks were selected")

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.failed or report.skipped:
            self.notice.stop()  # before printing this check's line
        if report.when == "call" and report.passed:
            self.passed += 1
            properties = dict(report.user_properties)
            delta = properties.get("max_delta")
            extra = f", max |Δ| {delta:.1e}" if delta is not None else ""
            if "argmax_agreement" in properties:
                extra += f", argmax agrees {properties['argmax_agreement']}"
            console.print(f"[green]✓[/] {escape(report.course_title)} [dim]({report.duration:.1f} s{extra})[/]")
        elif report.failed and getattr(report, "course_fault", False):
            # The course broke, not the learner's code: a separate mark and colour.
            self.broken += 1
            console.print(f"[yellow]![/] {escape(report.course_title)}")
            console.print(f"  [yellow]{escape(report.course_reason)}[/]")
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
            reason = reason.removeprefix("Skipped: ")
            console.print(f"[yellow]-[/] {escape(report.course_title)} [yellow](skipped: {escape(reason)})[/]")

    def pytest_internalerror(self, excrepr):
        self.problems.append(f"internal error in the checks: {str(excrepr).strip().splitlines()[-1]}")
        return True

    def pytest_sessionfinish(self, session, exitstatus):
        self.notice.stop()
        for problem in self.problems:
            console.print(f"[red]✗ {escape(problem)}[/]")
        seconds = f"[dim]({time.perf_counter() - self.started:.1f} s)[/]"
        total = self.passed + self.failed + self.broken
        if self.broken:
            console.print(
                f"[bold yellow]{self.label}: {self.broken} of {total} checks could not run because the "
                f"course itself failed (marked !) — not your code; {REPORT_TO}.[/]"
            )
            total -= self.broken
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            console.print(f"[bold yellow]{self.label}: interrupted after {total} checks.[/] {seconds}")
        elif exitstatus == pytest.ExitCode.OK and total:
            console.print(f"[bold green]{self.label}: all {total} checks pass[/] {seconds}")
        elif self.failed:
            console.print(
                f"[bold red]{self.label}: {self.failed} of {total} checks fail.[/] "
                f"Fix the first ✗ above, then run {self.again} again. {seconds}"
            )
        elif self.broken:
            console.print(f"[bold]{self.label}: the other {self.passed} checks pass.[/] {seconds}")
        else:
            console.print(f"[bold red]{self.label}: no check ran.[/] {seconds}")


def _cache_is_cold() -> bool:
    return not (MAX_CACHE / ".mogg_cache").exists()


def run(numbers: list[int], target: str, steps_dir: Path, extra: list[str]) -> int:
    """Runs the checks of ``numbers`` on ``target`` with the learner's report."""
    if len(numbers) == 1:
        label, title = f"Step {numbers[0]:02d}", OUTLINE[numbers[0]]
        again = f"`pixi run s{numbers[0]:02d}` (or `python -m course.check {numbers[0]}`)"
    else:
        label, title = "Steps " + ", ".join(f"{n:02d}" for n in numbers), "all available steps"
        again = "`pixi run check-all` (or `python -m course.check all`)"
    checked = shown(steps_dir) if target == "steps" else shown(SOLUTIONS)
    console.print(f"[bold]{label} · {title}[/] [dim](checking {checked}/)[/]")
    if _cache_is_cold():
        console.print("[yellow]First run on this machine: MAX compiles the kernels it needs (up to a few minutes per step, once; later runs take seconds).[/]")
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

