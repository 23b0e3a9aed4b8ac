"""How a check loads, builds and runs the code under test, and how it compares numbers.

Every learner mistake ends in :func:`fail`, a plain one-line reason without a
traceback; the reason names the TODO to look at.

Modules run eagerly (``module(x)``), never through ``Module.compile``: measured on
step 04, a warm eager forward costs 0.04-0.4 s while a compiled graph costs 3 s to
load per shape even when cached (the book's log, 2026-11-22, "Why the checks run MAX eagerly").
"""

from __future__ import annotations

import dataclasses
import contextlib
import importlib
import importlib.util
import inspect
import locale
import re
import sys
import types
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pytest

from course import runtime
from course.check.hints import explain_exception, shown, todo_for_name, todo_label, todos_in
from course.outline import OUTLINE, SOLUTIONS, step_path

# --- comparing numbers -------------------------------------------------------------

#: float32 tolerances against Hugging Face, |actual - expected| <= ATOL + RTOL * |expected|.
#: MAX and PyTorch sum in different orders, so float32 results differ by ~1e-6
#: relative (measured worst cases are quoted in each step's test file). These are
#: 10-100x above that noise and far below the smallest planted bug we test for.
ATOL = 1e-4
RTOL = 1e-4

#: max |Δ| of every comparison in the running check, shown on its ✓ line.
measured: list[float] = []


def fail(reason: str):
    """Fails the running check with a plain reason and no traceback."""
    pytest.fail(reason, pytrace=False)


@dataclasses.dataclass(frozen=True)
class Mistake:
    """A common wrong version of the computation a check compares, so that a ✗ can name it.

    ``gives`` computes what the wrong version returns on the check's own inputs and
    weights (NumPy; called only when the learner's numbers are off). ``todo`` is the
    number of the stub's TODO that holds the mistake. Each step's test file keeps its
    mistakes in one ``MISTAKES`` place; adding one takes a few lines.
    """

    says: str
    todo: int | list[int]
    gives: Callable[[], np.ndarray]


def assert_close(
    actual,
    expected,
    what: str,
    *,
    atol: float = ATOL,
    rtol: float = RTOL,
    mistakes: Iterable[Mistake] = (),
    step=None,
) -> float:
    """Compares arrays; on failure reports the worst mismatch and where it is. Returns max |Δ|.

    When the learner's numbers match one of ``mistakes`` instead (within the same
    tolerance), the ✗ names that mistake and its TODO in ``step``'s file.
    """
    actual = runtime.to_numpy(actual)
    expected = np.asarray(expected, dtype=np.float32)
    reason, worst = _mismatch(actual, expected, what, atol, rtol)
    if reason is None:
        measured.append(worst)
        return worst
    mistake = matching_mistake(actual, mistakes, atol=atol, rtol=rtol)
    if mistake is not None:
        where = todo_label(mistake.todo, step.__file__) if step is not None else "the TODOs of this step"
        away = f"; the right output is up to {worst:.3g} away" if np.isfinite(worst) else ""
        fail(f"{what}: {mistake.says} — {where} (your output matches that mistake's to the tolerance{away})")
    fail(reason)


def matching_mistake(actual, mistakes: Iterable[Mistake], *, atol: float = ATOL, rtol: float = RTOL) -> Mistake | None:
    """The first of ``mistakes`` whose output ``actual`` matches within the tolerance, or None."""
    actual = runtime.to_numpy(actual)
    for mistake in mistakes:
        wrong = np.asarray(mistake.gives(), dtype=np.float32)
        if _mismatch(actual, wrong, "", atol, rtol)[0] is None:
            return mistake
    return None


