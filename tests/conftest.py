"""pytest setup for the course checks.

* ``-m stepNN`` selects one step's checks (one marker per step, see pyproject.toml).
* ``--target solutions`` (the default) checks ``solutions/``; ``--target steps`` checks
  the learner's ``steps/`` (``--steps-dir`` points it at another folder). Both options
  live in ``course/check/pytest_plugin.py``, which pytest loads before it reads paths.
* An exception raised by the course itself (not by the learner's file) is reported as
  the course's failure, never as the learner's (``course_fault``).
* Each report carries a plain reason when it fails, and the worst
  mismatch it measured; ``course.check`` prints those for learners.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from course import runtime
from course.check.hints import explain_course_fault, explain_exception, raised_in
from course.outline import OUTLINE, SOLUTIONS, marker

import harness


def pytest_configure(config):
    for number, title in OUTLINE.items():
        config.addinivalue_line("markers", f"{marker(number)}: step {number:02d}, {title}")
    # Earlier steps always come from the solutions (see harness.load_step).
    if str(SOLUTIONS) not in sys.path:
        sys.path.insert(0, str(SOLUTIONS))
    runtime.setup()  # before any MAX op: see course/runtime.py


def pytest_addoption(parser):
    parser.addoption("--first", action="append", default=[], metavar="FILE",
                     help="run this test file's checks before the others', in the order given (.ci/run: the longest "
                          "files first, so that its two processes end together)")


def pytest_collection_modifyitems(config, items):
    first = {Path(name).resolve(): rank for rank, name in enumerate(config.getoption("first"))}
    unknown = [name for name in config.getoption("first") if not Path(name).is_file()]
    if unknown:
        raise pytest.UsageError(f"--first names no test file: {', '.join(unknown)}")
    if first:  # a stable sort: each file's checks keep their order, and the files not named theirs
        items.sort(key=lambda item: first.get(Path(item.path).resolve(), len(first)))


def _step_number(node) -> int | None:
    for number in OUTLINE:
        if node.get_closest_marker(marker(number)):
            return number
    return None


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu"):
        from max.driver import accelerator_count

        if accelerator_count() == 0:
            pytest.skip("needs a GPU, and MAX finds none here: untested on this machine (mutation_targets.UNTESTED "
                        "lists what only this check sees)")


@pytest.fixture
def step(request):
    """The module under test for this check's step, from --target."""
    number = _step_number(request.node)
    assert number is not None, f"{request.node.nodeid} has no stepNN marker"
    config = request.config
    return harness.load_step(number, config.getoption("target"), config.getoption("steps_dir").resolve())


@pytest.fixture
def mojo_kernels():
    """The course's Mojo kernels, compiled (once); the check skips, saying why, where there is no Mojo
    compiler at all (pip's max brings one, mojo-compiler; a conda environment may not)."""
    from course.runtime import kernels

    if why := harness.no_mojo():  # a compile error fails the check
        pytest.skip(f"{why}; with pixi: `pixi add modular`")
    return kernels()


@pytest.fixture(autouse=True)
def _measure():
    harness.measured.clear()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.passed and harness.measured:
        report.user_properties.append(("max_delta", max(harness.measured)))
    if report.failed and call.excinfo is not None:
        error = call.excinfo.value
        if isinstance(error, pytest.fail.Exception):
            report.course_reason = str(error)
            return
        # Learner code runs inside harness.call/forward, which turn its errors into
        # pytest.fail. An exception that gets here was raised by the course itself (the
        # Hugging Face reference, the harness, the weight conversion), unless the
        # learner's file is on its traceback: never blame the learner's TODO for it.
        source = getattr(getattr(item, "funcargs", {}).get("step"), "__file__", None)
        try:
            if raised_in(error, source):
                report.course_reason = explain_exception(error, source)
            else:
                report.course_reason = explain_course_fault(error)
                report.course_fault = True
        except Exception:  # noqa: BLE001 - a hint must never take the run down with it
            report.course_reason = f"{type(error).__name__}: {error}"
