"""The words of a ✗: ``course/check/hints.py`` on exceptions raised in a scratch step file.

A learner reads these lines instead of a traceback, so each check compares the whole line the
learner would read (the value that is still None, the TODO that sets it, the line that raised),
and each of the course's own faults must say it is not the learner's code.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys
import traceback
from pathlib import Path
from types import SimpleNamespace

import pytest

from course.check import hints
from course.outline import ROOT

pytestmark = pytest.mark.course

#: A stub as a learner leaves it: three TODOs in a class, one in a function, and given code.
STEP = '''
class MLP:
    def __init__(self):
        # TODO 1: Make the first layer.
        self.c_fc = None
        # TODO 2: Make the second layer.
        self.c_proj = None

    def forward(self, x):
        # TODO 3: Apply both layers.
        return self.c_proj(self.c_fc(x))


def scale(x):
    # TODO 4: Compute the factor.
    factor = None
    return x * factor


def pick(rows):
    # TODO 5: Take the fourth row.
    return rows[3]


def outer(rows):
    return pick(rows)


def given(text):
    return parse(text)


def parse(text):
    import json

    return json.loads(text)


class Attention:
    def __init__(self):
        # TODO 7: Make q and k, the two projections.
        self.q, self.k = None, None

    def forward(self, x):
        return self.q(x)


class Head:
    def __init__(self):
        self.bias = None  # given: GPT-2's head has no bias

    def forward(self, x):
        # TODO 10: Compute the scale.
        scale = None
        return x * scale


# TODO 8: Keep the weight in a slot.
class Slotted:
    __slots__ = ("weight",)

    def __init__(self):
        # TODO 9: Make the weight.
        self.weight = None

    def forward(self):
        return self.weight + 1
'''


def imported(path: Path, name: str, monkeypatch=None):
    """The Python file ``path``, imported as the module ``name`` (with ``monkeypatch``, in sys.modules for the
    check, where inspect looks a class's source up)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    if monkeypatch is not None:
        monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def step(tmp_path, monkeypatch):
    """STEP written to a file and imported, as the checks import a learner's step."""
    path = tmp_path / "step_99_example.py"
    path.write_text(STEP.lstrip("\n"))
    return imported(path, "step_99_example", monkeypatch)


def raised(call, *args) -> BaseException:
    with pytest.raises(Exception) as info:
        call(*args)
    return info.value


def line_of(step, text: str) -> int:
    """The 1-based line of ``step``'s file that holds ``text``."""
    lines = Path(step.__file__).read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if text in line)


def test_a_none_is_named_with_the_todo_that_sets_it(step):
    """a value still None is named, with the TODO above the line that assigns it: an attribute of self (the first
    one still None, in the order __init__ set them), or a local"""
    where = step.__file__
    assert hints.explain_exception(raised(step.MLP().forward, 1), where) == (
        f"`self.c_fc` is still None — TODO 1 in {where} "
        f"(TypeError at line {line_of(step, 'return self.c_proj(')}, in forward)")
    assert hints.explain_exception(raised(step.scale, 2), where) == (
        f"`factor` is still None — TODO 4 in {where} "
        f"(TypeError at line {line_of(step, 'return x * factor')}, in scale)")
    assert hints.explain_exception(raised(step.Head().forward, 1), where) == (  # the local first, then self's
        f"`scale` is still None — TODO 10 in {where} "
        f"(TypeError at line {line_of(step, 'return x * scale')}, in forward)")
    assert hints.explain_exception(raised(step.Attention().forward, 1), where) == (  # q: named by TODO 7's words
        f"`self.q` is still None — TODO 7 in {where} "
        f"(TypeError at line {line_of(step, 'return self.q(x)')}, in forward)")


