"""The report a learner reads from ``pixi run sNN``: ``course/check/runner.py`` on a fake step, in this process.

Each run is the runner's own ``check`` (pytest with the learner's report instead of pytest's
output) on FAKE_STEP, with MAX's cache in a scratch folder and the report written off a
terminal (as in CI, an editor's run pane, or ``| tee``), where progress is a plain line.
"""

from __future__ import annotations

import io
import os
import re
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from course.check import runner
from course.check.hints import versions
from course.outline import OUTLINE, ROOT, check_command

pytestmark = pytest.mark.course

FAKE_STEP = '''
import os
import time
from pathlib import Path

import pytest


def test_quick(record_property):
    """a quick check"""
    record_property("max_delta", 1.5e-6)
    record_property("argmax_agreement", "12/12")


def test_slow():
    """a slow check"""
    cache = Path(os.environ["MODULAR_CACHE_DIR"])
    (cache / ".max_cache").mkdir(parents=True, exist_ok=True)
    (cache / ".max_cache" / "mef.lock-1a2b3c4d").write_bytes(bytes(8))  # a warm run takes a lock
    (cache / "course-graphs").mkdir(parents=True, exist_ok=True)  # and may keep a graph MAX had cached
    (cache / "course-graphs" / "Model-0123.mef").write_bytes(bytes(1000))
    if os.environ["FAKE_COMPILE"]:  # and a cold one writes a kernel
        (cache / ".mogg_cache").mkdir(parents=True, exist_ok=True)
        (cache / ".mogg_cache" / "kernel.so").write_bytes(bytes(1000))
    time.sleep(2.6)


def test_wrong():
    """a failing check"""
    for row in range(14):
        print(f"row {row}")
    pytest.fail("the numbers differ", pytrace=False)


def test_wrong_shape():
    """another failing check"""
    pytest.fail("shape [2, 3], expected [3, 2]", pytrace=False)


@pytest.mark.parametrize("n", [1, 2])
def test_needs_gpt2(n):
    """a check that needs GPT-2's files"""
    pytest.skip("GPT-2's files are not here; `hf download gpt2` (550 MB, once) makes this check run")


def test_needs_a_gpu():
    """a check that needs a GPU"""
    pytest.skip("no GPU here: an NVIDIA GPU runs this check")
'''


def report(folder: Path, files: list[str], args: list[str] = (), compiles: bool = False, every: float = 1.0,
           quiet: float = 0.5, terminal: bool = False, report_to: Console | None = None) -> tuple[int, str]:
    """(exit code, what the learner reads) of the runner's check on ``files``, MAX's cache in ``folder/cache`` (which
    holds a kernel already); with ``terminal``, as a terminal shows it (rich's control codes and all); with
    ``report_to``, the ✓ and ✗ lines go there, the progress alone to the text returned."""
    out = io.StringIO()
    console = Console(file=out, highlight=False, soft_wrap=True, force_terminal=terminal or None)
    earlier = folder / "cache" / ".mogg_cache" / "earlier.so"  # a kernel an earlier check compiled
    earlier.parent.mkdir(parents=True, exist_ok=True)
    earlier.write_bytes(bytes(5000))
    progress = runner.Progress(folder / "cache", every=every, quiet=quiet)
    progress.out = console
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runner, "console", console if report_to is None else report_to)
        patch.setenv("MODULAR_CACHE_DIR", str(folder / "cache"))
        patch.setenv("FAKE_COMPILE", "1" if compiles else "")
        for file in files:  # each run imports its own test_fake_step.py, not the module an earlier run left
            patch.delitem(sys.modules, Path(file).stem, raising=False)
        # The fake step's folder is the run's root, wherever the course lies (a clone under /tmp would otherwise make
        # /tmp the root, and -k would match the words of tmp_path's own name).
        code = runner.check(files, "Fake step", "it", [*args, "--import-mode=importlib", "--rootdir", str(folder)],
                            progress)
    return code, out.getvalue()


def masked(text: str) -> str:
    """The report without its times (``(2.6 s`` as ``(T s``) and its progress lines."""
    return re.sub(r"\((\d+)\.\d s", "(T s", "".join(line for line in text.splitlines(keepends=True)
                                                    if not line.startswith("  … ")))