def _mismatch(actual: np.ndarray, expected: np.ndarray, what: str, atol: float, rtol: float):
    """(None, max |Δ|) when ``actual`` matches ``expected`` within the tolerance, else (reason, max |Δ|)."""
    if actual.shape != expected.shape:
        return f"{what}: shape is {list(actual.shape)}, expected {list(expected.shape)}", float("inf")
    finite = np.isfinite(expected)
    wrong = np.isfinite(actual) != finite
    wrong |= ~finite & (actual != expected)  # -inf must stay -inf, not become +inf or NaN
    if wrong.any():
        index = tuple(int(i) for i in np.argwhere(wrong)[0])
        return f"{what}: value at {list(index)} is {actual[index]}, expected {expected[index]:.6g}", float("inf")
    with np.errstate(invalid="ignore"):  # -inf - -inf where both are masked
        delta = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    delta = np.where(finite, delta, 0.0)
    outside = delta > atol + rtol * np.abs(expected)
    worst = float(delta.max(initial=0.0))
    if not outside.any():
        return None, worst
    index = tuple(int(i) for i in np.unravel_index(np.argmax(delta), delta.shape))
    return (
        f"{what}: max |Δ| = {worst:.3g} at {list(index)} "
        f"(got {actual[index]:.6g}, expected {expected[index]:.6g}); "
        f"{int(outside.sum())} of {outside.size} values are outside the tolerance "
        f"{atol:g} + {rtol:g}·|expected|"
    ), worst


# --- the environment ------------------------------------------------------------------


@contextlib.contextmanager
def c_locale():
    """Text files read under the C locale, whose preferred encoding is not UTF-8 (skipped in Python's UTF-8 mode,
    where every text file is read as UTF-8)."""
    if sys.flags.utf8_mode:
        pytest.skip("Python's UTF-8 mode is on: text files are read as UTF-8 whatever the locale")
    saved = locale.setlocale(locale.LC_CTYPE)
    try:
        locale.setlocale(locale.LC_CTYPE, "C")
        assert locale.getpreferredencoding(False) != "UTF-8", locale.getpreferredencoding(False)
        yield
    finally:
        locale.setlocale(locale.LC_CTYPE, saved)


def assert_help(main, capsys, usage: str, shown: str, hidden: str, options) -> None:
    """``main(["--help"])`` exits 0 and prints "usage: USAGE ..." with ``shown`` (the description), without
    ``hidden`` (the docstring's next part), and each (option, words) pair: the option and its help, side by side.
    Whitespace is compared collapsed, as argparse wraps it."""
    with pytest.raises(SystemExit) as stopped:
        main(["--help"])
    out = capsys.readouterr().out
    assert stopped.value.code == 0 and out.startswith(f"usage: {usage} "), out
    flat = " ".join(out.split())
    assert " ".join(shown.split()) in flat and " ".join(hidden.split()) not in flat, out
    for option, words in options:
        assert f"{option} {words}" in flat, f"--help gives {option} without its help, {words!r}:\n{out}"


# --- loading the code under test -----------------------------------------------------


def load_step(number: int, target: str, steps_dir: Path):
    """Imports step ``number`` from ``solutions/`` or from the learner's ``steps_dir``.

    Isolation: ``solutions/`` is always on ``sys.path``, so whatever a step imports
    from an earlier step (``from step_01_config import GPT2Config``) is the
    solution's. Only the step under test comes from the learner's folder, loaded
    under its own module name, so a bug in step 03 never fails step 09's check.
    """
    finished = step_path(number, SOLUTIONS)
    if finished is None:
        fail(f"step {number:02d} ({OUTLINE[number]}) is not in the course yet")
    if target == "solutions":
        return solution(number)
    path = steps_dir / finished.name
    if not path.exists():
        fail(f"{shown(path)} is missing — run `python -m course.authoring.render` to restore the stub")
    name = f"learner.{finished.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # noqa: BLE001 - any import error is the learner's to fix
        sys.modules.pop(name, None)
        fail(f"{shown(path)} does not import: {explain_exception(error, path)}")
    return module


def solution(number: int):
    """An earlier step's finished module (what the step under test builds on)."""
    return importlib.import_module(step_path(number, SOLUTIONS).stem)


def no_mojo() -> str | None:
    """Why the course's Mojo kernels cannot run here (no Mojo compiler at all: pip's max brings one,
    mojo-compiler; a conda environment may not), or None once they are compiled. A compile error raises."""
    try:
        runtime.kernels()
    except runtime.NoMojoError as error:
        return str(error)
    return None


