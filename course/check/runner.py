"""The friendly check runner behind ``pixi run sNN``: pytest, reported for learners.

    python -m course.check 4                      # step 04 on your steps/
    python -m course.check 25 26                  # steps 25 and 26
    python -m course.check all                    # every step, in order
    python -m course.check 4 --target solutions   # the finished code

It runs the step's pytest checks (``pytest -m step04 --target steps``) with a
plugin that prints one ✓/✗ line per check, the reason for each ✗ in plain
words, and a verdict that counts skipped checks too. The exit code is pytest's: 0
when every check passes. While a slow check runs, a status line shows its name and
time (off a terminal, a plain line every 30 s), and says when MAX is compiling.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.spinner import Spinner

from course import runtime
from course.check.hints import REPORT_TO, check_title, shown, versions
from course.outline import OUTLINE, ROOT, check_command, SOLUTIONS, STEPS, available, marker, pixi_task

console = Console(highlight=False, soft_wrap=True)

#: How many lines of a learner's own print() output to show under a failed check.
SHOWN_OUTPUT_LINES = 12

#: Seconds a check runs before a terminal's live status line appears.
QUIET_SECONDS = 4.0
#: Seconds between the plain "still running" lines when the output is not a terminal.
PROGRESS_SECONDS = 30.0
COMPILING = "MAX is compiling a kernel this machine has not used before. It happens once: later runs reuse it."


def max_cache() -> Path:
    """The folder MAX caches compiled kernels in (:func:`course.runtime.max_cache`)."""
    runtime.setup()  # MAX's log level is set before MAX loads
    return runtime.max_cache()


def _cache_bytes(folder: Path) -> int:
    """The size of MAX's cache: every file in it but the locks and the course's own MEF files.

    A warm run only takes and drops locks (``mef.lock-1a2b3c4d``, 8 bytes each), so the
    cache grows only when MAX compiles something. (A graph MAX loads from its cache is
    also written to ``course-graphs/`` the first time, which is not a compile.)
    """
    total = 0
    for path, folders, names in os.walk(folder):
        if runtime.GRAPHS in folders:
            folders.remove(runtime.GRAPHS)
        for name in names:
            if ".lock" not in name:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(path, name)).st_size
    return total


def _duration(seconds: float) -> str:
    """``45 s``, ``1 min``, ``1 min 30 s``."""
    minutes, seconds = divmod(int(seconds), 60)
    if not minutes:
        return f"{seconds} s"
    return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"


class Progress:
    """Shows that a long check is still running, and whether MAX is compiling for it.

    A background thread watches each check. On a terminal, once the check has run for
    ``quiet`` seconds, a live status line shows its name and time. Elsewhere (CI, an
    editor's run pane, ``| tee``), where a status line cannot update, it prints a plain
    line every ``every`` seconds instead. A check that ends sooner shows nothing.

    "MAX is compiling" is decided from MAX's cache growing during the check, never
    from silence alone: on a busy machine a warm check can be quiet for a while too.
    """

    def __init__(self, cache: Path, every: float = PROGRESS_SECONDS, quiet: float = QUIET_SECONDS):
        self.cache, self.every, self.quiet = cache, every, quiet
        self.out = _uncaptured_console()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, title: str) -> None:
        self.stop()
        self._stopped = threading.Event()
        watch = (self._stopped, title, time.perf_counter(), _cache_bytes(self.cache))
        self._thread = threading.Thread(target=self._watch, args=watch, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ends the watch; returns once its thread is gone, so no line follows a result line.

        Joined, never left running: a thread alive while MAX shuts down can abort the
        process ("terminate called without an active exception")."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _watch(self, stopped: threading.Event, title: str, started: float, before: int) -> None:
        compiling, spinner, next_line = False, Spinner("dots"), self.every
        # Not rich's console.status(): it swaps sys.stdout while it shows, and would put
        # back pytest's capture of this check after pytest has taken it away.
        live = Live(spinner, console=self.out, transient=True, redirect_stdout=False, redirect_stderr=False)
        while not stopped.wait(min(1.0, self.every / 4)):
            elapsed = time.perf_counter() - started
            if elapsed < self.quiet:
                continue
            if not compiling and _cache_bytes(self.cache) > before:
                compiling = True
                if not self.out.is_terminal:
                    self.out.print(f"  [dim]… {COMPILING}[/]")
            if stopped.is_set():  # the check ended while the cache was read
                break
            if self.out.is_terminal:
                # One line, cut at the terminal's width: the news first, the check's name last.
                news = "MAX is compiling a new kernel (once) · " if compiling else ""
                spinner.update(text=f"[dim]{_duration(elapsed)} · {news}{escape(title)}[/]")
                live.start()  # once; later calls do nothing
            elif elapsed >= next_line:
                self.out.print(f"  [dim]… still running: {escape(title)} ({_duration(elapsed)})[/]")
                next_line += self.every
        live.stop()


def _uncaptured_console() -> Console:
    """A console on a copy of the real stdout: pytest captures fd 1 while a check runs."""
    try:
        out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1, encoding="utf-8")
    except (AttributeError, OSError, ValueError):  # no real stdout (an embedding host)
        return console
    return Console(file=out, highlight=False, soft_wrap=True)


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


def _short(reason: str) -> str:
    """A skip reason's first clause: ``GPT-2's weights are not in the Hugging Face cache``."""
    return re.split(r"; |: | — ", reason)[0]


class Report:
    """A pytest plugin that prints for learners instead of pytest's own terminal output."""

    def __init__(self, label: str, again: str, progress: Progress):
        self.label, self.again, self.progress = label, again, progress
        self.passed = self.failed = self.broken = self.skipped = 0
        self.skip_reasons: list[str] = []
        self.problems: list[str] = []
        self.title = ""  # the running check's
        self.started = time.perf_counter()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self.title = check_title(item)
        self.progress.start(self.title)
        yield
        self.progress.stop()

    def pytest_collectreport(self, report):
        if report.failed:
            self.problems.append(
                f"the course's checks in {report.nodeid} could not load ({versions()}): "
                f"{_last_line(report.longreprtext)} — not your code; {REPORT_TO}"
            )

    def pytest_collection_finish(self, session):
        if not session.items and not self.problems:
            self.problems.append("no checks were selected")

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.failed or report.skipped:
            self.progress.stop()  # before printing this check's line
        title = escape(self.title)
        if report.when == "call" and report.passed:
            self.passed += 1
            properties = dict(report.user_properties)
            delta = properties.get("max_delta")
            extra = f", max |Δ| {delta:.1e}" if delta is not None else ""
            if "argmax_agreement" in properties:
                extra += f", argmax agrees {properties['argmax_agreement']}"
            console.print(f"[green]✓[/] {title} [dim]({report.duration:.1f} s{extra})[/]")
        elif report.failed and getattr(report, "course_fault", False):
            # The course broke, not the learner's code: a separate mark and colour.
            self.broken += 1
            console.print(f"[yellow]![/] {title}")
            console.print(f"  [yellow]{escape(report.course_reason)}[/]")
        elif report.failed:
            self.failed += 1
            reason = getattr(report, "course_reason", None) or _last_line(report.longreprtext)
            console.print(f"[red]✗[/] {title}")
            console.print(f"  [red]{escape(reason)}[/]")
            printed = report.capstdout.strip().splitlines()
            if printed:
                console.print("  [dim]your code printed:[/]")
                for line in printed[-SHOWN_OUTPUT_LINES:]:
                    console.print(f"  [dim]│[/] {escape(line)}")
        elif report.skipped and report.when != "teardown":
            # Each reason once, under the first check it skips; the verdict counts them.
            self.skipped += 1
            reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            reason = reason.removeprefix("Skipped: ")
            console.print(f"[yellow]-[/] {title} [yellow](skipped)[/]")
            if reason not in self.skip_reasons:
                self.skip_reasons.append(reason)
                console.print(f"  [yellow]{escape(reason)}[/]")

    def pytest_internalerror(self, excrepr):
        self.problems.append(f"internal error in the checks: {_last_line(str(excrepr))}")
        return True

    def _skips(self) -> str:
        """``, 7 skipped: <why>`` for the verdict (empty when nothing was skipped)."""
        if not self.skipped:
            return ""
        why = list(dict.fromkeys(_short(reason) for reason in self.skip_reasons))
        return f", {self.skipped} skipped: " + ("; ".join(why) if len(why) <= 2 else f"{len(why)} reasons, given above")

    def pytest_sessionfinish(self, session, exitstatus):
        self.progress.stop()
        for problem in self.problems:
            console.print(f"[red]✗ {escape(problem)}[/]")
        seconds = f"[dim]({time.perf_counter() - self.started:.1f} s)[/]"
        ran = self.passed + self.failed + self.broken
        checks, skips = ran + self.skipped, escape(self._skips())
        if self.broken:
            console.print(
                f"[bold yellow]{self.label}: {self.broken} of {checks} checks could not run because the "
                f"course itself failed (marked !) — not your code; {REPORT_TO}.[/]"
            )
        if exitstatus == pytest.ExitCode.INTERRUPTED and not self.problems:  # not a test file that cannot load
            console.print(f"[bold yellow]{self.label}: interrupted after {ran - self.broken} checks{skips}.[/] {seconds}")
        elif exitstatus == pytest.ExitCode.OK and ran:
            console.print(f"[bold green]{self.label}: all {ran} checks pass{skips}[/] {seconds}")
        elif self.failed:
            console.print(
                f"[bold red]{self.label}: {self.failed} of {checks - self.broken} checks fail{skips}.[/] "
                f"Fix the first ✗ above, then run {self.again} again. {seconds}"
            )
        elif self.broken:
            console.print(f"[bold]{self.label}: the other {self.passed} checks pass{skips}.[/] {seconds}")
        else:
            console.print(f"[bold red]{self.label}: no check ran{skips}.[/] {seconds}")


#: pytest's own output off, the Report prints instead; and no unraisable-exception plugin,
#: whose full garbage collection at exit costs ~0.7 s of a ~8 s check.
PYTEST_ARGS = ["-p", "no:terminal", "-p", "no:cacheprovider", "-p", "no:unraisableexception", "-W", "ignore"]


def check(files: list[str], label: str, again: str, args: list[str], progress: Progress) -> int:
    """Runs pytest on ``files`` with the learner's report instead of pytest's output."""
    return int(pytest.main([*files, *PYTEST_ARGS, *args], plugins=[Report(label, again, progress)]))


def run(numbers: list[int], target: str, steps_dir: Path, extra: list[str]) -> int:
    """Runs the checks of ``numbers`` on ``target`` with the learner's report."""
    if len(numbers) == 1:
        label, title = f"Step {numbers[0]:02d}", OUTLINE[numbers[0]]
        again = check_command(numbers[0])
    else:
        every = numbers == available()
        label = "Steps " + ", ".join(f"{n:02d}" for n in numbers)
        title = "all available steps" if every else ", ".join(OUTLINE[n] for n in numbers)
        plain = "all" if every else " ".join(map(str, numbers))
        again = f"`{pixi_task(None if every else numbers)}` (or `python -m course.check {plain}`)"
    checked = shown(steps_dir) if target == "steps" else shown(SOLUTIONS)
    console.print(f"[bold]{label} · {title}[/] [dim](checking {checked}/)[/]")
    cache = max_cache()
    if not (cache / ".mogg_cache").exists():
        console.print("[yellow]First run on this machine: MAX compiles the kernels it needs (up to a few minutes per step, once; later runs take seconds).[/]")
    # Only these steps' test files: a problem in another step's checks cannot stop this one.
    files = [str(path) for n in numbers for path in sorted((ROOT / "tests").glob(f"test_step_{n:02d}_*.py"))]
    selection = ["-m", " or ".join(marker(n) for n in numbers), "--target", target, "--steps-dir", str(steps_dir)]
    return check(files, label, again, [*selection, *extra], Progress(cache))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.check", description=__doc__.split("\n")[0])
    parser.add_argument("step", nargs="+", help="a step number (4 or 04), several (25 26), or 'all'")
    parser.add_argument("--target", choices=("steps", "solutions"), default="steps")
    parser.add_argument("--steps-dir", type=Path, default=STEPS, help="the folder --target steps reads")
    args, extra = parser.parse_known_args(argv)
    if "all" in args.step:
        if len(args.step) > 1:
            others = " ".join(given for given in args.step if given != "all")
            parser.error(f"'all' checks every step: give it alone, not with {others}")
        numbers = available()
    else:
        numbers = []
        for given in args.step:
            number = int(given) if given.isdigit() else None
            if number not in OUTLINE:
                parser.error(f"step must be a number from 1 to {max(OUTLINE)}, or 'all', not {given!r}")
            if number not in available():
                console.print(f"Step {number:02d} ({OUTLINE[number]}) is not in the course yet.")
            elif number not in numbers:
                numbers.append(number)
        if not numbers:
            return 0
    return run(numbers, args.target, args.steps_dir.resolve(), extra)

