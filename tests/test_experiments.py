"""``course/authoring/experiments.py`` on a small book of its own, in the tests' process.

The real book's experiments run in ``tests/test_book.py`` (in a process of their own, for
minutes) and its check outputs in ``tests/test_course.py``. Here a folder stands for the
book: a few pages with markers, scripts that print a line, and canned check runs, so that
what the instructors' command says, rewrites and refuses is checked exactly, in seconds.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from course.authoring import experiments, render
from course.outline import ROOT, SOLUTIONS
from harness import assert_help

pytestmark = pytest.mark.course

SCRIPTS = {
    "same.py": 'print("  same  ")\nprint()\n',  # trailing spaces and a blank line: not part of the output
    "drift.py": 'print("new")\n',
    "fails.py": 'raise SystemExit(3)\n',
    "fresh.py": 'print("fresh")\n',
    "drift2.py": 'print("z")\n',
}
PAGE_A = """# A

<!-- experiment-output: ../experiments/same.py -->
```text
  same
```
Between.
<!-- experiment-output: ../experiments/drift.py -->

```text
old
line two
```
<!-- experiment-output: ../experiments/fails.py -->
```text
x
```
"""
PAGE_B = """# B
<!-- experiment-output: ../experiments/gone.py -->
<!-- experiment-output: ../experiments/fresh.py -->
Middle.
<!-- experiment-output: ../experiments/drift2.py -->
```text
a
b
c
```
End.
"""


@pytest.fixture
def book(tmp_path, monkeypatch):
    """A book of two pages (a.md, b.md) and its scripts, where the module looks for the real one."""
    root = tmp_path.resolve()
    src, scripts = root / "book" / "src", root / "book" / "experiments"
    src.mkdir(parents=True)
    scripts.mkdir()
    for name, text in SCRIPTS.items():
        (scripts / name).write_text(text)
    (src / "a.md").write_text(PAGE_A)
    (src / "b.md").write_text(PAGE_B)
    monkeypatch.setattr(experiments, "ROOT", root)
    monkeypatch.setattr(experiments, "BOOK", src)
    monkeypatch.setattr(experiments, "EXPERIMENTS", scripts)
    monkeypatch.chdir(ROOT)  # prepare() moves to the book's root: back here afterwards
    monkeypatch.setattr(sys, "path", [path for path in sys.path if path != str(SOLUTIONS)])  # prepare() adds it
    return src


def said(text: str) -> str:
    """stderr with each run's seconds as S."""
    return re.sub(r"\d+\.\d s\b", "S s", text)


def test_every_experiment_is_run_and_each_problem_named(book, capsys):
    """`python -m course.authoring.experiments`: a ✓ for a script that prints its block (trailing spaces and blank
    lines aside), a diff for one that prints something else, the traceback of one that fails (SystemExit too), a
    missing script, a marker with no block; the count and how to rewrite; exit 1; no page touched"""
    before = {page: page.read_text() for page in book.iterdir()}
    assert experiments.main([]) == 1
    err = said(capsys.readouterr().err)
    expected = [
        "✓ a.md ← book/experiments/same.py (S s)",
        "✗ a.md ← book/experiments/drift.py: the page's output differs from a real run (S s)\n"
        "--- book/src/a.md (on the page)\n+++ book/experiments/drift.py (printed now)\n@@ -1,2 +1 @@\n-old\n-line two\n+new",
        "✗ a.md ← book/experiments/fails.py failed (S s):\nTraceback (most recent call last):",
        "✗ b.md ← book/experiments/gone.py: the script does not exist",
        "✗ b.md ← book/experiments/fresh.py: the page's output differs from a real run (S s)\n"
        "(no output block under the marker)",
        "✗ b.md ← book/experiments/drift2.py: the page's output differs from a real run (S s)\n"
        "--- book/src/b.md (on the page)\n+++ book/experiments/drift2.py (printed now)\n@@ -1,3 +1 @@\n-a\n-b\n-c\n+z",
        "5 of 6 experiments need attention; `python -m course.authoring.experiments --write` rewrites the blocks "
        "from real runs",
    ]
    at = 0
    for part in expected:  # in this order
        found = err.find(part, at)
        assert found >= 0, f"{part!r} not found after {err[:at]!r} in:\n{err}"
        at = found + len(part)
    assert "SystemExit: 3" in err, err
    assert {page: page.read_text() for page in book.iterdir()} == before