@pytest.mark.parametrize("compiles", [False, True], ids=["warm", "compiling"])
def test_each_check_is_one_line_and_the_verdict_counts_them(tmp_path, compiles):
    """a ✓ line with the time and the worst mismatch, a ✗ line with its reason and the last 12 lines the check
    printed, each skip reason once, a verdict that counts checks, failures and skips; off a terminal, a slow check
    says it is still running each interval, once it has run for the quiet time, and MAX's compiling is said once,
    when the check writes a kernel into MAX's cache (not on a warm run, which takes locks and may write the course's
    own MEF file of a graph MAX had cached)"""
    (tmp_path / "test_fake_step.py").write_text(FAKE_STEP)
    started = time.perf_counter()
    code, text = report(tmp_path, [str(tmp_path / "test_fake_step.py")], compiles=compiles)
    took = time.perf_counter() - started
    verdict = float(re.search(r"\((\d+\.\d) s\)\n$", text)[1])
    assert 2.6 <= verdict <= took + 0.05, f"the verdict says {verdict} s, for a run of {took:.2f} s with a 2.6 s check"
    assert code == 1 and masked(text) == "".join(f"{line}\n" for line in [
        "✓ a quick check (T s, max |Δ| 1.5e-06, argmax agrees 12/12)",
        "✓ a slow check (T s)",
        "✗ a failing check",
        "  the numbers differ",
        "  your code printed:",
        *(f"  │ row {row}" for row in range(2, 14)),
        "✗ another failing check",
        "  shape [2, 3], expected [3, 2]",
        "- a check that needs GPT-2's files [1] (skipped)",
        "  GPT-2's files are not here; `hf download gpt2` (550 MB, once) makes this check run",
        "- a check that needs GPT-2's files [2] (skipped)",
        "- a check that needs a GPU (skipped)",
        "  no GPU here: an NVIDIA GPU runs this check",
        "Fake step: 2 of 7 checks fail, 3 skipped: GPT-2's files are not here; no GPU here. Fix the first ✗ above, "
        "then run it again. (T s)"]), text
    running = re.findall(r"^  … still running: (.+) \((\d+) s\)$", text, re.MULTILINE)
    seconds = [int(s) for _, s in running]
    assert {title for title, _ in running} == {"a slow check"} and seconds[:2] == [1, 2] and seconds == sorted(
        set(seconds)), f"not one line a second for the slow check alone: {running}\n{text}"
    assert text.count(f"  … {runner.COMPILING}\n") == compiles and text.count("MAX is compiling") == compiles, text


@pytest.mark.parametrize("compiles", [False, True], ids=["warm", "compiling"])
def test_on_a_terminal_a_slow_check_has_a_status_line(tmp_path, compiles):
    """on a terminal, a slow check shows one status line, updated in place: its time and name, and whether MAX is
    compiling; it is cleared before the check's ✓ line is written, and no plain progress line is printed"""
    (tmp_path / "test_fake_step.py").write_text(FAKE_STEP)
    code, text = report(tmp_path, [str(tmp_path / "test_fake_step.py")], ["-k", "slow"], compiles, terminal=True)
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    news = "MAX is compiling a new kernel (once) · " if compiles else ""
    shown = re.findall(r"[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] (\d+ s · .+?)(?=\r|\n)", plain)
    assert code == 0 and f"1 s · {news}a slow check" in shown and f"2 s · {news}a slow check" in shown, plain
    assert set(shown) <= {f"{n} s · {news}a slow check" for n in range(4)}, plain
    assert "still running" not in plain and runner.COMPILING not in plain, plain
    # after the last status text: the cursor up a line, and that line erased
    cleared = text.find("\x1b[1A\x1b[2K", text.rindex("a slow check\x1b[0m"))
    assert 0 <= cleared < text.index("✓"), f"the status line is not cleared before the ✓ line:\n{text!r}"


def test_the_status_line_leaves_stdout_to_the_report(tmp_path, capsys):
    """the terminal's status line never takes stdout over: the ✓ line and the verdict, written to stdout as it is at
    each print (the runner's own console), still reach it after the status line is gone"""
    (tmp_path / "test_fake_step.py").write_text(FAKE_STEP)
    to_stdout = Console(highlight=False, soft_wrap=True)
    code, text = report(tmp_path, [str(tmp_path / "test_fake_step.py")], ["-k", "slow"], terminal=True,
                        report_to=to_stdout)
    assert code == 0 and "a slow check" in text, text
    assert masked(capsys.readouterr().out) == "✓ a slow check (T s)\nFake step: all 1 checks pass (T s)\n"


