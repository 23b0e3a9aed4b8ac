"""How `pytest -n 2 --dist loadfile` shares this suite between its two processes.

pytest-xdist's ``loadfile`` hands out one test file at a time, the files with the most checks
first. On a cold MAX cache that loses time twice on this suite:

* Two processes that compile the same graph at once each compile it: nothing tells the second
  that the first is already at it. The step checks, the book's experiments and the checks that
  rerun the step checks on copied, planted and stub files (``test_course.py``) all run the
  solutions' eager ops; split between the processes they compiled the same kernels side by
  side (the copied solutions took 836 s beside the step checks, 356 s after them).
* The longest files are not the ones with the most checks: bench's perplexities (one check of
  five minutes) ran last, alone.

So the scheduler here keeps the loadfile rule, one file to one process, and changes two things:
every file that runs the solutions' step checks is one unit (:data:`STEPS`), and the units known
to be long start first (:data:`LONG_FIRST`); the rest follow, most checks first, as before.
tests/conftest.py installs it (``pytest_xdist_make_scheduler``) when ``--dist loadfile`` is given.
"""

from __future__ import annotations

from collections import OrderedDict

from xdist.scheduler import LoadFileScheduling

#: The unit that holds every check that runs the solutions' step checks or their eager ops.
STEPS = "the step checks"
#: The book's experiments: one check that runs every chapter's script, the solutions' eager ops.
EXPERIMENTS = "tests/test_book.py::test_experiment_outputs_match_the_pages"
#: The units that start first, in this order (by cold time on a 2-core machine: the log's
#: "CI cold on two processes" has the slowest checks). Every other unit follows, most checks first.
LONG_FIRST = (STEPS, "tests/test_course_model.py", "tests/test_serve.py", "tests/test_programs.py",
              "tests/test_quantize.py", "tests/test_one_row.py")


def unit(nodeid: str) -> str:
    """The unit of work a check belongs to: :data:`STEPS`, or its file."""
    path = nodeid.split("::", 1)[0]
    name = path.rsplit("/", 1)[-1]
    if name.startswith("test_step_") or name == "test_course.py" or nodeid.startswith(EXPERIMENTS):
        return STEPS
    return path


def order(units: dict[str, dict]) -> list[str]:
    """The units in the order they are handed out: :data:`LONG_FIRST`, then the most checks first."""
    def rank(name: str) -> tuple[int, int]:
        first = LONG_FIRST.index(name) if name in LONG_FIRST else len(LONG_FIRST)
        return first, -len(units[name])

    return sorted(units, key=rank)


class CourseScheduling(LoadFileScheduling):
    """``--dist loadfile`` with the step checks in one unit and the long units first."""

    _ordered = False

    def _split_scope(self, nodeid: str) -> str:
        return unit(nodeid)

    def _assign_work_unit(self, node) -> None:
        if not self._ordered:  # the first assignment: the queue holds every unit
            self.workqueue = OrderedDict((name, self.workqueue[name]) for name in order(self.workqueue))
            self._ordered = True
        super()._assign_work_unit(node)
