"""The mutation testing summary (``book/src/mutation-summary.txt``) is the one measured on today's code.

``python -m course.authoring.mutation --write`` runs mutmut over each target in
``course.authoring.mutation.TARGETS`` (minutes, so not here) and records the sha256 of the code
it mutated. These checks fail when a target has changed since, so that the appendix never
shows the verdict on code that is gone. They also check the rule that sets aside mutants which
only reword an error message, since its verdicts never reach mutmut. And they check the tool itself
(it is one of its own targets): the copy it makes, the mutants it lists, the verdicts it reads, the
summary it writes and its command, on a small repository of their own.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
import warnings
from pathlib import Path

import pytest

from course.authoring.mutation import SUMMARY, TARGETS, digest, measured_at, recorded, rewords_a_message
from harness import assert_help, c_locale
from course.outline import ROOT

pytestmark = pytest.mark.course

def refresh(target: str) -> str:
    """How to bring a target's line of the summary up to date."""
    return (f"rerun `python -m course.authoring.mutation {target} --write` (`pixi run -e mutation mutation {target} "
            "--write`)")


#: Set to 1 by maintainers before a release: a target changed since its mutation run fails instead of warning.
STRICT = "COURSE_STRICT_MUTATION"


class StaleMutationSummary(UserWarning):
    """A target's code has changed since the mutation run the summary records: its verdict is of older code."""


def stale(target: str) -> str | None:
    """Why the summary's line for ``target`` is not of today's code, or None when it is."""
    found = recorded()
    if target not in found:
        return f"{SUMMARY.relative_to(ROOT)} has no line for {target}: {refresh(target)}"
    if found[target] != digest(target):
        return (f"{target} changed since its mutation run in {SUMMARY.relative_to(ROOT)} (measured at "
                f"{measured_at(found[target])}, sha256 {found[target]}, now {digest(target)}): {refresh(target)}")
    return None


@pytest.mark.parametrize("target", list(TARGETS))
def test_the_summary_is_of_todays_code(target):
    """each target's sha256 in the summary is the file's as it is now: a warning when it is not, so that editing a
    solution leaves the suite green; a failure with COURSE_STRICT_MUTATION=1"""
    if problem := stale(target):
        if os.environ.get(STRICT) == "1":
            pytest.fail(problem)
        warnings.warn(StaleMutationSummary(f"{problem} ({STRICT}=1 makes this fail)"))


def test_a_stale_summary_warns_and_fails_only_when_strict(monkeypatch):
    """a target whose code differs from the one measured: a warning naming it, its commit and both digests, and a
    failure saying the same under COURSE_STRICT_MUTATION=1; today's code: neither"""
    target = "course/weights.py"
    found = recorded()[target]
    monkeypatch.setattr(sys.modules[__name__], "digest", lambda name: "0" * 12 if name == target else found)
    monkeypatch.delenv(STRICT, raising=False)
    with pytest.warns(StaleMutationSummary) as caught:
        test_the_summary_is_of_todays_code(target)
    message = str(caught[0].message)
    assert (f"{target} changed since its mutation run" in message and f"sha256 {found}, now {'0' * 12}" in message
            and re.search(r"measured at ([0-9a-f]{7,} \(\d{4}-\d\d-\d\d\)|\(not committed yet\))", message)), message
    monkeypatch.setenv(STRICT, "1")
    with pytest.raises(pytest.fail.Exception, match=re.escape(f"{target} changed since its mutation run")):
        test_the_summary_is_of_todays_code(target)
    monkeypatch.setattr(sys.modules[__name__], "digest", lambda name: found)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        test_the_summary_is_of_todays_code(target)  # neither a warning nor a failure


def test_status_names_each_targets_verdict_commit_and_whether_it_changed(monkeypatch, capsys):
    """--status: a line a target with its verdict as the summary counts it, the commit that recorded it, and 'yes'
    only where the code now differs; runs without mutmut"""
    from course.authoring import mutation

    found = recorded()
    target = "course/weights.py"
    monkeypatch.setattr(mutation, "digest", lambda name: "f" * 12 if name == target else found.get(name, "e" * 12))
    assert mutation.main(["--status"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:-1]}
    assert list(lines) == list(TARGETS)
    row = next(line.split() for line in SUMMARY.read_text().splitlines() if line.startswith(target + " "))
    survivors = int(row[5]) + int(row[7]) + int(row[8])
    assert re.fullmatch(rf"{re.escape(target)}\s+yes\s+([0-9a-f]{{7,}} \(\d{{4}}-\d\d-\d\d\)|\(not committed yet\)|"
                        rf"\(no git history\))\s+{survivors} survivors? of {row[2]} \({row[4]} equivalent, {row[6]} "
                        r"timed out\)", lines[target]), lines[target]
    assert all(" no " in line for name, line in lines.items() if name != target and name in found), lines