def test_write_rewrites_each_block_that_differs_and_adds_a_missing_one(book, capsys):
    """`--write`: the blocks that differ rewritten from the run, a block added under a marker without one, several on
    one page without one moving another; the rest of the pages as they were; what it could not rewrite still counted"""
    assert experiments.main(["--write"]) == 1
    err = said(capsys.readouterr().err)
    for line in ("✎ a.md ← book/experiments/drift.py: output block rewritten (S s)",
                 "✎ b.md ← book/experiments/fresh.py: output block rewritten (S s)",
                 "✎ b.md ← book/experiments/drift2.py: output block rewritten (S s)"):
        assert line in err, err
    assert err.rstrip().endswith("\n2 of 6 experiments need attention"), err  # fails.py and gone.py
    assert (book / "a.md").read_text() == PAGE_A.replace("old\nline two", "new")
    assert (book / "b.md").read_text() == PAGE_B.replace(
        "fresh.py -->\n", "fresh.py -->\n```text\nfresh\n```\n").replace("a\nb\nc", "z")
    assert experiments.main(["--write", "same", "drift", "fresh"]) == 0  # now the pages hold what runs print
    assert experiments.main(["same", "drift", "fresh"]) == 0


def test_the_scripts_named_are_the_ones_run(book, capsys):
    """`experiments NAME ...`: only the scripts whose file name holds one of the names; none found is said"""
    assert experiments.main(["same"]) == 0
    assert said(capsys.readouterr().err) == "✓ a.md ← book/experiments/same.py (S s)\n"
    assert experiments.main(["2", "ame"]) == 1  # drift2.py and same.py
    err = said(capsys.readouterr().err)
    assert err.startswith("✓ a.md ← book/experiments/same.py (S s)\n✗ b.md ← book/experiments/drift2.py") and (
        err.endswith("1 of 2 experiments need attention; `python -m course.authoring.experiments --write` rewrites "
                     "the blocks from real runs\n")), err
    assert experiments.main(["nothing"]) == 1
    assert capsys.readouterr().err == "no experiments found\n"


def test_a_script_runs_from_the_root_with_solutions_importable_and_leaves_nothing_changed(book):
    """each script: run from the repository's root as a program (``__name__`` is ``"__main__"``), its own name as
    sys.argv, solutions/ importable; what it prints, normalized; afterwards the folder, sys.argv and NumPy's print options are as they were"""
    script = book.parent / "experiments" / "probe.py"
    script.write_text("import os, sys\nimport numpy as np\nimport step_01_config\n"
                      "np.set_printoptions(precision=2)\nprint(os.getcwd(), '  ')\nprint(sys.argv)\n"
                      "if __name__ == '__main__':\n    print('as a program')\n"
                      "os.chdir('/')\nsys.argv = ['changed']\nprint()\n")
    experiments.prepare()
    root = experiments.ROOT
    assert Path.cwd() == root and sys.path[0] == str(SOLUTIONS), (Path.cwd(), sys.path[:2])
    options, argv = np.get_printoptions(), list(sys.argv)
    printed, error, seconds = experiments.run(script)
    assert error is None and printed == f"{root}\n{[str(script)]}\nas a program", (printed, error)
    assert 0 < seconds < 60, seconds
    assert (Path.cwd(), sys.argv, np.get_printoptions()) == (root, argv, options)
    experiments.prepare()  # again: solutions/ is not put on the path twice
    assert sys.path.count(str(SOLUTIONS)) == 1, sys.path