def test_progress_writes_past_pytests_capture(tmp_path, capfd, monkeypatch):
    """the progress console writes to a copy of the process's stdout, made before pytest captures a check's output (at
    its file descriptor and at sys.stdout): in UTF-8 under an ASCII locale too, and a long line as one line; where
    stdout is no file, the runner's own console"""
    import locale
    import tempfile

    before = locale.setlocale(locale.LC_ALL)
    locale.setlocale(locale.LC_ALL, "C")  # a terminal whose locale's encoding is ASCII
    try:
        out = runner.Progress(tmp_path).out
    finally:
        locale.setlocale(locale.LC_ALL, before)
    long = "… still running: é ✓ " + "a very long check's name " * 6
    with tempfile.TemporaryFile() as captured:  # a check's capture, as pytest's: fd 1 and sys.stdout elsewhere
        stdout = os.dup(1)
        os.dup2(captured.fileno(), 1)
        monkeypatch.setattr(sys, "stdout", io.StringIO())
        try:
            out.print(long)
        finally:
            os.dup2(stdout, 1)
            os.close(stdout)
        assert captured.seek(0) == 0 and captured.read() == b"" and sys.stdout.getvalue() == ""
    assert capfd.readouterr().out == long + "\n"
    assert runner._uncaptured_console() is runner.console  # sys.stdout, a StringIO here, has no file descriptor


def test_a_quiet_check_shows_no_progress(tmp_path):
    """a check that ends within the quiet time shows no progress line, and a run where all pass says so"""
    (tmp_path / "test_fake_step.py").write_text(FAKE_STEP)
    code, text = report(tmp_path, [str(tmp_path / "test_fake_step.py")], ["-k", "slow"], quiet=5.0)
    assert code == 0 and "…" not in text, text
    assert masked(text) == "✓ a slow check (T s)\nFake step: all 1 checks pass (T s)\n", text


COURSE_FAULT = '''
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    result = outcome.get_result()
    if result.failed and "course" in item.name:  # as tests/conftest.py marks a failure the course itself raised
        result.course_fault, result.course_reason = True, "the course's check failed — not your code"
    elif result.failed:  # and gives a learner's failure its reason in plain words
        result.course_reason = "the values differ by 0.5 — TODO 2 in steps/step_99_example.py"
'''
BROKEN_CHECK = '''

@pytest.mark.parametrize("n", [1, 2])
def test_course_broke(n):
    """a check the course broke"""
    raise KeyError("h.0.attn.c_attn.weight")
'''


def test_the_courses_own_failure_is_marked_apart(tmp_path):
    """a failure the course raised itself is marked ! with its reason, counted apart from the learner's ✗ (which
    gives the checks' own reason), and blamed on the course"""
    (tmp_path / "conftest.py").write_text(COURSE_FAULT)
    (tmp_path / "test_fake_step.py").write_text(FAKE_STEP + BROKEN_CHECK)
    code, text = report(tmp_path, [str(tmp_path / "test_fake_step.py")], ["-k", "quick or course_broke"])
    broken = "".join(f"! a check the course broke [{n}]\n  the course's check failed — not your code\n"
                     for n in (1, 2))
    assert code == 1 and masked(text) == (
        "✓ a quick check (T s, max |Δ| 1.5e-06, argmax agrees 12/12)\n" + broken +
        "Fake step: 2 of 3 checks could not run because the course itself failed (marked !) — not your code; "
        f"{runner.REPORT_TO}.\n"
        "Fake step: the other 1 checks pass. (T s)\n"), text
    code, text = report(tmp_path, [str(tmp_path / "test_fake_step.py")], ["-k", "wrong_shape or course_broke"])
    assert code == 1 and masked(text) == (
        "✗ another failing check\n  the values differ by 0.5 — TODO 2 in steps/step_99_example.py\n" + broken +
        "Fake step: 2 of 3 checks could not run because the course itself failed (marked !) — not your code; "
        f"{runner.REPORT_TO}.\n"
        "Fake step: 1 of 1 checks fail. Fix the first ✗ above, then run it again. (T s)\n"), text


def test_checks_that_cannot_load_are_the_courses_fault(tmp_path):
    """a test file that does not import is the course's fault, with the error's last line, and no check ran (not
    "interrupted", as pytest's exit code has it); no checks selected is said too"""
    (tmp_path / "test_broken.py").write_text("import course_module_that_does_not_exist\n")
    code, text = report(tmp_path, [str(tmp_path / "test_broken.py")])
    assert code == 2 and masked(text) == (
        f"✗ the course's checks in test_broken.py could not load ({versions()}): E   ModuleNotFoundError: No module "
        f"named 'course_module_that_does_not_exist' — not your code; {runner.REPORT_TO}\n"
        "Fake step: no check ran. (T s)\n"), text
    (tmp_path / "test_fake_step.py").write_text(FAKE_STEP)
    code, text = report(tmp_path, [str(tmp_path / "test_fake_step.py")], ["-k", "nothing_has_this_name"])
    assert code == 5 and masked(text) == "✗ no checks were selected\nFake step: no check ran. (T s)\n", text