def _git(folder: Path, *args: str, date: str = "2026-11-27T12:00:00") -> str:
    """git in ``folder`` as a fixed author, committing at ``date``: its output, stripped."""
    who = {"GIT_AUTHOR_NAME": "course", "GIT_AUTHOR_EMAIL": "course@example.org", "GIT_COMMITTER_NAME": "course",
           "GIT_COMMITTER_EMAIL": "course@example.org", "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    import subprocess

    return subprocess.run(["git", *args], cwd=folder, env={**os.environ, **who}, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_measured_at_is_the_commit_that_first_recorded_the_digest(tmp_path, monkeypatch):
    """--status's "measured at": the first commit whose summary holds the digest, with its date (not a later one
    that drops it); a digest only in the working tree: "(not committed yet)"; no repository: "(no git history)"
    """
    from course.authoring import mutation

    summary = tmp_path / "book" / "src" / "mutation-summary.txt"
    summary.parent.mkdir(parents=True)
    monkeypatch.setattr(mutation, "ROOT", tmp_path)
    monkeypatch.setattr(mutation, "SUMMARY", summary)
    _git(tmp_path, "init", "-q")
    summary.write_text("course/weights.py  000000000000  1\n")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "before", date="2026-11-20T12:00:00")
    summary.write_text("course/weights.py  aaaaaaaaaaaa  1\n")
    _git(tmp_path, "commit", "-q", "-am", "recorded", date="2026-11-27T12:00:00")
    first = _git(tmp_path, "rev-parse", "--short", "HEAD")
    summary.write_text("course/weights.py  aaaaaaaaaaaa  1\ncourse/outline.py  bbbbbbbbbbbb  2\n")
    _git(tmp_path, "commit", "-q", "-am", "another row", date="2026-12-01T12:00:00")
    summary.write_text("course/weights.py  cccccccccccc  1\n")
    _git(tmp_path, "commit", "-q", "-am", "measured again", date="2026-12-03T12:00:00")
    summary.write_text("course/weights.py  dddddddddddd  1\n")  # not committed
    assert measured_at("aaaaaaaaaaaa") == f"{first} (2026-11-27)"
    assert measured_at("dddddddddddd") == "(not committed yet)"
    monkeypatch.setattr(mutation, "ROOT", tmp_path / "book")
    (tmp_path / ".git").rename(tmp_path / "no-git")
    assert measured_at("aaaaaaaaaaaa") == "(no git history)"
    for failure in (FileNotFoundError(2, "No such file or directory: 'git'"),
                    mutation.subprocess.TimeoutExpired("git", 60)):
        def fails(*args, failure=failure, **kwargs):
            raise failure
        monkeypatch.setattr(mutation.subprocess, "run", fails)  # no git on PATH; a git that hangs
        assert measured_at("aaaaaaaaaaaa") == "(no git history)", type(failure).__name__


def test_status_takes_each_targets_first_whole_row(tmp_path, monkeypatch):
    """status() reads a target's first row with a 12-digit digest and every column: its survivors (survived, no
    tests and other) of its mutants, "1 survivor" alone in the singular; a target with no such row: "never measured",
    changed; and "changed" wherever today's digest differs"""
    from course.authoring import mutation

    summary = tmp_path / "summary.txt"
    rows = ["a.py  aaaaaaaaaaaa  10  6  1  1  0  1  1  1 min 0 s  2026-12-01",  # 3 left
            "a.py  bbbbbbbbbbbb  10  10  0  0  0  0  0  1 min 0 s  2026-12-02",  # a later row: not read
            "b.py  ccccccccccc  5  5  0  0  0  0  0  1 min 0 s  2026-12-01",  # an 11-digit digest
            "c.py  dddddddddddd  5  4  0  1  0  0",  # a column short
            "g.py  gggggggggggg  3  2  0  1  0  0  0",  # every column, no run time or date
            "d.py  eeeeeeeeeeee  7  6  0  0  2  0  1  1 min 0 s  2026-12-01",  # 1 left, 2 timed out
            "e.py  ffffffffffff  4  3  0  1  0  0  0  1 min 0 s  2026-12-01"]
    summary.write_text("a header line\n\n" + "\n".join(rows) + "\n")
    monkeypatch.setattr(mutation, "SUMMARY", summary)
    monkeypatch.setattr(mutation, "TARGETS", {f"{name}.py": () for name in "abcdefg"})
    monkeypatch.setattr(mutation, "digest", lambda name: "ffffffffffff" if name == "e.py" else "aaaaaaaaaaaa")
    monkeypatch.setattr(mutation, "measured_at", lambda found: f"commit of {found}")
    got = {s.target: (s.verdict, s.commit, s.changed) for s in mutation.status()}
    assert got == {
        "a.py": ("3 survivors of 10 (1 equivalent, 0 timed out)", "commit of aaaaaaaaaaaa", False),
        "b.py": ("never measured", "(none)", True),
        "c.py": ("never measured", "(none)", True),
        "d.py": ("1 survivor of 7 (0 equivalent, 2 timed out)", "commit of eeeeeeeeeeee", True),
        "e.py": ("1 survivor of 4 (0 equivalent, 0 timed out)", "commit of ffffffffffff", False),
        "f.py": ("never measured", "(none)", True),
        "g.py": ("1 survivor of 3 (0 equivalent, 0 timed out)", "commit of gggggggggggg", True),
    }, got


def test_status_table_lines_up_its_columns_and_says_what_to_rerun():
    """--status's table: the file column as wide as the longest name, then "changed since", "measured at" and the
    verdict; and a last line counting the changed targets, with the command to rerun them only where there are any"""
    from course.authoring.mutation import Status, status_table

    two = [Status("course/a.py", "0 survivors of 9 (1 equivalent, 0 timed out)", "abc1234 (2026-12-01)", False),
           Status("tools/longer_name.py", "never measured", "(none)", True)]
    assert status_table(two) == (
        "file                  changed since  measured at               verdict\n"
        "course/a.py           no             abc1234 (2026-12-01)      0 survivors of 9 (1 equivalent, 0 timed out)\n"
        "tools/longer_name.py  yes            (none)                    never measured\n"
        "1 of 2 targets changed since their mutation run: rerun them with "
        "`python -m course.authoring.mutation FILE ... --write`\n")
    assert status_table(two[:1]).splitlines()[-1] == "0 of 1 targets changed since their mutation run"


def test_the_instructors_page_gives_the_summarys_count_and_time():
    """book/src/instructors.md's "about X h Y min on a 2-core machine (N targets": N is the summary's rows, and the
    time the sum of their run times, to the nearest 10 minutes"""
    rows = [line for line in SUMMARY.read_text().splitlines()
            if re.match(r"\S+\s+[0-9a-f]{12}\s+\d+", line) and line.split()[0] in TARGETS]  # the table's
    times = [re.search(r"(\d+) min (\d+) s", row) for row in rows]
    total = sum(int(m[1]) * 60 + int(m[2]) for m in times) / 60
    page = " ".join((ROOT / "book" / "src" / "instructors.md").read_text().split())
    said = re.search(r"about (\d+) h (\d+) min on a 2-core machine \((\d+) targets", page)
    assert said, "the page no longer says how long the whole mutation run takes"
    hours, minutes, count = map(int, said.groups())
    assert count == len(rows), f"the page says {count} targets, the summary has {len(rows)}"
    assert abs(hours * 60 + minutes - total) <= 10, \
        f"the page says {hours} h {minutes} min, the summary's rows add up to {total // 60:.0f} h {total % 60:.0f} min"


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
    for prefix in ("r", "R", "u", "U"):  # a raw or unicode docstring is a docstring too, in either quotes
        for quotes in ('"""', "'''"):
            docstring = f'{prefix}{quotes}The area.{quotes}'
            assert of(CODE.replace('"""The area."""', docstring)) == of(CODE.replace('"""The area."""', docstring.replace(
                "area", "surface"))), docstring
    assert re.fullmatch("[0-9a-f]{12}", of(CODE)), of(CODE)  # the summary's column
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


HELP = '''def parse(parser, argv, why):
    parser.description = argparse.ArgumentParser(description="parses").description
    parser.add_argument("--n", type=int, default=1, help="how many, at most")
    with console.status(f"parsing {len(argv)} arguments …"):
        args = parser.parse_args(argv)
    err.print("[dim]parsed[/]")
    print("parsed")
    if args.n < 0:
        raise Stop("must be 0 or more" + f", got {args.n}")
    if args.n > 9:
        raise CourseException("no more than 9")
    if not args:
        raise ValueError(why)
    console.print("done")
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
    (HELP.replace('console.print("done")', 'console.print("XXdoneXX")'), False),  # the same, on a console
    (HELP.replace('description="parses"', 'description="XXparsesXX"'), True),
    (HELP.replace('CourseException("no more than 9")', 'CourseException("XXno more than 9XX")'), True),
    (HELP.replace("raise ValueError(why)", "raise ValueError(None)"), False),  # the message itself, not its words
    (HELP.replace(', default=1', ''), False),  # an argument dropped
    (HELP.replace('"how many, at most"', '"XXhow many, at mostXX"').replace("args.n < 0", "args.n < 1"), False),
    ("def parse(", False),  # not Python
])
def test_only_a_messages_words_are_set_aside(mutated, rewords):
    """a mutant is set aside as rewording only when it changes nothing but the text of an exception's
    message (the program's Stop too), of a help text or of a spinner's line: not a comparison, a key, a flag's name, a default, a
    string the code uses, or the message's parts"""
    original = HELP if mutated.startswith("def parse(") else FUNCTION
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


def test_each_function_and_method_is_found_at_its_def_line():
    from course.authoring.mutation import _function_lines

    assert _function_lines(MODULE) == {"x_vet": 1, "xǁBoxǁarea": MODULE.splitlines().index("    def area(self, w, h):") + 1}


def test_a_changed_line_is_found_in_an_async_or_decorated_function_and_a_diff_without_a_hunk_has_none():
    import difflib

    from course.authoring.mutation import _changed_line

    for function, start in (("async def f(x):\n    y = x + 1\n    return y", 7), ("@cache\ndef f(x):\n    y = x + 1\n    return y", 8)):
        diff = "\n".join(difflib.unified_diff(function.splitlines(), function.replace("x + 1", "x - 1").splitlines(),
                                              lineterm=""))
        assert _changed_line(function, diff, start) == start + 1, function  # the line after the def
    assert _changed_line("def f():\n    pass", "", 3) is None


def _result(target, statuses, todo=None, seconds=754.0, finished=1_700_000_000.0):
    """A Result with a mutant of each status (x_f's ``a = i`` -> ``a = i + 1``), in ``todo``'s code if given."""
    from course.authoring.mutation import WORDING, Mutant, Result

    mutants = []
    for i, status in enumerate(statuses):
        reason = WORDING if status == "wording" else "why: |Δ| → 0" if status == "equivalent" else ""
        mutants.append(Mutant(f"{target}.x_f__mutmut_{i}", "x_f", f"a = {i}", f"a = {i + 1}", f"diff {i}",
                              "equivalent" if status == "wording" else status, reason, todo))
    return Result(target, "0123456789ab", mutants, seconds, finished)


def test_writing_one_target_keeps_the_others_lines():
    """--write with one target rewrites its lines and keeps every other target's as the summary had them"""
    from course.authoring.mutation import kept_lines, summary

    first, second = list(TARGETS)[0], list(TARGETS)[-1]
    before = summary([_result(first, ["killed", "survived", "equivalent"]), _result(second, ["killed"], todo=3)], 2)
    assert f"  {first} x_f (survived): `a = 1` -> `a = 2`" in before and "  its TODO code" in before, before
    again = summary([_result(second, ["killed"], todo=3)], 2, kept_lines(before, [first]))
    assert again == before, f"{before}\n---\n{again}"
    rerun = summary([_result(first, ["killed", "killed", "equivalent"])], 2, kept_lines(before, [second]))
    assert "survived" not in rerun.split("Not killed")[1] and "  its TODO code" in rerun, rerun
    # two solutions one after the other, each with its TODO code's row: each keeps its own
    third, fourth = list(TARGETS)[-2:]
    both = summary([_result(third, ["killed"], todo=1), _result(fourth, ["survived"], todo=2)], 2)
    kept = kept_lines(both, [third, fourth])
    for target in (third, fourth):
        assert [row.split()[0] for row in kept[target][0]] == [target, "its"], kept[target]
    assert summary([], 2, kept) == both


# --- the tool's own road: the copy, the mutants, the verdicts, the summary, the command ----------------------------
# On a small repository of its own (a module, a solution with a TODO, their tests), where the tool looks for the
# course: mutmut itself lists the mutants, and only its run (minutes) is a stand-in that writes verdicts.

MODULE = '''def vet(n):
    """n — at most 2."""
    if n > 2:
        raise ValueError("n must be at most 2")
    return str(n).split(":")[0]


class Box:
    def area(self, w, h):
        return w * h
'''


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A git repository with a module, a solution, their tests and the folders prepare() leaves out; the tool's
    ROOT, WORK, SUMMARY and TARGETS point at it."""
    import subprocess

    from course.authoring import mutation

    root = tmp_path / "repo"
    files = {"pyproject.toml": '[project]\nname = "x"\n', "course/m.py": MODULE, "solutions/step_99_pick.py": SOLUTION,
             "tests/test_m.py": "def test_m():\n    pass\n", ".ci/run": "true\n", ".github/ci.yml": "on: push\n",
             "book/src/a.md": "# A\n", ".gitignore": "ignored/\n", "README.md": "# X\n"}
    for name, text in {**files, "ignored/big.bin": "x", "untracked.txt": "new\n"}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", *files], cwd=root, check=True)
    monkeypatch.setattr(mutation, "ROOT", root)
    monkeypatch.setattr(mutation, "WORK", root / ".mutation")
    monkeypatch.setattr(mutation, "SUMMARY", root / "book" / "src" / "mutation-summary.txt")
    monkeypatch.setattr(mutation, "TARGETS", {"course/m.py": ("tests/test_m.py", "tests/test_m.py::test_m"),
                                              "solutions/step_99_pick.py": ("tests/test_m.py::test_m",)})
    return root


@pytest.fixture
def mutmut():
    """The checks that run mutmut itself (marked `mutation`) need the `mutation` extra; without it they fail saying
    so, as llama.cpp's checks do without theirs."""
    from course.authoring import mutation

    if missing := mutation.missing_tools():
        pytest.fail(f"{missing}; `-m 'not mutation'` leaves out the checks that run mutmut", pytrace=False)


@pytest.mark.parametrize("hidden", [("mutmut",), ("libcst",), ("mutmut", "libcst")])
def test_without_mutmut_the_tool_says_what_to_install_and_stops(hidden, monkeypatch, capsys):
    """without the `mutation` extra, the tool runs nothing and says, in one line, what is missing and how to
    install it (not a ModuleNotFoundError's traceback); --last too, which reads mutmut's version"""
    import importlib.util

    from course.authoring import mutation

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None if name in hidden else find_spec(name, *rest))
    monkeypatch.setattr(mutation, "run", lambda *args: pytest.fail("a target ran without mutmut"))
    for argv in ([], ["--last"]):
        with pytest.raises(SystemExit) as stopped:
            mutation.main(argv)
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert stopped.value.code == 2, f"exit code {stopped.value.code} with {hidden} hidden, expected 2: {error}"
        assert error.endswith(f"error: {' and '.join(hidden)} not installed: pip install -e \".[mutation]\" (or pixi "
                              "run -e mutation ...)"), f"with {hidden} hidden, {argv}: {error}"


def test_the_copy_holds_the_working_tree_and_mutmuts_settings_for_its_target(repo):
    """prepare(): every file git tracks or would track (not the ignored ones), a fresh copy each time; mutmut told
    to mutate the target alone, under its tests (its folders and top-level files copied beside: the pages' checks
    read README.md), in a fork server warmed with the imports that survive a fork"""
    import tomllib

    from course.authoring import mutation

    assert sorted(mutation._tracked_files()) == sorted([".ci/run", ".github/ci.yml", ".gitignore", "README.md",
                                                        "book/src/a.md", "course/m.py", "pyproject.toml",
                                                        "solutions/step_99_pick.py", "tests/test_m.py",
                                                        "untracked.txt"])
    (repo / "book" / "src" / "a.md").unlink()  # tracked, but gone from the working tree: nothing to copy
    assert "book/src/a.md" not in mutation._tracked_files()
    (repo / "book" / "src" / "a.md").write_text("# A\n")
    work = repo / ".mutation" / "w"
    (work / "stale").mkdir(parents=True)
    mutation.prepare("course/m.py", work)
    assert not (work / "stale").exists() and (work / "course" / "m.py").read_text() == MODULE
    assert (work / "untracked.txt").is_file() and not (work / "ignored").exists()
    settings = tomllib.loads((work / "pyproject.toml").read_text())
    assert settings["project"] == {"name": "x"}, settings  # the project's own lines kept
    assert settings["tool"]["mutmut"] == {
        "source_paths": ["course"], "only_mutate": ["course/m.py"],
        "also_copy": [".gitignore", "README.md", "book", "pyproject.toml", "solutions", "tests", "untracked.txt",
                      "mutation_plugin.py", "mutation_preload.txt"],
        "pytest_add_cli_args": ["-p", "mutation_plugin", "-p", "no:cacheprovider"],
        "pytest_add_cli_args_test_selection": ["tests/test_m.py", "tests/test_m.py::test_m"], "process_isolation": "forkserver",
        "forkserver_warmup": "import", "preload_modules_file": "mutation_preload.txt", "use_git_change_detection": False,
        "timeout_constant": 10.0}, settings["tool"]["mutmut"]
    assert (work / "mutation_plugin.py").read_text() == mutation.PLUGIN
    assert (work / "mutation_preload.txt").read_text().splitlines() == list(mutation.PRELOAD)


def test_outside_a_git_repository_the_copy_is_refused(tmp_path, monkeypatch):
    import subprocess

    from course.authoring import mutation

    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    (tmp_path / "plain").mkdir()
    monkeypatch.setattr(mutation, "ROOT", tmp_path / "plain")
    with pytest.raises(subprocess.CalledProcessError):
        mutation._tracked_files()


def test_a_solutions_copy_keeps_it_in_src_with_solutions_a_link_to_it(repo):
    """a solution is mutated in src/ (mutmut drops that prefix from a mutant's name) and imported by the tests as
    solutions/, a link to src/, in the copy and in mutmut's own copy of it, mutants/"""
    import tomllib

    from course.authoring import mutation

    work = repo / ".mutation" / "s"
    mutation.prepare("solutions/step_99_pick.py", work)
    for folder in (work, work / "mutants"):
        assert (folder / "solutions").is_symlink() and str((folder / "solutions").readlink()) == "src", folder
    assert (work / "solutions" / "step_99_pick.py").read_text() == SOLUTION
    settings = tomllib.loads((work / "pyproject.toml").read_text())["tool"]["mutmut"]
    assert (settings["source_paths"], settings["only_mutate"], settings["also_copy"][:6]) == (
        ["src"], ["src/step_99_pick.py"], [".gitignore", "README.md", "book", "course", "pyproject.toml", "tests"]
    ), settings
    assert settings["pytest_add_cli_args_test_selection"] == ["tests/test_m.py::test_m"]


@pytest.mark.mutation
def test_the_mutants_are_mutmuts_each_with_its_lines_its_todo_and_why_it_is_equivalent(repo, mutmut, monkeypatch):
    """list_mutants(): mutmut's mutants of the target, named as mutmut names them, each with the line it changes
    as written and as mutated, its diff, the TODO whose code it changes (solutions), and where it is equivalent, why:
    a message reworded, or an entry of EQUIVALENT"""
    from course.authoring import mutation

    work = repo / ".mutation" / "m"
    mutation.prepare("course/m.py", work)
    entry = ("course/m.py", "x_vet", "if n > 2:", "if n >= 2:")
    monkeypatch.setattr(mutation, "EQUIVALENT", {entry: "a reason"})
    gpu = ("course/m.py", "x_vet", "if n > 2:", "if n > 3:")
    monkeypatch.setattr(mutation, "UNTESTED", {gpu: ("only a GPU could tell", "tests/test_x.py::test_y")})
    here = Path.cwd()
    with c_locale():  # the module is read as UTF-8 whatever the locale
        mutants = mutation.list_mutants("course/m.py", work)
    assert Path.cwd() == here  # mutmut read its settings in the copy, and the tests' folder is back
    functions = [mutant.function for mutant in mutants]
    assert functions == sorted(functions, key=["x_vet", "xǁBoxǁarea"].index) and "xǁBoxǁarea" in functions, functions
    for i, mutant in enumerate(mutants):
        number = functions[: i + 1].count(mutant.function)
        assert mutant.name == f"course.m.{mutant.function}__mutmut_{number}", mutant
        assert mutant.before in [line.strip() for line in MODULE.splitlines()] and mutant.after != mutant.before, mutant
        assert mutant.diff.startswith("--- course/m.py\n+++ course/m.py\n@@ ") and (
            f"\n-{' ' * 4}" in mutant.diff or "\n-        " in mutant.diff), mutant.diff
        assert mutant.todo is None
    verdicts = {(mutant.before, mutant.after): (mutant.status, mutant.reason) for mutant in mutants}
    assert verdicts[entry[2:]] == ("equivalent", "a reason")
    assert verdicts[gpu[2:]] == ("untested", "only a GPU could tell")
    reworded = [after for (before, after), (status, reason) in verdicts.items() if before.startswith("raise")
                and reason == mutation.WORDING]
    assert sorted(reworded) == ['raise ValueError("N MUST BE AT MOST 2")', 'raise ValueError("XXn must be at most 2XX")']
    assert verdicts["raise ValueError(\"n must be at most 2\")", "raise ValueError(None)"] == ("not run", "")
    assert verdicts["return w * h", "return w / h"] == ("not run", "")

    mutation.prepare("solutions/step_99_pick.py", work)
    todos = {(mutant.before, mutant.todo) for mutant in mutation.list_mutants("solutions/step_99_pick.py", work)}
    assert ("best = int(np.argmax(logits))", 4) in todos and ("if temperature < 0:  # given", None) in todos, todos
    assert ("return x + 1", None) in todos, todos


def test_a_change_of_several_lines_is_shown_as_one_with_its_parts():
    from course.authoring.mutation import _changed_lines

    diff = "--- f\n+++ f\n@@ -1,3 +1,2 @@\n def f():\n-    a = 1\n-    b = 2\n+    a = 2\n"
    assert _changed_lines(diff) == ("a = 1 / b = 2", "a = 2")
    assert _changed_lines("--- f\n+++ f\n@@ -1 +1 @@\n-x\n+y\n") == ("x", "y")
    assert _changed_lines("--- f\n+++ f\n@@ -1 +1,2 @@\n-x\n+y\n+z\n") == ("x", "y / z")


def _meta(work, target, codes):
    from course.authoring.mutation import _in_copy

    path = work / "mutants" / f"{_in_copy(target)}.meta"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"exit_code_by_key": codes}), encoding="utf-8")


@pytest.mark.mutation
def test_a_run_hands_mutmut_the_mutants_not_set_aside_and_reads_its_verdicts(repo, mutmut, monkeypatch, capsys):
    """run(): a fresh copy; one line on what runs; `mutmut run` in the copy on every mutant not set aside, its output
    in mutmut.log; its exit codes as verdicts (a crash of the tests' process as a kill, as the red run it is); the
    run's seconds kept for --last; mutmut's own failure one line with its log"""
    import signal
    import subprocess

    from course.authoring import mutation

    work = repo / ".mutation" / "course-m"
    calls, git = [], subprocess.run

    def mutmut(command, cwd=None, stdout=None, stderr=None, check=False, **kwargs):
        if command[0] == "git":  # prepare's list of the files
            return git(command, cwd=cwd, check=check, **kwargs)
        calls.append((command, cwd, stdout.name, stderr))
        stdout.write("mutmut's progress: 🎉 1 🙁 0\n")  # mutmut draws its progress with emoji
        if check and returncode:
            raise subprocess.CalledProcessError(returncode, command)
        codes = [1, 0, -11, -signal.SIGABRT, 35, 36, 5, 3]
        _meta(cwd, "course/m.py", {name: codes[i % len(codes)] for i, name in enumerate(command[4:])})
        return subprocess.CompletedProcess(command, returncode)

    monkeypatch.setattr(subprocess, "run", mutmut)
    returncode = 0
    with c_locale():  # its log is written as UTF-8 whatever the locale
        result = mutation.run("course/m.py", 3)
    [(command, cwd, log, stderr)] = calls
    names = [mutant.name for mutant in result.mutants if mutant.reason != mutation.WORDING]
    assert command == [str(Path(sys.executable).with_name("mutmut")), "run", "--max-children", "3", *names], command
    assert (cwd, log, stderr) == (work, str(work / "mutmut.log"), subprocess.STDOUT)
    assert (work / "mutmut.log").read_text(encoding="utf-8") == "mutmut's progress: 🎉 1 🙁 0\n"
    wording = len(result.mutants) - len(names)
    assert capsys.readouterr().out == (f"course/m.py: {len(result.mutants)} mutants, {wording} reword a message or are "
                                       f"listed as equivalent; mutmut runs the other {len(names)} under tests/test_m.py, "
                                       "tests/test_m.py::test_m\n")
    expected = ["killed", "survived", "killed", "killed", "suspicious", "timeout", "no tests", "killed"]
    assert [m.status for m in result.mutants if m.reason != mutation.WORDING] == [
        expected[i % len(expected)] for i in range(len(names))]
    assert result.target == "course/m.py" and result.digest == mutation.digest("course/m.py")
    assert 0 <= result.seconds < 60 and result.finished <= time.time()
    assert (work / "run-seconds.txt").read_text() == f"{result.seconds:.0f}\n"

    returncode = 2
    with pytest.raises(SystemExit) as failed:
        mutation.run("course/m.py", 2)
    assert str(failed.value) == f"mutmut failed on course/m.py (exit 2); its output: {work / 'mutmut.log'}"


@pytest.mark.mutation
def test_last_reads_the_last_runs_verdicts_and_time_and_refuses_another_versions(repo, mutmut, monkeypatch):
    """run(last=True): no copy made, mutmut not run; the verdicts and the time of the run in .mutation/ (unknown if it
    never ended); refused, naming the folder, if the code has changed since or was never run"""
    import os
    import subprocess

    from course.authoring import mutation

    work = repo / ".mutation" / "course-m"
    with pytest.raises(SystemExit) as never:
        mutation.run("course/m.py", 2, last=True)
    assert str(never.value) == f"the last run in {work} mutated another version of course/m.py: run it again"
    mutation.prepare("course/m.py", work)
    (work / "course" / "extra.py").write_text("")  # a copy made anew would not have it
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("--last runs nothing"))
    names = [m.name for m in mutation.list_mutants("course/m.py", work)]
    _meta(work, "course/m.py", {name: 1 for name in names[1:]})  # the first never ran: a stopped run
    result = mutation.run("course/m.py", 2, last=True)
    assert (result.seconds, result.finished) == (None, None)
    assert result.mutants[0].status == "not checked" and {m.status for m in result.mutants[1:]} == {"killed", "equivalent"}
    assert [m.status for m in result.mutants if m.reason] == ["equivalent", "equivalent"]  # the reworded, as listed
    (work / "run-seconds.txt").write_text("754\n")
    os.utime(work / "run-seconds.txt", (1_700_000_000, 1_700_000_000))
    result = mutation.run("course/m.py", 2, last=True)
    assert (result.seconds, result.finished) == (754.0, 1_700_000_000) and (work / "course" / "extra.py").is_file()
    (repo / "course" / "m.py").write_text(MODULE.replace("n > 2", "n > 3"))
    with pytest.raises(SystemExit) as changed:
        mutation.run("course/m.py", 2, last=True)
    assert str(changed.value) == f"the last run in {work} mutated another version of course/m.py: run it again"


def test_the_summary_counts_each_column_under_its_name_and_lists_what_is_explained_and_what_is_not(repo):
    """summary(): the header with the tool and the workers; a row per target in TARGETS' order, each count under its
    column, the run's time and date (or unknown); a solution's TODO code on a row of its own; the equivalents, the
    messages reworded counted on one line; then what is neither killed nor explained, or "none"."""
    import os

    from course.authoring.mutation import COLUMNS, EQUIVALENT_HEADING, LEFT_HEADING, UNTESTED_HEADING, WORDING, summary

    module = _result("course/m.py", ["killed", "killed", "survived", "timeout", "no tests", "wording", "wording",
                                     "equivalent", "not checked", "suspicious"])
    solution = _result("solutions/step_99_pick.py", ["killed", "equivalent"], todo=4, seconds=None, finished=None)
    solution.mutants.append(_result("solutions/step_99_pick.py", ["killed"]).mutants[0])  # given code
    text = summary([solution, module], 3, tool="mutmut 9.9")
    lines = text.splitlines()
    assert lines[0] == (f"python -m course.authoring.mutation --write: mutmut 9.9, 3 workers on {os.cpu_count()} cores; "
                        "each target as its last run found it, with that run's time and date (\"other\" counts the "
                        "mutants a stopped run never ran, and those only a GPU machine could see, listed last)") and lines[1] == "", lines[:2]
    header = lines[2]
    assert header.startswith("file  ") and header.index("sha256") == lines[3].index("0123456789ab"), header
    assert header.split() == ["file", "sha256", "mutants", "killed", "equivalent", "survived", "timed", "out", "no",
                              "tests", "other", "run", "time", "date"], header

    def cells(row):
        """each column's cell: the text that ends where its name ends in the header"""
        found = {}
        for column in (*COLUMNS, "run time"):
            end = header.index(column) + len(column)
            start = row.rfind("  ", 0, end) + 2
            found[column] = row[start:end]
        return found

    m_row, s_row, todo_row = lines[3], lines[4], lines[5]
    assert m_row.startswith("course/m.py ") and s_row.startswith("solutions/step_99_pick.py "), lines[3:6]
    assert cells(m_row) == {"mutants": "10", "killed": "2", "equivalent": "3", "survived": "1", "timed out": "1",
                            "no tests": "1", "other": "2", "run time": "12 min 34 s"}, m_row
    assert m_row.split()[1] == "0123456789ab" and m_row.endswith(
        "  " + time.strftime("%Y-%m-%d", time.localtime(1_700_000_000))), m_row
    assert cells(s_row) == {"mutants": "1", "killed": "1", "equivalent": "0", "survived": "0", "timed out": "0",
                            "no tests": "0", "other": "0", "run time": "(unknown)"}, s_row
    assert s_row.endswith("  (unknown)  (date unknown)"), s_row
    assert todo_row.startswith("  its TODO code ") and cells(todo_row) | {"run time": None} == {
        "mutants": "2", "killed": "1", "equivalent": "1", "survived": "0", "timed out": "0", "no tests": "0",
        "other": "0", "run time": None} and len(todo_row) == header.index("other") + 5, todo_row
    assert lines[6:] == [
        "", EQUIVALENT_HEADING,
        f"  course/m.py: 2 mutants {WORDING}",
        "  course/m.py x_f: `a = 7` -> `a = 8`: why: |Δ| → 0",
        "  solutions/step_99_pick.py x_f (TODO 4): `a = 1` -> `a = 2`: why: |Δ| → 0",
        "", LEFT_HEADING,
        "  course/m.py: 1 mutants not run (the run stopped before them; run it again)",
        "  course/m.py x_f (survived): `a = 2` -> `a = 3`",
        "  course/m.py x_f (no tests): `a = 4` -> `a = 5`",
        "  course/m.py x_f (suspicious): `a = 9` -> `a = 10`",
        "", UNTESTED_HEADING], lines[6:]
    assert todo_row.split()[:4] == ["its", "TODO", "code", "2"], todo_row  # no sha256, no run: its counts only
    settled = summary([_result("course/m.py", ["killed", "timeout", "equivalent"])], 2)
    assert settled.endswith(f"\n\n{LEFT_HEADING} none\n\n{UNTESTED_HEADING}\n"), settled
    assert settled.startswith("python -m course.authoring.mutation --write: mutmut, 2 workers on "), settled


def test_a_runs_time_is_in_whole_minutes_and_seconds():
    from course.authoring.mutation import _minutes

    assert [_minutes(s) for s in (0, 59.9, 60, 754.4, 3599, 4250.7)] == [
        "0 min 0 s", "0 min 59 s", "1 min 0 s", "12 min 34 s", "59 min 59 s", "70 min 50 s"]


def test_the_recorded_digests_are_the_tables_first_line_for_each_target(repo):
    from course.authoring import mutation

    assert mutation.recorded() == {}  # no summary yet
    mutation.SUMMARY.write_text("header course/m.py\n\nfile  sha256\ncourse/m.py  aaaaaaaaaaaa  3\n"
                                "solutions/step_99_pick.py  short  1\ncourse/other.py  bbbbbbbbbbbb\n"
                                "solutions/step_99_pick.py  cccccccccccc\n  course/m.py x_f: `a` -> `b`: max |Δ| why\n"
                                "course/m.py  dddddddddddd  3\n", encoding="utf-8")
    with c_locale():  # the summary quotes the code, which is not ASCII
        assert mutation.recorded() == {"course/m.py": "aaaaaaaaaaaa", "solutions/step_99_pick.py": "cccccccccccc"}


@pytest.mark.mutation
def test_the_command_runs_the_targets_asked_prints_the_summary_and_each_survivor_and_writes_with_write(
        repo, mutmut, monkeypatch, capsys):
    """`python -m course.authoring.mutation [TARGET ...] [--children N] [--last] [--write]`: each target run (all of
    TARGETS by default), the summary and each unsettled mutant's diff printed, exit 1 while one is left; --write
    rewrites the summary, the targets not run as it had them; an unknown target refused with the list"""
    import importlib.metadata
    import os

    from course.authoring import mutation

    runs, verdicts = [], {"course/m.py": ["killed", "survived"], "solutions/step_99_pick.py": ["killed", "timeout"]}

    def run(target, children, last=False):
        runs.append((target, children, last))
        return _result(target, verdicts[target])

    monkeypatch.setattr(mutation, "run", run)
    cpu_count = os.cpu_count
    for cores, children in ((3, 3), (None, 2)):  # a worker a core; 2 where Python cannot tell
        monkeypatch.setattr(os, "cpu_count", lambda: cores)
        runs.clear()
        mutation.main(["course/m.py"])
        assert runs == [("course/m.py", children, False)], (cores, runs)
    monkeypatch.setattr(os, "cpu_count", cpu_count)
    capsys.readouterr()
    runs.clear()
    assert mutation.main(["course/m.py", "--children", "3"]) == 1
    out = capsys.readouterr().out
    tool = f"mutmut {importlib.metadata.version('mutmut')}"
    assert runs == [("course/m.py", 3, False)] and out.startswith("\n" + mutation.summary(
        [_result("course/m.py", verdicts["course/m.py"])], 3, tool=tool)), out
    assert out.endswith("\ncourse/m.py.x_f__mutmut_1 (survived):\ndiff 1\n") and "__mutmut_0" not in out, out
    assert not mutation.SUMMARY.exists()

    verdicts["course/m.py"] = ["killed", "equivalent"]
    runs.clear()
    with c_locale():  # the summary is written and read as UTF-8 whatever the locale (it quotes code: |Δ|, →)
        assert mutation.main(["--write", "--last"]) == 0
    assert runs == [("course/m.py", os.cpu_count(), True), ("solutions/step_99_pick.py", os.cpu_count(), True)], runs
    written = mutation.SUMMARY.read_text()
    assert capsys.readouterr().out == f"\n{written}wrote book/src/mutation-summary.txt\n"
    verdicts["solutions/step_99_pick.py"] = ["survived"]
    with c_locale():
        assert mutation.main(["--write", "course/m.py"]) == 0  # the solution's lines kept as they were
    assert mutation.SUMMARY.read_text() == written

    with pytest.raises(SystemExit):
        mutation.main(["course/m.py", "course/x.py", "x.py"])
    assert capsys.readouterr().err.endswith(
        "error: not a target: course/x.py, x.py (targets: course/m.py, solutions/step_99_pick.py)\n")


def test_help_names_the_command_and_each_option(repo, capsys):
    from course.authoring import mutation

    paragraphs = mutation.__doc__.split("\n\n")
    assert_help(mutation.main, capsys, "python -m course.authoring.mutation [-h]", paragraphs[0], paragraphs[1][:40], (
        ("targets", "the files to mutate (default: all of course/m.py, solutions/step_99_pick.py)"),
        ("--write", "rewrite book/src/mutation-summary.txt: the targets run, and the others' lines"),
        ("--children CHILDREN", "mutants run at once"),
        ("--last", "run nothing: report (and with --write, record) the verdicts of the last run"),
        ("--status", "run nothing: each target's recorded verdict, the commit it was measured at")))


def test_a_message_reworded_with_code_changed_after_it_is_not_set_aside():
    """the walk goes on past a reworded message: a change to the code found later (deeper) still counts"""
    original = 'def check(n):\n    if n:\n        raise ValueError("too many")\n    return [[[n + 1]]]\n'
    reworded = original.replace('"too many"', '"XXtoo manyXX"')
    assert rewords_a_message(original, reworded) is True
    assert rewords_a_message(original, reworded.replace("n + 1", "n + 2")) is False


def test_each_untested_mutant_names_a_gpu_check_that_exists_and_the_summary_lists_it_apart(monkeypatch):
    """mutation_targets.UNTESTED: each mutant only a GPU machine could see names a check that exists and carries the
    `gpu` marker (so it runs wherever a GPU is); none is also EQUIVALENT; the summary lists them under their own
    heading, each with that check, and never among the equivalents"""
    import importlib

    from course.authoring import mutation
    from course.authoring.mutation_targets import EQUIVALENT, UNTESTED

    assert UNTESTED and not set(UNTESTED) & set(EQUIVALENT)
    for key, (reason, check) in UNTESTED.items():
        file, name = check.split("::")
        module = importlib.import_module(Path(file).stem)
        marks = [mark.name for mark in getattr(getattr(module, name, None), "pytestmark", [])]
        assert "gpu" in marks, f"{key}: {check} is not a gpu-marked check ({marks})"
    (file, function, before, after), (reason, check) = next(iter(UNTESTED.items()))
    monkeypatch.setattr(mutation, "TARGETS", {file: ()})
    text = mutation.summary([_result(file, ["killed"])], 2)
    equivalents, _, untested = text.partition(mutation.UNTESTED_HEADING)
    assert f"  {file} {function}: `{before}` -> `{after}`: {reason}; {check}" in untested.splitlines(), untested
    assert before not in equivalents or f"`{before}` -> `{after}`" not in equivalents, equivalents


def test_the_numpy_the_equivalences_assume_is_the_oldest_the_course_allows():
    """mutation_targets.NUMPY_FLOOR, on which equivalences rest (take_along_axis's default axis), is the floor
    pyproject.toml and pixi.toml both require, and the NumPy installed here is no older"""
    import tomllib

    import numpy as np

    from course.authoring.mutation_targets import NUMPY_FLOOR
    from course.outline import ROOT

    floor = ">=" + ".".join(map(str, NUMPY_FLOOR))
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pixi = tomllib.loads((ROOT / "pixi.toml").read_text())["dependencies"]["numpy"]
    assert f"numpy{floor}" in pyproject and pixi == floor, (pyproject, pixi)
    assert tuple(int(part) for part in np.__version__.split(".")[:2]) >= NUMPY_FLOOR, np.__version__


#: Prints the summary of no run, every target's lines kept from the summary as it is: the GPU-only list made anew.
_SUMMARY_ANEW = """
from course.authoring import mutation
kept = mutation.kept_lines(mutation.SUMMARY.read_text(), list(mutation.TARGETS))
print(mutation.summary([], 2, kept))
"""


def test_the_summary_is_the_same_whatever_pythons_hash_seed():
    """the summary written twice, by processes with other hash seeds, is the same text: its list of what only a
    GPU machine sees, built from sets in mutation_targets, is sorted, so a rerun rewrites no line it did not change"""
    import subprocess

    texts = [subprocess.run([sys.executable, "-c", _SUMMARY_ANEW], cwd=ROOT, capture_output=True, text=True, check=True,
                            env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")]
    assert "Untested here" in texts[0] and texts[0].count("\n") > 100, texts[0][-2000:]
    changed = [(a, b) for a, b in zip(texts[0].splitlines(), texts[1].splitlines()) if a != b]
    assert not changed, f"{len(changed)} lines differ between hash seeds 1 and 2, the first: {changed[0]}"
