"""The course outline (``course/outline.py``): where each step's files live, and the commands a message names."""

from __future__ import annotations

import sys

import pytest

from course.outline import OUTLINE, SOLUTIONS, STEPS, available, check_command, marker, not_installed, step_path

pytestmark = pytest.mark.course


@pytest.mark.parametrize("number, command", [
    (4, "`pixi run s04` (or `python -m course.check 4`)"), (16, "`pixi run s16` (or `python -m course.check 16`)")])
def test_check_command_names_pixis_task_and_the_plain_command(number, command):
    assert check_command(number) == command


@pytest.mark.parametrize("number, name", [(4, "step04"), (16, "step16")])
def test_a_steps_marker(number, name):
    assert marker(number) == name


def test_a_step_file_is_found_under_solutions_or_steps():
    assert step_path(4) == SOLUTIONS / "step_04_mlp.py"
    assert step_path(16, STEPS) == STEPS / "step_16_memory_limit.py"
    assert step_path(99) is None


def test_of_two_files_for_one_step_the_first_by_name_is_taken(tmp_path):
    for name in ("step_07_b.py", "step_07_a.py", "step_70_x.py"):
        (tmp_path / name).write_text("")
    assert step_path(7, tmp_path) == tmp_path / "step_07_a.py"


def test_every_step_of_the_outline_is_available_in_order():
    assert available() == sorted(OUTLINE) == list(range(1, 27))


@pytest.mark.parametrize("missing, package", [("max.engine", "max"), ("rich", "rich")])
def test_a_python_without_the_courses_packages_gets_one_line_saying_what_to_do(missing, package):
    line = not_installed(ModuleNotFoundError(f"No module named '{missing}'", name=missing),
                         "python -m course.check", "pixi run s09")
    assert line == (f"python -m course.check needs the package `{package}`, which this Python ({sys.executable}) "
                    "does not have: activate the course's environment first (`source .venv/bin/activate`, as in the "
                    "README's setup), or run `pixi run s09`.")


def test_a_missing_module_without_a_name_is_named_from_its_message():
    line = not_installed(ModuleNotFoundError("max.engine"), "python -m course.check", "pixi run check-all")
    assert line.startswith("python -m course.check needs the package `max`, ") and line.endswith(
        "or run `pixi run check-all`."), line


@pytest.mark.parametrize("numbers, plain", [(None, "all"), ([4], "4"), ([25], "25"), ([3, 25, 26], "3 25 26")])
def test_pixi_task_runs_the_plain_command_for_the_same_steps(numbers, plain):
    """pixi_task's command, read as pixi.toml runs it (the task's line, then the arguments given after its name), is
    `python -m course.check` for the same steps"""
    import shlex
    import tomllib

    from course.outline import ROOT, pixi_task

    tasks = tomllib.loads((ROOT / "pixi.toml").read_text(encoding="utf-8"))["tasks"]
    words = shlex.split(pixi_task(numbers))
    assert words[:2] == ["pixi", "run"] and words[2] in tasks, f"{pixi_task(numbers)!r}: no such task in pixi.toml"
    task = tasks[words[2]]
    run = shlex.split(task if isinstance(task, str) else task["cmd"]) + words[3:]
    assert run == ["python", "-m", "course.check", *plain.split()], f"{pixi_task(numbers)!r} runs {run}"
