"""The mutation testing summary (``book/src/mutation-summary.txt``) is the one measured on today's code.

``python -m course.authoring.mutation --write`` runs mutmut over each target in
``course.authoring.mutation.TARGETS`` (minutes, so not here) and records the sha256 of the code
it mutated. These checks fail when a target has changed since, so that the appendix never
shows the verdict on code that is gone. They also check the rule that sets aside mutants which
only reword an error message, since its verdicts never reach mutmut.
"""

from __future__ import annotations

import hashlib

import pytest

from course.authoring.mutation import SUMMARY, TARGETS, digest, recorded, rewords_a_message
from course.outline import ROOT

pytestmark = pytest.mark.course

REFRESH = "rerun `python -m course.authoring.mutation --write` (`pixi run -e mutation mutation --write`)"


@pytest.mark.parametrize("target", list(TARGETS))
def test_the_summary_is_of_todays_code(target):
    """each target's sha256 in the summary is the file's as it is now"""
    found = recorded()
    assert target in found, f"{SUMMARY.relative_to(ROOT)} has no line for {target}: {REFRESH}"
    assert found[target] == digest(target), (
        f"{target} changed since the mutation run in {SUMMARY.relative_to(ROOT)} (sha256 {found[target]}, "
        f"now {digest(target)}): {REFRESH}")


CODE = '''"""A module."""


def area(w, h):
    """The area."""
    return w * h  # width times height
'''


