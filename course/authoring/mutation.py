"""Mutation testing of the course's own code: would a check say ✗ had this code been wrong?

A mutant is a small change to one function (``<`` for ``<=``, an argument dropped,
``None`` for a value, a string changed); it is *killed* when one of the tests that run
that function fails on it, and it *survives* when they all still pass. Each surviving
mutant is either killed by a new or sharper check of what a user sees, or listed in
:data:`EQUIVALENT` with one line saying why no test should see it::

    python -m course.authoring.mutation                         # every target; exit 1 on a survivor
    python -m course.authoring.mutation course/checkpoints.py   # one target
    python -m course.authoring.mutation --write                 # and rewrite the summary the appendix shows
    python -m course.authoring.mutation course/weights.py --write   # its lines only; the others' kept
    pixi run -e mutation mutation [--write]                     # the same, with pixi

The tool is mutmut 3 (``pip install -e .[mutation]``). For each target this module:

* copies the working tree (``git ls-files``: tracked and untracked files, not the ignored
  ones) into ``.mutation/<target>/``, so that no mutant ever reaches the working tree,
  and gives that copy a ``[tool.mutmut]`` section: the target alone is mutated, and
  only its mapped tests (:data:`TARGETS`, with the equivalent mutants' list, in
  ``course/authoring/mutation_targets.py``) run;
* lists the mutants and sets aside those that only reword an error message (a string
  inside ``raise SomeError(...)``, see :func:`rewords_a_message`): the checks match the
  words they need (a file's name, the offending value), never a whole sentence;
* runs ``mutmut run`` on the rest. mutmut maps each function to the tests that run it,
  and runs only those on each of its mutants.

mutmut forks a process per mutant, and MAX does not survive a fork once it is loaded
(measured: a forked child's first eager op hangs). So the copy runs mutmut's fork
server, warmed with the imports that do survive one (NumPy, PyTorch, transformers,
tokenizers: ``mutation_preload.txt``), and each mutant loads MAX anew; a small pytest
plugin restores the SIGINT handler that the fork server turns off, which the course
needs for fast eager ops (``course/runtime.py``).

A solution file (``solutions/step_13_generation.py``) is a target too. Its lines inside an
``ANCHOR: name | stub: ...`` block are the learner's TODO code, counted apart from the given
code around them: a TODO's surviving mutant is a mistake the step's check would not name.
Tests import a solution as a top-level module (``step_13_generation``, with ``solutions/`` on
``sys.path``), while mutmut names a mutant by its file's path; so the copy keeps the solutions
in ``src/``, whose prefix mutmut drops, with ``solutions`` a link to it.

The summary (``book/src/mutation-summary.txt``, shown in the instructors' appendix)
names each target with the sha256 of the code it was measured on. ``--status`` says, for each
target, its verdict, the commit whose summary recorded it, and whether the code has changed
since; ``tests/test_mutation.py`` reports a changed target as a warning (so that an edit to a
solution leaves the suite green), and fails on it with ``COURSE_STRICT_MUTATION=1``.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from course.authoring.mutation_targets import EQUIVALENT, TARGETS, UNTESTED
from course.outline import ROOT, SOLUTIONS

#: Where the copies live (ignored by git).
WORK = ROOT / ".mutation"
#: What the instructors' appendix shows.
SUMMARY = ROOT / "book" / "src" / "mutation-summary.txt"


#: The reason given for every mutant that :func:`rewords_a_message` sets aside.
WORDING = ("changes only the wording of an error message or a help text: the checks match its names and values, not "
           "its prose")

#: Imports that survive a fork (MAX does not): loaded once by mutmut's fork server.
PRELOAD = ("numpy", "torch", "transformers", "transformers.models.gpt2.modeling_gpt2",
           "transformers.models.llama.modeling_llama", "safetensors.numpy", "tokenizers", "huggingface_hub")

#: A pytest plugin for the copy: mutmut's fork server ignores SIGINT, and course.runtime installs its
#: fast-eager-op handler only over Python's default one; and two workers' PyTorch thread pools, each as wide as
#: the machine, spin against each other (three small training runs took 254 s beside a run's two workers, 2 s alone).
PLUGIN = '''"""Loaded with -p before the course's conftest: SIGINT back to Python's default handler, and PyTorch
on one thread: mutmut runs a worker per core, and more threads in each only spin against the other's."""
import signal