def test_the_line_that_raised_is_named_with_the_todo_above_it(step):
    """any other error is described in one line, at the deepest line of the step file it passed through, with the
    TODO above that line; none where the function holds no TODO"""
    where = step.__file__
    assert hints.explain_exception(raised(step.outer, [1, 2]), where) == (
        f"IndexError: list index out of range — raised at {where}, line {line_of(step, 'return rows[3]')}, "
        "in pick (TODO 5)")
    error = raised(step.given, "{")
    assert hints.explain_exception(error, where) == (
        f"JSONDecodeError: {error} — raised at {where}, line {line_of(step, 'return json.loads(text)')}, in parse")


def test_a_none_without_a_dict_or_a_todo_is_described_where_it_was_raised(step):
    """an object without a __dict__ (__slots__) has no attributes to name: the error is described at its line"""
    where = step.__file__
    assert hints.explain_exception(raised(step.Slotted().forward), where) == (
        "TypeError: unsupported operand type(s) for +: 'NoneType' and 'int' — raised at "
        f"{where}, line {line_of(step, 'return self.weight + 1')}, in forward")


def test_an_error_outside_the_step_file_is_only_described(step, tmp_path):
    """without a step file, or when the error never passed through it, the one line is the error's own"""
    error = raised(step.scale, 2)
    text = "TypeError: unsupported operand type(s) for *: 'int' and 'NoneType'"
    assert hints.explain_exception(error, None) == text
    assert hints.explain_exception(error, tmp_path / "step_98_other.py") == text


def test_a_todo_is_found_above_a_line_within_its_function(step, tmp_path):
    """todo_above: the closest TODO at or above the line, never one above the function's def, and none for a line
    before the file's first"""
    path = step.__file__
    assert hints.todo_above(path, line_of(step, "self.c_proj = None")) == 2
    assert hints.todo_above(path, line_of(step, "# TODO 2")) == 2
    assert hints.todo_above(path, line_of(step, "self.c_fc = None")) == 1
    assert hints.todo_above(path, line_of(step, "return pick(rows)")) is None
    assert hints.todo_above(path, line_of(step, "__slots__")) is None  # TODO 8 is above the class line
    first = tmp_path / "step_98_first.py"
    first.write_text("# TODO 7: the first line\nx = 1\n")
    assert [hints.todo_above(first, n) for n in (2, 1, 0, -1)] == [7, 7, None, None]
    assert hints.todo_above(Path(path).with_name("missing.py"), 3) is None


def test_todos_in_a_function_or_class(step):
    """todos_in: the TODO numbers in an object's source, in order; none for what has no source"""
    assert hints.todos_in(step.MLP) == [1, 2, 3]
    assert hints.todos_in(step.scale) == [4]
    assert hints.todos_in(step.outer) == []
    assert hints.todos_in(len) == []


def test_a_none_that_given_code_assigns_is_not_blamed_on_a_todo(tmp_path):
    """a value still None is named with the TODO that assigns it, or, where no line assigns it, with the TODO whose
    words name it; one that only given code assigns (a graph compiled on first use) names no TODO, even where a
    TODO's words mention it"""
    step = tmp_path / "step_99_example.py"
    step.write_text(
        "# A runner: given code compiles its graph.\n"
        "class Runner:\n"
        "    def __init__(self):\n"
        "        self.decode = None  # given code: compiled on its first use\n"
        "        self.width: int = None  # given code too, annotated\n"
        "\n"
        "    def count(self):\n"
        "        # TODO 1: Count what a decode step reads, and the width.\n"
        "        self.total = None\n"
        "        return self.table == None\n"
        "\n"
        "    def run(self):\n"
        "        # TODO 2: Return the width of the table,\n"
        "        # as a row of the head.\n"
        "        self.table = []\n"
        "        # TODO 3: Build the head.\n"
        "        self.head = None  # reads logits = head(x) later\n"
        "        # then the decoder, whose words name no name\n"
        "        self.bias = None  # TODO 4: Make the bias.\n"
        "        return None\n")
    assert [hints.todo_for_name(step, name) for name in (
        "total", "decode", "width", "table", "row", "head", "logits", "decoder", "graph", "bias", "other")] == [
        1, None, None, 2, 2, 3, None, None, None, 4, None]


