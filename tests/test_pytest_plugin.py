"""The course's options for pytest (``course/check/pytest_plugin.py``), in a pytest run inside this one.

``pytest_addoption`` and ``pytest_configure`` run before any check, so each check here starts
a fresh pytest in the tests' process (pytest's own ``pytester``) with the plugin named as
``pyproject.toml`` names it, and reads what that run parsed and printed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from course.outline import STEPS

pytest_plugins = ("pytester",)
pytestmark = pytest.mark.course

PLUGIN = ("-p", "course.check.pytest_plugin")


@pytest.mark.parametrize("argv, target, steps_dir", [
    ([], "solutions", STEPS),
    (["--target", "steps"], "steps", STEPS),
    (["--target=steps", "--steps-dir", "mine"], "steps", Path("mine")),
    (["--steps-dir=mine", "--target", "solutions"], "solutions", Path("mine")),
])
def test_target_and_steps_dir_in_both_spellings_before_a_path(pytester, argv, target, steps_dir):
    """`--target steps` and `--target=steps` are options, not paths, before a path too; `--steps-dir` is a Path"""
    config = pytester.parseconfig(*PLUGIN, *argv, "test_x.py")
    got = config.getoption("target"), config.getoption("steps_dir")
    assert got == (target, steps_dir) and isinstance(got[1], Path), f"{argv} parsed as {got!r}"
    assert config.args == ["test_x.py"], f"{argv}: pytest's paths are {config.args}"


def test_a_target_not_in_the_course_is_refused_with_the_choices(pytester):
    result = pytester.runpytest_inprocess(*PLUGIN, "--target", "nowhere")
    error = result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, f"exit {result.ret}:\n{error}"
    assert re.search(r"--target: invalid choice: '?nowhere'? \(choose from '?solutions'?, '?steps'?\)", error), error


def test_help_names_both_options_under_the_course_with_what_each_does(pytester):
    result = pytester.runpytest_inprocess(*PLUGIN, "--help")
    help_text = re.sub(r"\s+", " ", result.stdout.str())
    course = help_text[help_text.index("course:"):]
    target, steps_dir = course.split("--target={solutions,steps}", 1)[1].split("--steps-dir=STEPS_DIR", 1)
    assert "solutions/" in target and "steps/" in target, f"--target's help: {target[:200]!r}"
    assert "steps/" in steps_dir[:60], f"--steps-dir's help: {steps_dir[:200]!r}"  # (then the next plugin's options)


SKIPPING = """
import pytest

def test_left_for_later():
    pytest.skip("GPT-2's real weights are not cached here")

def test_wrong():
    assert 1 + 1 == 3

@pytest.mark.xfail(reason="expected to fail")
def test_passes_anyway():
    pass

def test_done():
    pass
"""


@pytest.mark.parametrize("argv, failed, xpassed", [
    ([], True, False), (["-rfE"], True, False), (["-rsfE"], True, False), (["-rN"], False, False),
    (["-rs"], False, False), (["-ra"], True, True), (["-rA"], True, True)])
def test_every_skip_prints_its_reason_once_and_the_rest_of_the_summary_is_what_r_asks_for(pytester, argv, failed,
                                                                                          xpassed):
    """whatever -r asks for (pytest's default is fE), the summary gives each skip's reason, once; its other
    lines (a failure, an unexpected pass) are those -r asks for"""
    pytester.makepyfile(test_skips=SKIPPING)
    result = pytester.runpytest_inprocess(*PLUGIN, *argv)
    result.assert_outcomes(passed=1, skipped=1, failed=1, xpassed=1)
    lines = result.stdout.lines
    reasons = [line for line in lines if "GPT-2's real weights are not cached here" in line]
    assert len(reasons) == 1 and reasons[0].startswith("SKIPPED [1] test_skips.py:"), (argv, result.stdout.str())
    shown = (any(line.startswith("FAILED test_skips.py::test_wrong") for line in lines),
             any(line.startswith("XPASS test_skips.py::test_passes_anyway") for line in lines))
    assert shown == (failed, xpassed), f"{argv}: (FAILED, XPASS) lines shown {shown}:\n{result.stdout.str()}"


def test_without_pytests_terminal_the_plugin_changes_nothing(pytester):
    """the check runner turns pytest's terminal plugin off, and with it the -r option"""
    pytester.makepyfile(test_skips=SKIPPING)
    result = pytester.runpytest_inprocess(*PLUGIN, "-p", "no:terminal")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, f"exit {result.ret}:\n{result.stdout.str()}\n{result.stderr.str()}"
