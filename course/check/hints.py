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
    """The TODO that creates ``name``: above the line that assigns it, or naming it. None for a name that only
    given code assigns (``self.decode = None`` until a graph is compiled), whatever a TODO's words mention."""
    lines = _lines(path)
    assign = re.compile(rf"(self\.)?\b{re.escape(name)}\b\s*(:[^=]*)?=(?!=)")
    assigned = False
    for number, line in enumerate(lines, 1):
        if assign.search(line.split("#")[0]):
            if (todo := todo_above(path, number)) is not None:
                return todo
            assigned = True
    if assigned:
        return None
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
    text = describe(error)
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


#: Mistakes whose MAX message is cryptic, recognised by a line of it: (pattern, lesson).
TRAPS = [
    (
        re.compile(r"Unsafe cast from si64 to f(16|32|64)"),
        "a size read from `x.shape` is a Dim (an integer inside MAX's graph), not a Python "
        "number; write int(x.shape[-1]) where a size meets float math",
    ),
    (
        re.compile(r"\[reshape\] input and output number of elements must match"),
        "a reshape keeps every element: the sizes asked for must multiply to the input's, so a projection "
        "[N, heads × head_dim] splits into that projection's own number of heads",
    ),
]


def describe(error: BaseException) -> str:
    """``Kind: message`` in one line, keeping the line where MAX says *why*.

    MAX's graph errors put the cause on a later line: "Failed to create op 'DivOp':",
    then the inputs, then "Diagnostics:" and the reason. The reason is kept, and a
    known trap gets its lesson.
    """
    kind = type(error).__name__
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if not lines:
        return kind
    first = lines[0] if len(lines[0]) <= 300 else lines[0][:300] + " …"
    reason = None
    if "Diagnostics:" in lines[1:]:
        after = lines.index("Diagnostics:", 1) + 1
        reason = lines[after] if after < len(lines) else None
    elif first.endswith(":") and len(lines) > 1:
        reason = lines[1]
    text = f"{kind}: {first} {reason}" if reason else f"{kind}: {first}"
    for pattern, lesson in TRAPS:
        if pattern.search(str(error)):
            text += f" (Hint: {lesson}.)"
            break
    return text


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


def check_title(item) -> str:
    """A check's name as the learner sees it: its docstring's first line, and its parameters.

    ``MLP matches Hugging Face GPT2MLP on the same weights [small]``
    """
    doc = getattr(getattr(item, "function", None), "__doc__", None)
    title = (doc or item.name).strip().splitlines()[0]
    callspec = getattr(item, "callspec", None)
    return f"{title} [{callspec.id}]" if callspec else title


# --- the course's own failures --------------------------------------------------------

#: Where a learner reports a fault in the course itself.
REPORT_TO = "please report it to the course's maintainers"


def versions() -> str:
    """``transformers 5.12.1, max 26.7.0``: the releases a course fault happened under."""
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for package in ("transformers", "torch", "max"):
        try:
            found.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            pass
    return ", ".join(found)


def raised_in(error: BaseException, path: str | Path | None) -> bool:
    """Whether any frame of ``error``'s traceback (or its causes) runs code from ``path``."""
    if path is None:
        return False
    path = Path(path).resolve()
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if any(Path(tb.tb_frame.f_code.co_filename).resolve() == path for tb in _walk(error.__traceback__)):
            return True
        error = error.__cause__ or error.__context__
    return False


def explain_course_fault(error: BaseException) -> str:
    """One line for an exception the course raised itself (reference, harness, conversion).

    It must never read as the learner's mistake: it names the part of the course
    that failed, the library versions, and says plainly that it is not their code.
    """
    frames = [Path(tb.tb_frame.f_code.co_filename) for tb in _walk(error.__traceback__)]
    library = any(part in ("transformers", "torch") for frame in frames for part in frame.parts)
    part = "Hugging Face reference" if library or any(f.name == "reference.py" for f in frames) else "check"
    ours = [tb for tb in _walk(error.__traceback__) if _inside_course(tb.tb_frame.f_code.co_filename)]
    where = f" at {shown(ours[-1].tb_frame.f_code.co_filename)}, line {ours[-1].tb_lineno}" if ours else ""
    return (
        f"the course's {part} failed ({versions()}): {describe(error)}{where} "
        f"— not your code; {REPORT_TO}"
    )


def _inside_course(filename: str) -> bool:
    try:
        Path(filename).resolve().relative_to(ROOT)
    except ValueError:
        return False
    return "site-packages" not in filename