def test_an_interrupted_run_says_how_far_it_got(tmp_path):
    """Ctrl-C: the verdict says the run was interrupted, after how many checks (the course's failures not counted)"""
    (tmp_path / "conftest.py").write_text(COURSE_FAULT)
    (tmp_path / "test_fake_step.py").write_text(FAKE_STEP + BROKEN_CHECK + '\n\ndef test_zz_interrupt():\n'
                                                "    pytest.exit(\"stopped\")  # as Ctrl-C stops pytest\n")
    code, text = report(tmp_path, [str(tmp_path / "test_fake_step.py")],
                        ["-k", "quick or course_broke or zz_interrupt or gpt2"])
    assert code == 2 and masked(text).splitlines()[-1] == (
        "Fake step: interrupted after 1 checks, 2 skipped: GPT-2's files are not here. (T s)"), text


def test_an_internal_error_is_one_line(tmp_path, capfd):
    """an error inside pytest's own machinery (here a hook of the checks') is one ✗ line, no traceback, and no check
    ran"""
    (tmp_path / "conftest.py").write_text(
        "def pytest_collection_modifyitems(items):\n    raise RuntimeError('boom in the checks')\n")
    (tmp_path / "test_fake_step.py").write_text(FAKE_STEP)
    code, text = report(tmp_path, [str(tmp_path / "test_fake_step.py")])
    assert code == 3 and masked(text) == (
        "✗ internal error in the checks: RuntimeError: boom in the checks\nFake step: no check ran. (T s)\n"), text
    printed = capfd.readouterr()
    assert "INTERNALERROR" not in printed.out + printed.err, printed


def test_a_skip_in_a_checks_teardown_does_not_count_it_again(tmp_path):
    """a check whose fixture skips as it tears down passed: it is counted once, as passed"""
    (tmp_path / "test_teardown.py").write_text(
        "import pytest\n\n@pytest.fixture\ndef scratch():\n    yield\n    pytest.skip('nothing to clean')\n\n"
        "def test_clean(scratch):\n    \"\"\"a check that cleans up\"\"\"\n")
    code, text = report(tmp_path, [str(tmp_path / "test_teardown.py")])
    assert code == 0 and masked(text) == "✓ a check that cleans up (T s)\nFake step: all 1 checks pass (T s)\n", text


def test_many_skip_reasons_are_counted_not_repeated(tmp_path):
    """three skip reasons or more are counted in the verdict, each given once above it"""
    (tmp_path / "test_many_skips.py").write_text(
        "import pytest\n\n@pytest.mark.parametrize('why', ['one: a', 'two — b', 'three; c'])\n"
        "def test_skip(why):\n    pytest.skip(why)\n")
    _, text = report(tmp_path, [str(tmp_path / "test_many_skips.py")])
    assert masked(text).splitlines()[-1] == "Fake step: no check ran, 3 skipped: 3 reasons, given above. (T s)", text


@pytest.mark.parametrize(("seconds", "shown"), [(0.4, "0 s"), (45.9, "45 s"), (60, "1 min"), (90.5, "1 min 30 s"),
                                                (3600, "60 min")])
def test_a_duration_in_words(seconds, shown):
    assert runner._duration(seconds) == shown


def test_a_reports_last_line():
    """a failure's reason, when the checks give none, is the last line of pytest's report; none for an empty one"""
    assert runner._last_line("E   first\nE   KeyError: 'x'\n\n") == "E   KeyError: 'x'"
    assert runner._last_line(" \n ") == ""