# --- running learner code ---------------------------------------------------------------


def attribute(module, name: str):
    """The module's ``name`` (a class or a function), or a hint that it is missing."""
    found = getattr(module, name, None)
    if found is None:
        fail(f"{shown(module.__file__)} has no `{name}` — keep the name the stub gives it")
    return found


def todo_named(step_file: str | None, name: str) -> str:
    """``TODO N in steps/…`` for the TODO that creates ``name`` in the learner's file."""
    return todo_label(todo_for_name(step_file, name), step_file)


def todo_in(obj) -> str:
    """``TODO N in steps/…`` for the TODOs inside a learner's function or class."""
    return todo_label(todos_in(obj), _source_file(obj))


def call(fn, *args, what: str | None = None, **kwargs):
    """Calls learner code; an exception or a None result becomes a hint naming the TODO."""
    what = what or f"{getattr(fn, '__qualname__', fn)}()"
    source = _source_file(fn)
    try:
        result = fn(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - reported, with the learner's line
        fail(f"{what} failed: {explain_exception(error, source)}")
    if result is None and not isinstance(fn, type):
        fail(f"{what} returned None — finish {todo_in(getattr(fn, 'forward', fn))}")
    return result


def check_convert(step, finished, todos: tuple[str, ...], stored: dict, twice: dict, name: str, *more) -> None:
    """A step's given ``convert(checkpoint, *more)``, run with the ``finished`` module's ``todos`` in place
    of the step's (they have checks of their own): every weight of ``stored`` (some float16 or float64)
    comes out float32, and ``twice``, one weight under two of its keys, is refused with a CheckpointError
    naming ``name``, the model's name for it (else one of the two would silently win)."""
    from course.checkpoints import CheckpointError

    convert, own = attribute(step, "convert"), {todo: getattr(step, todo) for todo in todos}
    for todo in todos:
        setattr(step, todo, getattr(finished, todo))
    try:
        state = call(convert, dict(stored), *more, what="convert(a checkpoint in float16 and float64)")
        wrong = {key: str(value.dtype) for key, value in state.items() if value.dtype != np.float32}
        if wrong:
            fail(f"convert(a checkpoint in float16 and float64) kept {wrong}: the model's weights are float32, "
                 f"whatever the checkpoint stores — keep convert as given")
        keys = " and ".join(twice)
        try:
            convert(dict(twice), *more)
        except CheckpointError as error:
            if name not in str(error) or "twice" not in str(error):
                fail(f"convert({keys}) was refused with {str(error)!r}, which does not name the weight held twice "
                     "— keep convert as given")
            return
        fail(f"convert({keys}) was accepted: both are the model's {name}, and one of them would silently win "
             "— keep convert as given")
    finally:
        for todo, fn in own.items():
            setattr(step, todo, fn)


@contextlib.contextmanager
def counting_compiles():
    """While active, counts the graphs MAX compiles or loads: yields a list that grows by one for each.

    Every graph (``Module.compile``, or an eager op MAX cannot interpret) goes through
    ``InferenceSession.compile_reusing_mefs``.
    """
    from max.engine import InferenceSession

    loads: list[int] = []
    original = InferenceSession.compile_reusing_mefs

    def counted(session, *args, **kwargs):
        loads.append(1)
        return original(session, *args, **kwargs)

    InferenceSession.compile_reusing_mefs = counted
    try:
        yield loads
    finally:
        InferenceSession.compile_reusing_mefs = original


def build(factory, *args, **kwargs):
    """Constructs a learner module lazily: no weights are computed until they load."""
    from max.experimental import functional as F

    with F.lazy():
        return call(factory, *args, what=f"{factory.__name__}(...)", **kwargs)


def load_weights(module, state: dict[str, np.ndarray], model: str = "GPT-2") -> None:
    """Loads checkpoint-named weights, explaining a missing, None, misshapen or extra parameter;
    ``model`` names whose checkpoint the names and shapes are (GPT-2, Llama)."""
    owner = type(module).__name__
    source = _source_file(type(module))
    params = dict(module.parameters)
    for name, value in state.items():
        shape = [int(d) for d in params[name].shape] if name in params else None
        if shape == list(value.shape):
            continue
        if shape is None:
            fail(missing_parameter(module, name, model))
        fail(f"{owner}.{name} has shape {shape}, but {model}'s is {list(value.shape)} — "
             f"{todo_named(source, name.split('.')[0])}")
    extra = sorted(set(params) - set(state))
    if extra:
        todo = todo_named(source, extra[0].split(".")[0])
        fail(f"{owner} has parameters {model}'s checkpoint does not: {', '.join(extra)} — {todo}")
    module.load_state_dict({name: runtime.from_numpy(value) for name, value in state.items()})


def llama_twin(step, name: str, reference, hf_config):
    """The learner's Part II class ``name``, built from ``hf_config`` through step 17's LlamaConfig, with
    the Hugging Face ``reference``'s weights loaded by name: the module a check compares with ``reference``."""
    from reference import to_max_state

    mine = build(attribute(step, name), solution(17).LlamaConfig.from_hf(hf_config))
    load_weights(mine, to_max_state(reference), model="Llama")
    return mine


def forward(module, *inputs: np.ndarray, what: str | None = None, **kwargs):
    """Runs a learner module eagerly on NumPy inputs; returns its output as NumPy.

    Keyword arguments go to the module as they are (``past_len=5``)."""
    if what is None:
        given = ", ".join(f"{key}={value!r}" for key, value in kwargs.items())
        what = f"{type(module).__name__}.forward" + (f"(…, {given})" if kwargs else "")
    result = call(module, *(runtime.from_numpy(x) for x in inputs), what=what, **kwargs)
    try:
        return runtime.to_numpy(result)
    except Exception as error:  # noqa: BLE001 - a lazily-raised MAX error is still the learner's
        fail(f"{what} gave a value MAX could not compute: {explain_exception(error, None)}")


def missing_parameter(module, name: str, model: str = "GPT-2") -> str:
    """Why checkpoint parameter ``name`` is not on ``module``, with the TODO that would set it."""
    source = _source_file(type(module))
    missing, part = _missing(module, name, model)
    return f"{missing} — {todo_named(source, part or name.split('.')[0])}"


def _missing(module, name: str, model: str = "GPT-2") -> tuple[str, str | None]:
    """Why checkpoint parameter ``name`` is not on ``module`` (a None or absent attribute), and the
    attribute still None, whose TODO is the one to name (None when one is absent)."""
    owner, parent, path = type(module).__name__, module, []
    for part in name.split("."):
        path.append(part)
        parent = getattr(parent, part, _ABSENT)
        if parent is None:
            return f"{owner}.{'.'.join(path)} is still None", part
        if parent is _ABSENT:
            break
    return f"{owner} has no `{name}` (the name {model}'s checkpoint uses)", None


_ABSENT = object()


def _source_file(obj) -> str | None:
    """The file that defines a learner function, class or module instance."""
    if not isinstance(obj, (type, types.FunctionType, types.MethodType)):
        obj = type(obj)
    try:
        return inspect.getsourcefile(obj)
    except TypeError:
        return None


# --- the configs (steps 01 and 17)


def config_class(step, name: str, required: Iterable[str]):
    """The learner's config class ``name``, once it is a dataclass with every field in ``required``."""
    cls = attribute(step, name)
    if not dataclasses.is_dataclass(cls):
        fail(f"{name} must stay a @dataclass (from_hf and the later steps rely on its fields)")
    declared = {field.name for field in dataclasses.fields(cls)}
    for field in required:
        if field not in declared:
            fail(f"{name} has no field `{field}` — {todo_named(step.__file__, field)}")
    return cls


def config_property(config, name: str):
    """Reads a computed property of the learner's config, with a hint if it is not one."""
    owner = type(config).__name__
    prop = getattr(type(config), name, None)
    if not isinstance(prop, property):
        fail(f"{owner}.{name} must be a @property (the later steps read config.{name})")
    return call(prop.fget, config, what=f"{owner}.{name}")


# --- steps 05-11


def rejects(fn, *args, error: type[Exception] | tuple[type[Exception], ...], what: str, why: str, **kwargs) -> str:
    """Checks that learner code refuses a misuse with ``error``; returns the message it gave.

    ``why`` says what was wrong with the input, for the learner, when the call
    was accepted. The checks in question are given code (``check_token_ids``, …):
    a failure here usually means the learner's forward no longer calls them.
    """
    from max.experimental.tensor import Tensor

    try:
        result = fn(*args, **kwargs)
        if result is None and not isinstance(fn, (type, types.FunctionType)):
            fail(f"{what} returned None — finish {todo_in(getattr(fn, 'forward', fn))}")
        if isinstance(result, Tensor):
            result.to_numpy()  # a lazily-raised error counts as a refusal too
    except error as raised:
        message = str(raised).strip()
        if not message:
            fail(f"{what} raised {type(raised).__name__} without a message; say what was given and what is expected")
        return message
    except Exception as raised:  # noqa: BLE001 - reported, with the learner's line
        kinds = " or ".join(e.__name__ for e in (error if isinstance(error, tuple) else (error,)))
        fail(f"{what} raised {explain_exception(raised, _source_file(fn))}; expected a clear {kinds} ({why})")
    fail(f"{what} was accepted, but {why} — keep the given check at the top of forward")



# --- steps 13-15


def top_two_tied(logits: np.ndarray) -> np.ndarray:
    """Per row of logits (last axis): whether the two largest are closer than twice the tolerance,
    so that float32 rounding may pick either as the argmax."""
    top2 = np.sort(logits, axis=-1)[..., -2:]
    return top2[..., 1] - top2[..., 0] <= 2 * (ATOL + RTOL * np.abs(top2[..., 1]))


def greedy_agreement(got: list[int], expected: list[int], scores: list[np.ndarray], what: str) -> str | None:
    """None when the greedy tokens ``got`` equal Hugging Face's; a note when they part on a tie; else fails.

    A tie: at the first different token, Hugging Face's two best logits are closer
    than twice the tolerance, so float32 rounding may pick either.
    """
    if got == expected:
        return None
    at = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
    if at < min(len(got), len(expected)) and top_two_tied(scores[at]):
        top2 = np.sort(scores[at])[-2:]
        return f"{what}: equal for {at} tokens, then a tie (the top two logits are {top2[1] - top2[0]:.1e} apart)"
    fail(
        f"greedy tokens for {what} differ from Hugging Face's generate at new token {at}: "
        f"got {got[at:at + 5]}…, expected {expected[at:at + 5]}… ({len(got)} vs {len(expected)} tokens)"
    )


_VALUE = r"%[\w#]+"
_OP = re.compile(rf"^\s*(?P<out>{_VALUE}(?:, {_VALUE})*) = (?P<op>[\w.]+)\((?P<args>[^)]*)\)")


def weight_reads(mlir: str, weight: str = "%arg1") -> list[str]:
    """How a staged graph's ops read its ``weight`` argument: for each op that takes the weight (or a reshape of it,
    which moves no number, or a transpose of it), "transposed" for a transpose or permute, "right operand" when it is a matmul's second
    operand (x @ W...), "left operand" when it is a matmul's first (W @ column), else the op's name."""
    aliases, reads = {weight}, []
    for line in mlir.splitlines():
        if not (match := _OP.match(line)):
            continue
        args = [arg.strip() for arg in match["args"].split(",")]
        if not aliases.intersection(args):
            continue
        op = match["op"].split(".")[-1]
        if op == "reshape":
            aliases.add(match["out"])
        elif op in ("transpose", "permute"):  # the weight still, its numbers read across its rows
            reads.append("transposed")
            aliases.add(match["out"])
        elif op == "matmul":
            reads.append("left operand" if args[0] in aliases else "right operand")
        else:
            reads.append(op)
    return reads