import torch

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
torch.set_num_threads(1)
'''

#: mutmut's verdicts, grouped as the summary counts them.
COLUMNS = ("mutants", "killed", "equivalent", "survived", "timed out", "no tests", "other")
#: The verdicts that need nothing more: a test failed (or hung, which a check reports too), or a reason is given.
SETTLED = ("killed", "timeout", "equivalent", "untested")
#: The mutants only a GPU machine could see (mutation_targets.UNTESTED): not run here, counted under "other", and
#: listed last, each with the check that would kill it.
UNRUN = ("equivalent", "untested")


@dataclass
class Mutant:
    name: str  # mutmut's: course.checkpoints.x_find__mutmut_12
    function: str  # x_find
    before: str  # the changed line as written (stripped), or "" when the change adds or removes lines
    after: str
    diff: str
    status: str = "not run"  # mutmut's verdict, or "equivalent"
    reason: str = ""
    todo: int | None = None  # in a solution, the TODO whose code (an ANCHOR ... | stub: block) it changes


@dataclass
class Result:
    target: str
    digest: str
    mutants: list[Mutant] = field(default_factory=list)
    seconds: float | None = None  # the whole run's time; with --last, the last whole run's (None if unknown)
    finished: float | None = None  # when that run ended (seconds since the epoch; None if unknown)

    def count(self, column: str, todo: bool = False) -> int:
        """How many of the given code's mutants (with ``todo``, of the TODO code's) a column counts."""
        mutants = [mutant for mutant in self.mutants if (mutant.todo is not None) is todo]
        if column == "mutants":
            return len(mutants)
        known = {"killed", "equivalent", "survived", "timeout", "no tests"}
        name = {"timed out": "timeout"}.get(column, column)
        if column == "other":
            return sum(mutant.status not in known for mutant in mutants)
        return sum(mutant.status == name for mutant in mutants)


def digest(target: str, copy: Path | None = None) -> str:
    """The first 12 hex digits of the sha256 of a target's code, in the course or in the mutation ``copy``: what the
    summary records, what the staleness test compares. A Python file's code is its syntax tree without its
    triple-quoted docstrings: mutmut mutates no triple-quoted string, no comment and no layout, so editing those
    leaves every mutant, and every verdict, as it was. (A one-line docstring in plain quotes is mutated, and
    counts.) A solution's every byte counts: its ``ANCHOR`` comments decide which of its mutants are TODO code."""
    source = (ROOT / target if copy is None else copy / _in_copy(target)).read_bytes()
    if not target.endswith(".py") or target.startswith("solutions/"):
        return hashlib.sha256(source).hexdigest()[:12]
    text = source.decode("utf-8")
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)
                    and re.match(r"[rRuU]?(?:'\'\'|\"\"\")", ast.get_source_segment(text, first) or "")):
                node.body[0] = ast.Pass()
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()[:12]


# --- which mutants reword a message -----------------------------------------------------------


#: Exceptions whose name says nothing of an error: the programs' expected failure (course.programs.generate.Stop).
MESSAGE_CALLS = ("Stop",)


def _message_strings(tree: ast.AST) -> set[int]:
    """ids of the str constants that are the text of an exception's message (``raise X("...")``,
    ``SomeError(f"...")``, ``Stop(...)``), of a help text (``add_argument(..., help="...")``), of a spinner's
    line (rich's ``console.status("...")``, drawn on a terminal only and gone when the work ends) or of a program's
    note on stderr (``err.print("...")``): an
    argument itself, a literal part of an f-string argument, or a term of a ``+`` of them. A string the
    message's code uses (``.split(":")``) is not one."""
    found: set[int] = set()

    def text(node: ast.AST) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(id(node))
        elif isinstance(node, ast.JoinedStr):
            found.update(id(part) for part in node.values if isinstance(part, ast.Constant))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            text(node.left)
            text(node.right)

    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else ""
        if name.endswith(("Error", "Exception")) or name in MESSAGE_CALLS:
            for argument in [*node.args, *(keyword.value for keyword in node.keywords)]:
                text(argument)
        if isinstance(node.func, ast.Attribute) and (node.func.attr == "status" or (  # rich's spinner, on a terminal
                node.func.attr == "print" and isinstance(node.func.value, ast.Name) and node.func.value.id == "err")):
            for argument in node.args:  # and a program's notes on stderr (err.print)
                text(argument)
        for keyword in node.keywords:
            if keyword.arg in ("help", "description"):  # argparse's help texts
                text(keyword.value)
    return found


def rewords_a_message(original: str, mutated: str) -> bool:
    """Whether ``mutated`` (a function's source) differs from ``original`` only in the text of strings that
    are part of an exception's message: the same code, the same values, other words."""
    try:
        a, b = ast.parse(original), ast.parse(mutated)
    except SyntaxError:
        return False
    messages = _message_strings(a)
    changed = False
    for x, y in zip(ast.walk(a), ast.walk(b), strict=False):
        if type(x) is not type(y):
            return False
        if isinstance(x, ast.Constant):
            if x.value == y.value and type(x.value) is type(y.value):
                continue
            if id(x) not in messages or not isinstance(y.value, str):
                return False
            changed = True
            continue
        fields = [(name, value) for name, value in ast.iter_fields(x) if not isinstance(value, (ast.AST, list))]
        if fields != [(name, value) for name, value in ast.iter_fields(y) if not isinstance(value, (ast.AST, list))]:
            return False
        for name, value in ast.iter_fields(x):
            if isinstance(value, list) and len(value) != len(getattr(y, name)):
                return False
    return changed and len(list(ast.walk(a))) == len(list(ast.walk(b)))


# --- the copy and the run ----------------------------------------------------------------------


def _slug(target: str) -> str:
    return target.removesuffix(".py").replace("/", "-")


def _in_copy(target: str) -> str:
    """The target's path in the copy, as mutmut sees it: a solution lies in ``src/`` (see the module's docstring)."""
    return "src/" + target.removeprefix("solutions/") if target.startswith("solutions/") else target


def todo_lines(source: str) -> dict[int, int]:
    """line number (1-based) -> TODO number, for each line of a solution's TODO code: inside an
    ``# ANCHOR: name | stub: ...`` block, whose TODO is the closest ``# TODO N:`` above it."""
    from course.authoring.render import STUB_OPEN, TODO_LINE

    found, todo, closing = {}, None, None
    for number, line in enumerate(source.splitlines(), 1):
        if closing is not None:
            if line.strip() == closing:
                closing = None
            elif todo is not None:
                found[number] = todo
        elif match := TODO_LINE.match(line):
            todo = int(match[1])
        elif match := STUB_OPEN.match(line):
            closing = f"# ANCHOR_END: {match['name']}"
    return found


def _function_lines(source: str) -> dict[str, int]:
    """mutmut's name for each function and method (``x_find``, ``xǁCheckpointǁcheck``) -> its ``def`` line."""
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found[f"x_{node.name}"] = node.lineno
        elif isinstance(node, ast.ClassDef):
            found |= {f"xǁ{node.name}ǁ{item.name}": item.lineno for item in node.body
                      if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return found


def _changed_line(original: str, diff: str, start: int) -> int | None:
    """The file's line number of a mutant's first changed line: ``start`` is the function's ``def`` line."""
    lines = diff.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith("@@")), None)
    if first is None:
        return None
    offset = int(re.match(r"@@ -(\d+)", lines[first])[1]) - 1  # the hunk's first line, in the function's text
    for line in lines[first + 1:]:  # the context lines before the first change
        if line.startswith(("-", "+")):
            break
        offset += 1
    defined = next(i for i, line in enumerate(original.splitlines()) if line.lstrip().startswith(("def ", "async def ")))
    return start + offset - defined


def _tracked_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    return [name for name in listed if name and (ROOT / name).is_file()]


def prepare(target: str, work: Path) -> None:
    """A fresh copy of the working tree in ``work``, configured to mutate ``target`` under its tests."""
    if work.exists():
        shutil.rmtree(work)
    files = _tracked_files()
    for name in files:
        destination = work / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, destination)
    source = _in_copy(target).split("/")[0]
    if source == "src":  # the solutions in src/, under the name tests import them by; solutions/ a link to it
        (work / "solutions").rename(work / "src")
        for folder in (work, work / "mutants"):
            folder.mkdir(exist_ok=True)
            (folder / "solutions").symlink_to("src", target_is_directory=True)
    # mutmut runs the tests in mutants/, a copy of these folders and top-level files (README.md, pixi.toml: the
    # pages' and environment's checks read them; a solution's src/ is its source, solutions/ a link)
    also = sorted({name.split("/")[0] for name in files}
                  - {source, ".ci", ".github", *(("solutions",) if source == "src" else ())})
    settings = {
        "source_paths": [source],
        "only_mutate": [_in_copy(target)],
        "also_copy": [*also, "mutation_plugin.py", "mutation_preload.txt"],
        "pytest_add_cli_args": ["-p", "mutation_plugin", "-p", "no:cacheprovider"],
        "pytest_add_cli_args_test_selection": list(TARGETS[target]),
        "process_isolation": "forkserver",
        "forkserver_warmup": "import",
        "preload_modules_file": "mutation_preload.txt",
        "use_git_change_detection": False,
        # mutmut's time limit is 15 x (the tests' own time + this): each mutant also loads MAX and collects its tests.
        "timeout_constant": 10.0,
    }
    lines = ["", "[tool.mutmut]", *(f"{key} = {json.dumps(value)}" for key, value in settings.items())]
    with open(work / "pyproject.toml", "a", encoding="utf-8") as pyproject:
        pyproject.write("\n".join(lines) + "\n")
    (work / "mutation_plugin.py").write_text(PLUGIN, encoding="utf-8")
    (work / "mutation_preload.txt").write_text("\n".join(PRELOAD) + "\n", encoding="utf-8")


@contextlib.contextmanager
def _inside(work: Path):
    """mutmut reads its settings from the working directory's pyproject.toml, once per process."""
    from mutmut.configuration import reset_config

    before = Path.cwd()
    os.chdir(work)
    reset_config()
    try:
        yield
    finally:
        os.chdir(before)
        reset_config()


def _changed_lines(diff: str) -> tuple[str, str]:
    removed = [line[1:].strip() for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    return (removed[0] if len(removed) == 1 else " / ".join(removed)), (added[0] if len(added) == 1 else " / ".join(added))


def list_mutants(target: str, work: Path) -> list[Mutant]:
    """Every mutant mutmut makes of ``target`` (as ``mutmut run`` will), with its diff and, where it is
    equivalent, why."""
    import difflib
    import textwrap

    import libcst as cst

    with _inside(work):  # mutmut reads its settings when it is imported
        from mutmut.__main__ import mutate_file_contents
        from mutmut.mutation.diff_apply import read_mutant_function, read_original_function
        from mutmut.utils.format_utils import get_mutant_name

        path = _in_copy(target)
        text = Path(path).read_text(encoding="utf-8")
        mutated = mutate_file_contents(path, text, None, None)
        module = cst.parse_module(mutated.code)
        todos = todo_lines(text) if target.startswith("solutions/") else {}
        starts = _function_lines(text)
        found = []
        for name in mutated.mutant_names:
            key = get_mutant_name(Path(path), name)
            original, changed = (textwrap.dedent(cst.Module([read(module, key)]).code).strip()
                                 for read in (read_original_function, read_mutant_function))
            diff = "\n".join(difflib.unified_diff(original.splitlines(), changed.splitlines(), target, target,
                                                  lineterm=""))
            before, after = _changed_lines(diff)
            mutant = Mutant(key, name.rsplit("__mutmut_", 1)[0], before, after, diff)
            if todos and mutant.function in starts:
                mutant.todo = todos.get(_changed_line(original, diff, starts[mutant.function]))
            if rewords_a_message(original, changed):
                mutant.status, mutant.reason = "equivalent", WORDING
            elif (target, mutant.function, before, after) in EQUIVALENT:
                mutant.status, mutant.reason = "equivalent", EQUIVALENT[target, mutant.function, before, after]
            elif (target, mutant.function, before, after) in UNTESTED:
                mutant.status, mutant.reason = "untested", UNTESTED[target, mutant.function, before, after][0]
            found.append(mutant)
    return found


def run(target: str, children: int, last: bool = False) -> Result:
    """Mutates ``target`` under its tests, or with ``last``, reads the verdicts of the last run (stopped or not)."""
    work = WORK / _slug(target)
    started = time.perf_counter()
    if last:
        if not (work / _in_copy(target)).is_file() or digest(target, work) != digest(target):
            raise SystemExit(f"the last run in {work} mutated another version of {target}: run it again")
    else:
        prepare(target, work)
    result = Result(target, digest(target), list_mutants(target, work))
    names = [mutant.name for mutant in result.mutants if mutant.status not in UNRUN]
    if last:
        _read_verdicts(target, work, result)
        timed = work / "run-seconds.txt"  # written when a run ends
        if timed.is_file():
            result.seconds, result.finished = float(timed.read_text()), timed.stat().st_mtime
        return result
    print(f"{target}: {len(result.mutants)} mutants, {len(result.mutants) - len(names)} reword a message or are "
          f"listed as equivalent; mutmut runs the other {len(names)} under {', '.join(TARGETS[target])}", flush=True)
    mutmut = Path(sys.executable).with_name("mutmut")
    if names:
        with open(work / "mutmut.log", "w", encoding="utf-8") as log:  # mutmut's own progress, for a post-mortem
            ran = subprocess.run([str(mutmut), "run", "--max-children", str(children), *names], cwd=work,
                                 stdout=log, stderr=subprocess.STDOUT, check=False)
        if ran.returncode != 0:
            raise SystemExit(f"mutmut failed on {target} (exit {ran.returncode}); its output: {work / 'mutmut.log'}")
        _read_verdicts(target, work, result)
    result.seconds, result.finished = time.perf_counter() - started, time.time()
    (work / "run-seconds.txt").write_text(f"{result.seconds:.0f}\n", encoding="utf-8")
    return result


def _read_verdicts(target: str, work: Path, result: Result) -> None:
    from mutmut.stats import status_by_exit_code

    meta = json.loads((work / "mutants" / f"{_in_copy(target)}.meta").read_text(encoding="utf-8"))
    for mutant in result.mutants:
        if mutant.status not in UNRUN:
            code = meta["exit_code_by_key"].get(mutant.name)
            status = status_by_exit_code[code]
            # the mutant crashed the tests' process (MAX segfaults on ids or a cache of the wrong shape, llama.cpp
            # aborts past its context): the run ends red, as when a check fails
            crashed = status == "segfault" or (status == "suspicious" and code == -signal.SIGABRT)
            mutant.status = "killed" if crashed else status


# --- the report ------------------------------------------------------------------------------------


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60)} s"


#: The summary's section headings, after its table.
EQUIVALENT_HEADING, LEFT_HEADING = "Equivalent, with the reason:", "Not killed, not explained:"
UNTESTED_HEADING = "Untested here, as only a GPU machine could see them, each with the check that would kill it there:"


def summary(results: list[Result], children: int, kept: dict[str, list[list[str]]] | None = None,
            tool: str = "mutmut") -> str:
    """The summary of ``results``, each row with its run's time and date, in TARGETS' order; ``kept``: for the
    targets not run this time, their lines of the summary as it was (:func:`kept_lines`), kept as they were;
    ``tool``: the mutation tool and its version, as the header names it."""
    kept = kept or {}
    width = max(len(name) for name in [*TARGETS, *(f"solutions/{path.name}" for path in SOLUTIONS.glob("*.py"))])
    rows, equivalent, left = {}, {}, {}
    for result in results:
        when = time.strftime("%Y-%m-%d", time.localtime(result.finished)) if result.finished else "(date unknown)"
        took = _minutes(result.seconds) if result.seconds is not None else "(unknown)"  # fits the column
        counts = "  ".join(str(result.count(column)).rjust(len(column)) for column in COLUMNS)
        rows[result.target] = [f"{result.target.ljust(width)}  {result.digest}  {counts}  {took.rjust(12)}  {when}"]
        if result.count("mutants", todo=True):  # a solution's TODO code, on a row of its own
            rows[result.target].append(_todo_row(width, [result.count(column, todo=True) for column in COLUMNS]))
        wording = sum(mutant.reason == WORDING for mutant in result.mutants)
        equivalent[result.target] = [f"  {result.target}: {wording} mutants {WORDING}"] if wording else []
        equivalent[result.target] += [f"  {result.target} {_where(mutant)}: `{mutant.before}` -> `{mutant.after}`: "
                                      f"{mutant.reason}" for mutant in result.mutants
                                      if mutant.status == "equivalent" and mutant.reason != WORDING]
        unrun = sum(mutant.status == "not checked" for mutant in result.mutants)
        left[result.target] = [f"  {result.target}: {unrun} mutants not run (the run stopped before them; run it again)"] if unrun else []
        left[result.target] += [f"  {result.target} {_where(mutant)} ({mutant.status}): `{mutant.before}` -> "
                                f"`{mutant.after}`" for mutant in result.mutants
                                if mutant.status not in (*SETTLED, "not checked")]
    for target, (old_rows, old_equivalent, old_left) in kept.items():
        # the rows as they were, their first column padded to this summary's width
        digest = len(old_rows[0]) - len(old_rows[0][len(target):].lstrip())  # where the sha256 column starts
        rows.setdefault(target, [f"{target.ljust(width)}  {old_rows[0][digest:]}",
                                 *(_todo_row(width, row.split()[3:]) for row in old_rows[1:])])
        equivalent.setdefault(target, old_equivalent)
        left.setdefault(target, old_left)
    order = [target for target in TARGETS if target in rows]
    lines = [f"python -m course.authoring.mutation --write: {tool}, {children} workers on "
             f"{os.cpu_count()} cores; each target as its last run found it, with that run's time and date (\"other\" "
             "counts the mutants a stopped run never ran, and those only a GPU machine could see, listed last)", "",
             f"{'file'.ljust(width)}  sha256        " + "  ".join(COLUMNS) + "      run time  date"]
    lines += [row for target in order for row in rows[target]]
    lines += ["", EQUIVALENT_HEADING, *(line for target in order for line in equivalent[target])]
    unexplained = [line for target in order for line in left[target]]
    lines += ["", LEFT_HEADING if unexplained else f"{LEFT_HEADING} none", *unexplained]
    lines += ["", UNTESTED_HEADING, *(f"  {target} {function}: `{before}` -> `{after}`: {reason}; {check}"
                                      for target in order for (file, function, before, after), (reason, check)
                                      in sorted(UNTESTED.items()) if file == target)]  # sorted: the same each run
    return "\n".join(lines) + "\n"


def _todo_row(width: int, counts: list) -> str:
    """The table's row for a solution's TODO code: its counts, under the columns."""
    return f"{'  its TODO code'.ljust(width)}  {'':12}  " + "  ".join(str(n).rjust(len(c)) for n, c in zip(counts, COLUMNS))


def kept_lines(text: str, targets: list[str]) -> dict[str, list[list[str]]]:
    """From a summary's text, each of ``targets``' lines: its table rows, its equivalents, its survivors."""
    text = text.partition(f"\n{UNTESTED_HEADING}")[0]  # made anew from mutation_targets each time
    table, _, rest = text.partition(f"\n{EQUIVALENT_HEADING}\n")
    equivalent, _, left = rest.partition(f"\n{LEFT_HEADING}")
    table_lines = table.splitlines()
    found = {}
    for target in targets:
        rows = []
        for i, line in enumerate(table_lines):
            if line.split()[:1] == [target]:
                rows = [line, *(row for row in table_lines[i + 1 : i + 2] if row.startswith("  its TODO code"))]
        if rows:
            mine = lambda line: line.startswith((f"  {target} ", f"  {target}:"))  # noqa: E731 - one use
            found[target] = [rows, [line for line in equivalent.splitlines() if mine(line)],
                             [line for line in left.splitlines() if mine(line)]]
    return found


def _where(mutant: Mutant) -> str:
    """The mutated function, and in a solution's TODO code, its TODO."""
    return mutant.function if mutant.todo is None else f"{mutant.function} (TODO {mutant.todo})"


def recorded() -> dict[str, str]:
    """target -> the sha256 digest the summary records for it."""
    found = {}
    if SUMMARY.is_file():
        for line in SUMMARY.read_text(encoding="utf-8").splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] in TARGETS and len(parts[1]) == 12 and parts[0] not in found:
                found[parts[0]] = parts[1]  # the table's line: the file, its sha256, the counts
    return found


@dataclass
class Status:
    target: str
    verdict: str  # "0 survivors of 580 (34 equivalent)", or "never measured"
    commit: str  # the commit whose summary recorded this verdict, with its date, or why there is none
    changed: bool  # whether the code differs from the code measured (True where it was never measured)


def measured_at(found_digest: str) -> str:
    """The commit that first recorded ``found_digest`` in the summary, as ``abc1234 (2026-11-27)``; or why none is
    known: the line is not committed yet, or there is no git history."""
    try:
        log = subprocess.run(["git", "log", "--reverse", "--format=%h (%cs)", "-S", found_digest, "--",
                              str(SUMMARY.relative_to(ROOT))], cwd=ROOT, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "(no git history)"
    if log.returncode != 0:
        return "(no git history)"
    return log.stdout.splitlines()[0] if log.stdout.strip() else "(not committed yet)"


def status() -> list[Status]:
    """Each target's verdict as the summary records it, the commit it was measured at, and whether its code has
    changed since: what ``--status`` prints and what tests/test_mutation.py reports."""
    rows = {}
    if SUMMARY.is_file():
        for line in SUMMARY.read_text(encoding="utf-8").splitlines():
            parts = line.split()
            if len(parts) >= 2 + len(COLUMNS) and parts[0] in TARGETS and len(parts[1]) == 12 and parts[0] not in rows:
                rows[parts[0]] = dict(zip(("digest", *COLUMNS), parts[1:]))
    found = []
    for target in TARGETS:
        row = rows.get(target)
        if row is None:
            found.append(Status(target, "never measured", "(none)", True))
            continue
        left = int(row["survived"]) + int(row["no tests"]) + int(row["other"])
        verdict = (f"{left} survivor{'s' * (left != 1)} of {row['mutants']} ({row['equivalent']} equivalent, "
                   f"{row['timed out']} timed out)")
        found.append(Status(target, verdict, measured_at(row["digest"]), row["digest"] != digest(target)))
    return found


def status_table(statuses: list[Status]) -> str:
    """``--status``'s table: a line a target, the changed ones marked."""
    width = max(len(s.target) for s in statuses)
    lines = [f"{'file'.ljust(width)}  {'changed since':13}  {'measured at':24}  verdict"]
    lines += [f"{s.target.ljust(width)}  {('yes' if s.changed else 'no'):13}  {s.commit:24}  {s.verdict}"
              for s in statuses]
    stale = sum(s.changed for s in statuses)
    lines.append(f"{stale} of {len(statuses)} targets changed since their mutation run"
                 + (": rerun them with `python -m course.authoring.mutation FILE ... --write`" if stale else ""))
    return "\n".join(lines) + "\n"


def missing_tools() -> str | None:
    """What the tool needs and is not installed (mutmut, and libcst, with which mutmut reads the code), said with
    how to install it; None when both are there."""
    import importlib.util

    missing = [name for name in ("mutmut", "libcst") if importlib.util.find_spec(name) is None]
    if missing:
        return f"{' and '.join(missing)} not installed: pip install -e \".[mutation]\" (or pixi run -e mutation ...)"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.authoring.mutation", description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="*", help=f"the files to mutate (default: all of {', '.join(TARGETS)})")
    parser.add_argument("--write", action="store_true",
                        help=f"rewrite {SUMMARY.relative_to(ROOT)}: the targets run, and the others' lines as they were")
    parser.add_argument("--children", type=int, default=os.cpu_count() or 2, help="mutants run at once")
    parser.add_argument("--last", action="store_true",
                        help="run nothing: report (and with --write, record) the verdicts of the last run in .mutation/")
    parser.add_argument("--status", action="store_true",
                        help="run nothing: each target's recorded verdict, the commit it was measured at, and whether "
                             "its code has changed since (no mutmut needed)")
    args = parser.parse_args(argv)
    if args.status:
        statuses = status()
        print(status_table(statuses), end="")
        return 0
    if problem := missing_tools():
        parser.error(problem)
    unknown = [target for target in args.targets if target not in TARGETS]
    if unknown:
        parser.error(f"not a target: {', '.join(unknown)} (targets: {', '.join(TARGETS)})")
    results = [run(target, args.children, args.last) for target in args.targets or TARGETS]
    others = [target for target in TARGETS if target not in {result.target for result in results}]
    old = SUMMARY.read_text(encoding="utf-8") if SUMMARY.is_file() else ""
    # the targets not run: as the summary has them
    text = summary(results, args.children, kept_lines(old, others), f"mutmut {importlib.metadata.version('mutmut')}")
    print()
    print(text, end="")
    for result in results:
        for mutant in result.mutants:
            if mutant.status not in SETTLED:
                print(f"\n{mutant.name} ({mutant.status}):\n{mutant.diff}")
    if args.write:
        SUMMARY.write_text(text, encoding="utf-8")
        print(f"wrote {SUMMARY.relative_to(ROOT)}")
    return 1 if any(mutant.status not in SETTLED for result in results for mutant in result.mutants) else 0


if __name__ == "__main__":
    sys.exit(main())