def test_the_run_checks_the_steps_tests_on_the_learners_folder(tmp_path, monkeypatch):
    """run: one step's or several steps' test files only, on --target's folder, with a heading, the command to
    run again, and the first run's notice when MAX's cache has no kernels yet"""
    calls = []
    monkeypatch.setattr(runner, "check", lambda *args: calls.append(args) or 0)
    monkeypatch.setattr(runner, "max_cache", lambda: tmp_path / "cache")
    out = io.StringIO()
    monkeypatch.setattr(runner, "console", Console(file=out, highlight=False, soft_wrap=True))
    assert runner.run([4], "steps", tmp_path, ["-x"]) == 0
    files, label, again, args, progress = calls[0]
    assert files == [str(ROOT / "tests" / "test_step_04_mlp.py")]
    assert (label, again) == ("Step 04", check_command(4))
    assert args == ["-m", "step04", "--target", "steps", "--steps-dir", str(tmp_path), "-x"]
    assert progress.cache == tmp_path / "cache"
    assert out.getvalue().splitlines() == [
        f"Step 04 · {OUTLINE[4]} (checking {tmp_path}/)",
        "First run on this machine: MAX compiles the kernels it needs (up to a few minutes per step, once; later runs "
        "take seconds)."]
    (tmp_path / "cache" / ".mogg_cache").mkdir(parents=True)
    out.truncate(0)
    out.seek(0)
    runner.run([2, 3], "solutions", tmp_path, [])
    files, label, again, args, _ = calls[1]
    assert files == [str(ROOT / "tests" / f"test_step_{name}.py") for name in ("02_causal_mask", "03_layer_norm")]
    assert (label, again) == ("Steps 02, 03", "`pixi run check 2 3` (or `python -m course.check 2 3`)")
    assert args == ["-m", "step02 or step03", "--target", "solutions", "--steps-dir", str(tmp_path)]
    assert out.getvalue() == f"Steps 02, 03 · {OUTLINE[2]}, {OUTLINE[3]} (checking solutions/)\n"
    out.truncate(0)
    out.seek(0)
    runner.run(runner.available(), "steps", tmp_path, [])
    assert calls[2][2] == "`pixi run check-all` (or `python -m course.check all`)"
    assert out.getvalue() == f"Steps {', '.join(f'{n:02d}' for n in runner.available())} · all available steps (checking {tmp_path}/)\n"


def test_the_command_line_takes_a_step_several_or_all(monkeypatch, capsys):
    """main: 4, 04, several (25 26) or all; anything else is refused naming the range and what was given"""
    calls = []
    monkeypatch.setattr(runner, "run", lambda *args: calls.append(args) or 0)
    for given in ("4", "04"):
        assert runner.main([given, "--target", "solutions", "-k", "mlp"]) == 0
    assert calls[0] == calls[1] == ([4], "solutions", runner.STEPS.resolve(), ["-k", "mlp"])
    assert runner.main(["all", "--steps-dir", "elsewhere"]) == 0
    assert calls[2] == (list(OUTLINE), "steps", (Path.cwd() / "elsewhere").resolve(), [])
    monkeypatch.setattr(runner, "available", lambda: [1, 2])
    assert runner.main(["3"]) == 0 and len(calls) == 3
    assert capsys.readouterr().out == f"Step 03 ({OUTLINE[3]}) is not in the course yet.\n"
    for wrong in ("0", f"{max(OUTLINE) + 1}", "four"):
        with pytest.raises(SystemExit):
            runner.main(["2", wrong])
        assert f"step must be a number from 1 to {max(OUTLINE)}, or 'all', not '{wrong}'" in capsys.readouterr().err
    assert len(calls) == 3, "a wrong step in a list ran the others"
    assert runner.main(["2", "3", "02", "-x"]) == 0  # several, each once, in the order given; pytest's flags after them
    assert calls[3] == ([2], "steps", runner.STEPS.resolve(), ["-x"])
    assert runner.main(["3"]) == 0 and len(calls) == 4  # only steps not in the course yet: nothing runs
    capsys.readouterr()
    for others in (["4", "5"], ["4"]):  # one other step is refused as two are
        with pytest.raises(SystemExit):
            runner.main(["all", *others])
        assert f"'all' checks every step: give it alone, not with {' '.join(others)}" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        runner.main(["4", "--target", "elsewhere"])
    # then the choices, quoted as the Python version quotes them
    assert "argument --target: invalid choice: 'elsewhere'" in capsys.readouterr().err


def test_help_names_the_command_and_its_arguments(capsys):
    """--help: the command as learners type it, what it is, and each argument"""
    with pytest.raises(SystemExit):
        runner.main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for words in ("usage: python -m course.check [-h] [--target {steps,solutions}] [--steps-dir STEPS_DIR] step [step ...]",
                  "The friendly check runner behind ``pixi run sNN``: pytest, reported for learners.",
                  "step a step number (4 or 04), several (25 26), or 'all'", "--steps-dir STEPS_DIR the folder --target steps reads"):
        assert words in shown, f"{words!r} not in {shown!r}"
    assert "It runs the step's pytest checks" not in shown, f"the description is more than its first line: {shown!r}"