def test_todo_labels_name_the_todos_and_the_file():
    """todo_label: one TODO, several, or none known, in the file as the learner sees it (relative to the course)"""
    path = ROOT / "steps" / "step_04_mlp.py"
    assert hints.todo_label(3, path) == "TODO 3 in steps/step_04_mlp.py"
    assert hints.todo_label([1, 3], path) == "TODO 1, 3 in steps/step_04_mlp.py"
    assert hints.todo_label([], path) == hints.todo_label(None, path) == "the TODOs in steps/step_04_mlp.py"
    assert hints.shown("/elsewhere/step_04_mlp.py") == "/elsewhere/step_04_mlp.py"
    assert hints.shown(None) == "your step file"


GRAPH_ERROR = """Failed to create op 'DivOp':
  Inputs:
    x = Value(si64)
Diagnostics:
    Unsafe cast from si64 to f32
"""


@pytest.mark.parametrize(("message", "described"), [
    ("", "ValueError"),
    ("plain words", "ValueError: plain words"),
    ("  first line  \n\n  second line ", "ValueError: first line"),
    ("the cause follows:\n  the cause\n  more", "ValueError: the cause follows: the cause"),
    ("the cause follows:\n  the cause", "ValueError: the cause follows: the cause"),
    ("a colon and nothing after:", "ValueError: a colon and nothing after:"),
    (GRAPH_ERROR, "ValueError: Failed to create op 'DivOp': Unsafe cast from si64 to f32 (Hint: a size read from "
                  "`x.shape` is a Dim (an integer inside MAX's graph), not a Python number; write int(x.shape[-1]) "
                  "where a size meets float math.)"),
    ("Failed:\nDiagnostics:\nthe reason", "ValueError: Failed: the reason"),
    ("Failed:\nDiagnostics:", "ValueError: Failed:"),
    ("Diagnostics:\nnot the reason\nDiagnostics:\nthe reason", "ValueError: Diagnostics: the reason"),
    ("x" * 300, "ValueError: " + "x" * 300),
    ("y" * 301 + "\nmore", "ValueError: " + "y" * 300 + " …"),
], ids=["empty", "one line", "the first line", "a colon then the cause", "a colon then one line", "a colon alone",
        "MAX's diagnostics, a known trap",
        "diagnostics second", "diagnostics last", "the first line's word", "300 characters", "301 characters"])
def test_an_error_is_described_in_one_line(message, described):
    """describe: the kind and the first line (cut at 300 characters), with the line that says why (after MAX's
    "Diagnostics:", or after a first line ending in a colon), and a known trap's lesson"""
    assert hints.describe(ValueError(message)) == described


@pytest.mark.parametrize("size", ["small", "large"])
def test_a_checks_title_is_its_docstrings_first_line_and_its_parameters(request, size):
    """check_title: the docstring's first line and the parameters; the function's name where it has no docstring"""
    assert hints.check_title(request.node) == (
        f"check_title: the docstring's first line and the parameters; the function's name where it has no "
        f"docstring [{size}]")
    assert hints.check_title(SimpleNamespace(function=lambda: None, name="test_bare")) == "test_bare"
    assert hints.check_title(SimpleNamespace(name="README.md::example")) == "README.md::example"  # no function


def test_versions_name_the_releases_a_fault_happened_under(monkeypatch):
    """versions: transformers', torch's and max's releases, leaving out one that is not installed"""
    version = importlib.metadata.version
    assert hints.versions() == (
        f"transformers {version('transformers')}, torch {version('torch')}, max {version('max')}")

    def without_torch(name):
        if name == "torch":
            raise importlib.metadata.PackageNotFoundError(name)
        return version(name)

    monkeypatch.setattr(importlib.metadata, "version", without_torch)
    assert hints.versions() == f"transformers {version('transformers')}, max {version('max')}"