def test_the_digest_is_of_the_code_mutmut_mutates(tmp_path):
    """a docstring in triple quotes, a comment or a blank line (which mutmut never mutates) leave a file's digest as
    it was; a line of code, or a docstring in plain quotes (which mutmut does mutate), change it; in a solution,
    every byte counts (its ANCHOR comments decide which mutants are TODO code), in the course as in a mutation copy,
    which keeps the solutions in src/"""
    (tmp_path / "src").mkdir()

    def of(text, target="course/m.py"):
        path = tmp_path / target.replace("solutions/", "src/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return digest(target, tmp_path)

    same = [CODE.replace("A module.", "The module, said otherwise."), CODE.replace('"""The area."""', '"""The area,\n    w by h."""'),
            CODE.replace("  # width times height", ""), CODE.replace("\n\n\n", "\n\n\n\n")]
    other = [CODE.replace("w * h", "w + h"), CODE.replace('"""The area."""', '"The area."')]
    assert [of(text) for text in same] == [of(CODE)] * len(same), "an edit mutmut cannot see changed the digest"
    assert of(CODE) not in [of(text) for text in other], "an edit of the code left the digest as it was"
    assert of(CODE.replace('"""The area."""', '"The area, said otherwise."')) != of(CODE.replace('"""The area."""', '"The area."'))
    solution = of(CODE, "solutions/step_99_area.py")
    assert solution != of(CODE.replace("  # width times height", "  # ANCHOR: area"), "solutions/step_99_area.py")
    assert solution == hashlib.sha256(CODE.encode()).hexdigest()[:12], "a solution's digest is of its bytes"


FUNCTION = '''def vet(path, values):
    if values.get("n", 1) > 2:
        raise CheckpointError(f"{path} sets n={values['n']}; " + "the course computes n=1 only")
    return str(values).split(":")[0]
'''


HELP = '''def parse(parser, argv):
    parser.add_argument("--n", type=int, default=1, help="how many, at most")
    with console.status(f"parsing {len(argv)} arguments …"):
        args = parser.parse_args(argv)
    err.print("[dim]parsed[/]")
    print("parsed")
    if args.n < 0:
        raise Stop("must be 0 or more" + f", got {args.n}")
    return args
'''


@pytest.mark.parametrize("mutated, rewords", [
    (FUNCTION.replace("; \"", "; XX\"").replace('" + "the', '" + "XXthe'), True),
    (FUNCTION.replace('"the course computes', '"THE COURSE COMPUTES'), True),
    (FUNCTION.replace("> 2", ">= 2"), False),
    (FUNCTION.replace('get("n", 1)', 'get("XXnXX", 1)'), False),
    (FUNCTION.replace('split(":")', 'split("XX:XX")'), False),
    (FUNCTION.replace(' + "the course computes n=1 only"', ""), False),
    (FUNCTION.replace('+ "the course computes n=1 only"', "+ None"), False),
    (HELP.replace('"how many, at most"', '"XXhow many, at mostXX"'), True),
    (HELP.replace('"must be 0 or more"', '"MUST BE 0 OR MORE"'), True),
    (HELP.replace('"--n"', '"--N"'), False),
    (HELP.replace("default=1,", "default=2,"), False),
    (HELP.replace('f"parsing {', 'f"XXparsing {'), True),
    (HELP.replace("{len(argv)}", "{len(None)}"), False),
    (HELP.replace("console.status", "console.print"), False),
    (HELP.replace('err.print("[dim]parsed[/]")', 'err.print("[dim]PARSED[/]")'), True),
    (HELP.replace('err.print("[dim]parsed[/]")', 'err.print(None)'), False),
    (HELP.replace('print("parsed")', 'print("XXparsedXX")'), False),  # a program's output, not a note
])
def test_only_a_messages_words_are_set_aside(mutated, rewords):
    """a mutant is set aside as rewording only when it changes nothing but the text of an exception's
    message (the program's Stop too), of a help text or of a spinner's line: not a comparison, a key, a flag's name, a default, a
    string the code uses, or the message's parts"""
    original = HELP if "parse(" in mutated else FUNCTION
    assert mutated != original
    assert rewords_a_message(original, mutated) is rewords, mutated


SOLUTION = '''def pick(logits, temperature):
    """Picks a token (given code around one TODO)."""
    if temperature < 0:  # given
        raise ValueError(f"temperature must be 0 or more, got {temperature}")
    # TODO 4: Return the largest logit's index.
    # Hint: np.argmax.
    # ANCHOR: pick | stub: return None
    best = int(np.argmax(logits))
    return best
    # ANCHOR_END: pick


def after(x):
    return x + 1
'''


def test_a_solutions_todo_code_is_told_from_its_given_code():
    """the lines inside an ANCHOR ... | stub: block are its TODO's code, and a mutant there is counted as that
    TODO's; the lines around it, the given code, are no TODO's"""
    from course.authoring.mutation import _changed_line, _function_lines, todo_lines

    lines = SOLUTION.splitlines()
    todos = todo_lines(SOLUTION)
    assert todos == {lines.index("    best = int(np.argmax(logits))") + 1: 4, lines.index("    return best") + 1: 4}, todos
    starts = _function_lines(SOLUTION)
    assert starts == {"x_pick": 1, "x_after": lines.index("def after(x):") + 1}, starts
    function = "\n".join(lines[:10])
    for line, mutated, todo in (("    best = int(np.argmax(logits))", "    best = int(np.argmin(logits))", 4),
                                ("    if temperature < 0:  # given", "    if temperature <= 0:  # given", None)):
        import difflib

        diff = "\n".join(difflib.unified_diff(function.splitlines(), function.replace(line, mutated).splitlines(),
                                              lineterm=""))
        where = _changed_line(function, diff, starts["x_pick"])
        assert where == lines.index(line) + 1, (line, where)
        assert todos.get(where) == todo, (line, todos.get(where))


def test_writing_one_target_keeps_the_others_lines():
    """--write with one target rewrites its lines and keeps every other target's as the summary had them"""
    from course.authoring.mutation import Mutant, Result, kept_lines, summary

    def result(target: str, verdicts: list[str], todo: int | None = None) -> Result:
        mutants = [Mutant(f"m{i}", "x_f", f"a = {i}", f"a = {i + 1}", "", status, "why" if status == "equivalent" else "",
                       todo) for i, status in enumerate(verdicts)]
        return Result(target, "0123456789ab", mutants, seconds=75.0, finished=0.0)

    first, second = list(TARGETS)[0], list(TARGETS)[-1]
    before = summary([result(first, ["killed", "survived", "equivalent"]), result(second, ["killed"], todo=3)], 2)
    assert f"  {first} x_f (survived): `a = 1` -> `a = 2`" in before and "  its TODO code" in before, before
    again = summary([result(second, ["killed"], todo=3)], 2, kept_lines(before, [first]))
    assert again == before, f"{before}\n---\n{again}"
    rerun = summary([result(first, ["killed", "killed", "equivalent"])], 2, kept_lines(before, [second]))
    assert "survived" not in rerun.split("Not killed")[1] and "  its TODO code" in rerun, rerun