def test_a_failing_script_is_reported_and_an_interrupt_is_not_swallowed(book):
    scripts = book.parent / "experiments"
    (scripts / "stop.py").write_text("print('before')\nraise SystemExit(0)\n")
    printed, error, _ = experiments.run(scripts / "stop.py")
    assert printed == "before" and error.startswith("Traceback") and error.rstrip().endswith("SystemExit: 0"), error
    (scripts / "interrupted.py").write_text("raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        experiments.run(scripts / "interrupted.py")


def test_a_block_that_never_closes_is_refused_with_its_page_and_line(book):
    (book / "c.md").write_text("# C\n<!-- experiment-output: ../experiments/same.py -->\n\n```text\nsame\n")
    with pytest.raises(ValueError) as refused:
        experiments.find()
    assert str(refused.value) == "c.md:4: the output block under the marker never closes"


def test_the_markers_are_found_in_page_order_with_their_blocks(book):
    found = experiments.find()
    assert [(e.chapter.name, e.script.name, e.marker_line, e.block, e.recorded) for e in found] == [
        ("a.md", "same.py", 2, (3, 6), "  same"), ("a.md", "drift.py", 7, (9, 13), "old\nline two"),
        ("a.md", "fails.py", 13, (14, 17), "x"), ("b.md", "gone.py", 1, None, ""), ("b.md", "fresh.py", 2, None, ""),
        ("b.md", "drift2.py", 4, (5, 10), "a\nb\nc")]
    assert experiments.find([book / "b.md"]) == found[3:]


def test_a_block_may_be_empty_or_open_with_a_bare_fence(book):
    """the block under a marker: opened by ``` with or without a language, closed by the next bare ```, even at
    once (an empty block); the check-output markers found only on the pages asked"""
    (book / "c.md").write_text("# C\n<!-- experiment-output: ../experiments/same.py -->\n```\nbare\n```\n"
                               "<!-- experiment-output: ../experiments/fresh.py -->\n\n```text\n```\n"
                               "<!-- check-output: 3 stub -->\n```text\n✗ three\n```\n")
    found = experiments.find([book / "c.md"])
    assert [(e.script.name, e.marker_line, e.block, e.recorded) for e in found] == [
        ("same.py", 1, (2, 5), "bare"), ("fresh.py", 5, (7, 9), "")], found
    [three] = experiments.find_check_outputs()
    assert (three.chapter.name, three.number, three.kind, three.block, three.recorded) == (
        "c.md", 3, "stub", (10, 13), "✗ three"), three
    assert experiments.find_check_outputs([book / "a.md"]) == []


# --- check outputs: what `pixi run sNN` prints, as the pages show it ---------------------------------

STUB_5 = """Step 05 · token embeddings (checking steps/)
✗ wte has the vocabulary's rows
  the table is None — TODO 1 in steps/step_05_token_embeddings.py
✗ the lookup matches Hugging Face's
  the table is None — TODO 1 in steps/step_05_token_embeddings.py
Step 05: 2 of 2 checks fail. Fix the first ✗ above. (1.5 s)"""
SOLUTION_5 = """Step 05 · token embeddings (checking steps/)
✓ wte has the vocabulary's rows (0.2 s)
✓ the lookup matches Hugging Face's (0.3 s, max |Δ| 0)
Step 05: all 2 checks pass. (0.6 s)"""
CHECK_PAGE = f"""# Five
<!-- check-output: 5 stub -->
```text
{STUB_5}
```
<!-- check-output: 5 solution -->
```text
{SOLUTION_5}
```
<!-- check-output: 7 stub -->
"""


def test_a_check_output_is_compared_without_colours_timings_deltas_and_the_scratch_folder():
    run = ("\x1b[31m✗\x1b[0m wte (2.25 s, max |Δ| 1.5e-06, argmax agrees 3/4)   \n"
           "First run on this machine: compiling …\n  … 12 s\nmax |Δ| = -3e-05 in /tmp/x/step_05.py\n\n")
    assert experiments.clean_check(run, "/tmp/x/") == (
        "✗ wte (2.25 s, max |Δ| 1.5e-06, argmax agrees 3/4)\nmax |Δ| = -3e-05 in steps/step_05.py")
    assert experiments.normalize_check(run, Path("/tmp/x")) == (
        "✗ wte (… s, max |Δ| …, argmax agrees 3/4)\nmax |Δ| = … in steps/step_05.py")
    assert experiments.normalize_check("✓ a (3 s)\n✓ b (0.5 s, max |Δ| 2E+01)") == "✓ a (… s)\n✓ b (… s, max |Δ| …)"
    assert experiments.clean_check("in /tmp/copyX/step_05.py", "/tmp/copyX") == "in steps/step_05.py"
    lines = "✓ one (… s)\n✗ two\n! three\n- four (skipped)\n--- a diff\n  detail\nX not a mark\nall 3 checks pass"
    assert experiments.check_lines(lines) == ["✓ one (… s)", "✗ two", "! three", "- four (skipped)"]
    assert experiments._title("✓ one (… s, max |Δ| …)") == "one" and experiments._title("✗ two (x) y") == "two (x) y"


def test_a_stubs_check_output_must_be_on_its_page_as_it_runs(book):
    (book / "five.md").write_text(CHECK_PAGE)
    folder = "/tmp/stubs-123"
    ran = STUB_5.replace("1.5 s", "9.9 s").replace("steps/", folder + "/")
    assert experiments.compare_stub_output(5, ran, folder) == []
    [drift] = experiments.compare_stub_output(5, ran.replace("is None", "is empty", 1), folder)
    assert drift.startswith("five.md ← pixi run s05 on the stub: the page differs from a real run; `python -m "
                            "course.authoring.experiments --check-outputs --write` refreshes it\n"
                            "--- five.md (on the page)\n+++ a real run (normalized)\n"), drift
    assert ("\n-  the table is None — TODO 1 in steps/step_05_token_embeddings.py\n+  the table is empty — TODO 1 in "
            "steps/step_05_token_embeddings.py\n") in drift, drift
    [empty] = experiments.compare_stub_output(7, "✗ x", folder)  # a marker with no block under it
    assert empty.startswith("five.md ← pixi run s07 on the stub: the page differs from a real run;"), empty
    assert experiments.compare_stub_output(6, ran, folder) == [
        "no page shows step 06's check on its stub (a `<!-- check-output: 6 stub -->` block)"]


def test_a_solutions_check_output_must_be_in_the_run_and_count_its_checks(book):
    (book / "five.md").write_text(CHECK_PAGE)
    run = "Step 05\n" + "\n".join(SOLUTION_5.splitlines()[1:3]).replace("0.2 s", "4 s") + "\n✓ another step's check (1 s)"
    assert "Step 05: all 2 checks pass" not in run  # the verdict is read from the page, not from the run
    assert experiments.compare_solution_output(run, "/tmp/copies") == []
    [missing] = experiments.compare_solution_output(run.replace("Hugging Face's", "NumPy's"), "/tmp/copies")
    assert missing == ("five.md ← pixi run s05 on the solution: not in a real run: [\"✓ the lookup matches Hugging "
                       "Face's (… s, max |Δ| …)\"]; `python -m course.authoring.experiments --check-outputs --write` "
                       "refreshes it"), missing
    (book / "five.md").write_text(CHECK_PAGE.replace("all 2 checks", "all 3 checks"))
    assert experiments.compare_solution_output(run, "/tmp/copies") == [
        "five.md ← pixi run s05 on the solution: the verdict does not count its 2 checks"]
    skipped = "- a check this machine cannot run (skipped)"
    (book / "five.md").write_text(CHECK_PAGE.replace("Step 05: all 2", skipped + "\nStep 05: all 2"))
    problems = experiments.compare_solution_output(run + "\n" + skipped, "/tmp/copies")
    assert problems == ["five.md ← pixi run s05 on the solution: not the same checks as the stub's block on the same "
                        "page"], problems  # the skipped check is not counted, but the stub's block lacks it
    (book / "five.md").write_text(CHECK_PAGE.replace("✗ wte has", "✗ wte holds"))
    assert experiments.compare_solution_output(run, "/tmp/copies") == [
        "five.md ← pixi run s05 on the solution: not the same checks as the stub's block on the same page"]
    (book / "five.md").write_text(CHECK_PAGE.replace(SOLUTION_5, "Step 05: all 0 checks pass."))
    (book / "four.md").write_text("<!-- check-output: 4 solution -->\n```text\n✓ gelu (1 s)\nStep 04: all 9 checks pass.\n```\n")
    assert experiments.compare_solution_output(run + "\n✓ gelu (2 s)", "/tmp/copies") == [  # every block's problem
        "five.md ← pixi run s05 on the solution: not in a real run: (no block); `python -m "
        "course.authoring.experiments --check-outputs --write` refreshes it",
        "four.md ← pixi run s04 on the solution: the verdict does not count its 1 checks"]
    (book / "four.md").unlink()
    assert experiments.compare_solution_output(run, "/tmp/copies") == [
        "five.md ← pixi run s05 on the solution: not in a real run: (no block); `python -m "
        "course.authoring.experiments --check-outputs --write` refreshes it"]


def test_a_solutions_check_names_its_file_as_the_page_does(book):
    """a ✓ line that names the step's file: the run's scratch folder is the page's steps/"""
    (book / "five.md").write_text(CHECK_PAGE.replace("wte has", "wte in steps/step_05.py has"))
    run = "\n".join(SOLUTION_5.splitlines()[1:3]).replace("steps/", "/tmp/copies/").replace("wte has", "wte in /tmp/copies/step_05.py has")
    assert experiments.compare_solution_output(run, "/tmp/copies") == []


NOW = "✓ a new check (0.1 s)\n✓ now the"  # the solution's run: a check more, one reworded


@pytest.fixture
def canned_checks(book, monkeypatch):
    """`--check-outputs` with each check's run canned: the stubs rendered into one folder, the solutions copied into
    another, and what `python -m course.check N --steps-dir D` printed, by step and folder. Records each run."""
    (book / "five.md").write_text(CHECK_PAGE)
    runs = []

    def rendered(folder):
        (folder / "RENDERED").write_text("")
        return [], []

    def check(number, folder):
        kind = "stub" if (folder / "RENDERED").is_file() else "solution"
        copied = sorted(path.name for path in folder.glob("step_*.py"))
        runs.append((number, kind, copied))
        colour = "\x1b[32m"
        text = {(5, "stub"): STUB_5.replace("1.5 s", "3.0 s"), (5, "solution"): SOLUTION_5.replace("✓ the", NOW),
                (7, "stub"): "✗ seven"}[number, kind]
        return f"{colour}First run on this machine: a minute\n" + text.replace("steps/", f"{folder}/") + "\n"

    monkeypatch.setattr(render, "render_all", rendered)
    monkeypatch.setattr(experiments, "_run_check", check)
    return runs


def test_check_outputs_runs_each_marked_check_and_names_what_differs(canned_checks, book, capsys):
    """`--check-outputs`: each marked step's check on fresh stubs or on copies of every solution; a ✓ where the page
    shows the run (timings aside), a diff where not, a marker with no block counted; exit 1, the pages untouched"""
    assert experiments.main(["--check-outputs"]) == 1
    err = capsys.readouterr().err
    solutions = sorted(path.name for path in SOLUTIONS.glob("step_*.py"))
    assert canned_checks == [(5, "stub", []), (5, "solution", solutions), (7, "stub", [])], canned_checks
    assert err.startswith("✓ five.md ← pixi run s05 on the stub\n✗ five.md ← pixi run s05 on the solution: the page "
                          "differs from a real run;"), err
    assert "\n-✓ the lookup matches Hugging Face's (… s, max |Δ| …)\n+✓ a new check (… s)\n+✓ now the lookup" in err, err
    assert "\n✗ five.md ← pixi run s07 on the stub: the page differs from a real run;" in err, err
    assert err.endswith("\n2 of 3 check outputs need attention; `python -m course.authoring.experiments "
                        "--check-outputs --write` rewrites them from real runs\n"), err
    assert (book / "five.md").read_text() == CHECK_PAGE


def test_check_outputs_writes_the_runs_as_the_pages_show_them(canned_checks, book, capsys):
    """`--check-outputs --write`: each block that differs rewritten from the run as a page shows it (no colours, no
    compile notes, the folder as steps/, its real timings), a missing one added below one that grew; the steps named
    are the ones run"""
    assert experiments.main(["--check-outputs", "--write", "7", "05"]) == 0
    assert [run[:2] for run in canned_checks] == [(5, "stub"), (5, "solution"), (7, "stub")], canned_checks
    err = capsys.readouterr().err
    assert err == ("✓ five.md ← pixi run s05 on the stub\n✎ five.md ← pixi run s05 on the solution: output block "
                   "rewritten\n✎ five.md ← pixi run s07 on the stub: output block rewritten\n"), err
    assert (book / "five.md").read_text() == CHECK_PAGE.replace("✓ the", NOW).replace(
        "7 stub -->\n", "7 stub -->\n```text\n✗ seven\n```\n")
    canned_checks.clear()
    assert experiments.main(["--check-outputs", "7"]) == 0 and canned_checks == [(7, "stub", [])], canned_checks


def test_a_check_runs_in_its_own_process_from_the_root(monkeypatch, tmp_path):
    """`python -m course.check N --steps-dir D` from the repository's root, with this Python; stdout, then stderr"""
    import subprocess

    calls = []

    def run(command, *, cwd=None, capture_output=False, text=False, timeout=None, check=False):
        """subprocess.run as far as it matters here: a check that fails exits 1, as a stub's always does"""
        calls.append((command, cwd, timeout))
        out, err = ("out\n", "err\n") if capture_output else (None, None)
        if check:
            raise subprocess.CalledProcessError(1, command, out, err)
        if capture_output and not text:
            out, err = out.encode(), err.encode()
        return subprocess.CompletedProcess(command, 1, stdout=out, stderr=err)

    monkeypatch.setattr(subprocess, "run", run)
    assert experiments._run_check(5, tmp_path) == "out\nerr\n"
    [(command, cwd, timeout)] = calls
    assert command == [sys.executable, "-m", "course.check", "5", "--steps-dir", str(tmp_path)], command
    assert cwd == experiments.ROOT and 600 <= timeout, (cwd, timeout)  # minutes for a cold step, never for ever


def test_help_names_the_command_its_first_line_and_each_option(capsys):
    """--help: the command instructors type, the docstring's first paragraph as the description, what each option
    does"""
    paragraphs = experiments.__doc__.split("\n\n")
    assert_help(experiments.main, capsys, "python -m course.authoring.experiments [-h]", paragraphs[0], paragraphs[1][:40], (
        ("only", "run only the scripts whose file name contains one of these"),
        ("--write", "rewrite the pages' output blocks from real runs"),
        ("--check-outputs", "the pages' `pixi run sNN` outputs instead")))
