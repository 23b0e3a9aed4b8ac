"""The course's command-line options for pytest, loaded before pytest reads its arguments.

``pyproject.toml`` loads this module with ``-p course.check.pytest_plugin`` in ``addopts``.
Options registered in ``tests/conftest.py`` arrive too late: pytest reads path
arguments before it loads that conftest, so ``python -m pytest -m step04 --target
steps`` would take ``steps`` for a path and stop with "unrecognized arguments".
A plugin named with ``-p`` is loaded first, so both spellings work:
``--target steps`` and ``--target=steps``.
"""

from __future__ import annotations

from pathlib import Path

from course.outline import STEPS


def pytest_addoption(parser):
    group = parser.getgroup("course")
    group.addoption(
        "--target",
        choices=("solutions", "steps"),
        default="solutions",
        help="which code the checks grade: the finished solutions/ (default) or your steps/",
    )
    group.addoption(
        "--steps-dir",
        type=Path,
        default=STEPS,
        help="the folder --target steps reads (default: steps/)",
    )


def pytest_configure(config):
    # Every skip prints its reason in pytest's summary: a skip is never silent, whatever -r asks for (pytest
    # reads each letter of -r once, so an "s" already there, or in "a" or "A", changes nothing). Set here, not
    # as -rs in addopts: the runner turns pytest's terminal plugin off, and with it the -r option.
    if getattr(config.option, "reportchars", None) is not None:
        config.option.reportchars += "s"