def test_an_error_is_raised_in_a_file_through_its_causes(step, tmp_path):
    """raised_in: the error's traceback, or a cause's or a context's, ran the file's code; never for no file, and a
    cycle of causes ends"""
    where = step.__file__
    inner = raised(step.scale, 2)
    assert hints.raised_in(inner, where) and not hints.raised_in(inner, tmp_path / "other.py")
    assert not hints.raised_in(inner, None)
    for chained in ("cause", "context"):
        outer = RuntimeError("the check's own error")
        setattr(outer, f"__{chained}__", inner)
        assert hints.raised_in(outer, where), chained
    first, second = RuntimeError("first"), RuntimeError("second")
    first.__cause__, second.__cause__ = second, first
    assert not hints.raised_in(first, where)


def _last_course_line(error: BaseException) -> str:
    frame = [frame for frame in traceback.extract_tb(error.__traceback__)
             if Path(frame.filename).resolve().is_relative_to(ROOT) and "site-packages" not in frame.filename][-1]
    return f"{Path(frame.filename).resolve().relative_to(ROOT)}, line {frame.lineno}"


def test_the_courses_own_fault_is_never_the_learners(tmp_path):
    """explain_course_fault: the part of the course that failed (the Hugging Face reference when the error passed
    through transformers, torch or reference.py; the check otherwise), the releases, the course's last line on the
    traceback, and that it is not the learner's code"""
    import torch

    from course.checkpoints import find

    versions, report = hints.versions(), "not your code; please report it to the course's maintainers"
    error = raised(torch.nn.Linear(2, 2), torch.zeros(3))
    assert hints.explain_course_fault(error) == (
        f"the course's Hugging Face reference failed ({versions}): {hints.describe(error)} at "
        f"{_last_course_line(error)} — {report}")
    from transformers import AutoConfig

    error = raised(AutoConfig.for_model, "a_model_type_nobody_has")
    assert hints.explain_course_fault(error) == (
        f"the course's Hugging Face reference failed ({versions}): {hints.describe(error)} at "
        f"{_last_course_line(error)} — {report}")
    error = raised(find, str(tmp_path / "nowhere"))
    assert hints.explain_course_fault(error) == (
        f"the course's check failed ({versions}): {hints.describe(error)} at {_last_course_line(error)} — {report}")
    assert _last_course_line(error).startswith("course/checkpoints.py, line ")
    reference = tmp_path / "reference.py"
    reference.write_text("def run():\n    raise KeyError('h.0.attn')\n")
    error = raised(imported(reference, "scratch_reference").run)
    assert hints.explain_course_fault(error) == (
        f"the course's Hugging Face reference failed ({versions}): KeyError: 'h.0.attn' at "
        f"{_last_course_line(error)} — {report}")
    assert _last_course_line(error).startswith("tests/test_hints.py, line ")
    outside = raised(json.loads, "{")
    outside.__traceback__ = outside.__traceback__.tb_next  # only the json module's own frames
    assert hints.explain_course_fault(outside) == (
        f"the course's check failed ({versions}): {hints.describe(outside)} — {report}")


def test_a_library_inside_the_course_folder_is_not_the_course(tmp_path, monkeypatch):
    """a library installed inside the course's folder (a virtualenv there, as pixi's .pixi/envs) is not the course's
    code: the line names the course's own last line on the traceback"""
    library = tmp_path / ".venv" / "lib" / "python3" / "site-packages" / "somelib.py"
    library.parent.mkdir(parents=True)
    library.write_text("def fail():\n    raise RuntimeError('the library failed')\n")
    ours = tmp_path / "course" / "caller.py"
    ours.parent.mkdir()
    ours.write_text("def call(fail):\n    return fail()\n")
    error = raised(imported(ours, "scratch_caller").call, imported(library, "scratch_somelib").fail)
    error.__traceback__ = error.__traceback__.tb_next  # from the course's file on: not this test's frame
    monkeypatch.setattr(hints, "ROOT", tmp_path)
    assert hints.explain_course_fault(error) == (
        f"the course's check failed ({hints.versions()}): RuntimeError: the library failed at course/caller.py, line 2 "
        "— not your code; please report it to the course's maintainers")
