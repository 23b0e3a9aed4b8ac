"""Turns a learner's mistake into one plain sentence that points at a TODO.

Used by the checks (``tests/``) and the command-line programs, so a learner sees
"MLP.c_fc is still None — TODO 1 in steps/step_04_mlp.py" instead of a traceback.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from course.outline import ROOT

TODO = re.compile(r"#\s*TODO\s+(\d+)")


def shown(path: str | Path | None) -> str:
    """A path as the learner sees it: relative to the course folder when inside it."""
    if path is None:
        return "your step file"
    path = Path(path).resolve()
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def _lines(path: str | Path | None) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except (OSError, TypeError):
        return []


def todo_above(path: str | Path, lineno: int) -> int | None:
    """The number of the closest ``# TODO N`` at or above line ``lineno`` (1-based)."""
    lines = _lines(path)
    for line in reversed(lines[: max(lineno, 0)]):
        if match := TODO.search(line):
            return int(match[1])
        if line.lstrip().startswith(("def ", "class ")):
            return None
    return None


def todos_in(obj) -> list[int]:
    """The TODO numbers written inside a function's or class's source."""
    try:
        source, _ = inspect.getsourcelines(obj)
    except (OSError, TypeError):
        return []
    return [int(m[1]) for line in source if (m := TODO.search(line))]


def todo_for_name(path: str | Path, name: str) -> int | None:
    """The TODO that creates ``name``: above the line that assigns it, or naming it."""
    lines = _lines(path)
    assign = re.compile(rf"(self\.)?\b{re.escape(name)}\b\s*(:[^=]*)?=(?!=)")
    for number, line in enumerate(lines, 1):
        if assign.search(line.split("#")[0]):
            if (todo := todo_above(path, number)) is not None:
                return todo
    mentions = re.compile(rf"\b{re.escape(name)}\b")
    current = None
    for line in lines:
        if match := TODO.search(line):
            current = int(match[1])
        if current is not None and line.lstrip().startswith("#") and mentions.search(line):
            return current
        if not line.lstrip().startswith("#"):
            current = None
    return None


def todo_label(numbers: list[int] | int | None, path: str | Path) -> str:
    """``TODO 1 in steps/step_04_mlp.py`` (or ``TODO 1, 3 …``, or ``the TODOs in …``)."""
    if isinstance(numbers, int):
        numbers = [numbers]
    if not numbers:
        return f"the TODOs in {shown(path)}"
    return f"TODO {', '.join(str(n) for n in numbers)} in {shown(path)}"


def explain_exception(error: BaseException, step_file: str | Path | None) -> str:
    """One sentence for an exception raised while running a learner's step.

    Points at the learner's line and its TODO. When the error comes from using a
    value that is still ``None`` (a stub left as it was), it names that value and
    the TODO that should have set it instead, which is usually an earlier one.
    """
    kind = type(error).__name__
    message = str(error).strip().splitlines()
    first = message[0] if message else ""
    if len(first) > 300:
        first = first[:300] + " …"
    text = f"{kind}: {first}" if first else kind
    if step_file is None:
        return text
    step_file = Path(step_file).resolve()
    frames = [
        (tb.tb_frame, tb.tb_lineno)
        for tb in _walk(error.__traceback__)
        if Path(tb.tb_frame.f_code.co_filename).resolve() == step_file
    ]
    if not frames:
        return text
    frame, lineno = frames[-1]
    where = f"line {lineno}, in {frame.f_code.co_name}"
    if "None" in text:
        for name in _none_values(frame):
            todo = todo_for_name(step_file, name.removeprefix("self."))
            if todo is not None:
                return f"`{name}` is still None — TODO {todo} in {shown(step_file)} ({kind} at {where})"
    todo = todo_above(step_file, lineno)
    suffix = f" (TODO {todo})" if todo is not None else ""
    return f"{text} — raised at {shown(step_file)}, {where}{suffix}"


def _walk(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


def _none_values(frame) -> list[str]:
    """Local variables, then attributes of ``self``, that are None in a frame."""
    names = [name for name, value in frame.f_locals.items() if value is None]
    owner = frame.f_locals.get("self")
    if owner is not None and hasattr(owner, "__dict__"):
        names += [f"self.{name}" for name, value in vars(owner).items() if value is None]
    return names
