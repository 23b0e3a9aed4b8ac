"""Chapter 16's one-op repro (``course/authoring/one_row.py``): one row times a weight matrix, four ways.

Its times are measurements, so these checks hold what is not: ``timed`` against a clock the test
advances (the median of the timed calls, after five warm-up calls), and ``main`` with a ``timed`` that
answers a known time, so that every cell of its table can be worked out here: the milliseconds, the
GB/s of the weight's bytes, the compile time from the test's clock, and each form's largest |Δ| from
NumPy's ``x @ W.T``, which the forms compute for real (four small graphs, compiled once and cached).
"""

from __future__ import annotations

import argparse
import re
from types import SimpleNamespace

import numpy as np
import pytest

from course.authoring import one_row
from harness import assert_help

pytestmark = pytest.mark.course

FORMS = ["x @ Wᵀ (step 15's Linear)", "W @ xᵀ (step 16's one_row)", "(W * x).sum(-1) (fused)",
         "Mojo kernel (one_row_kernel)"]


class Clock:
    """A stand-in for time.perf_counter: each reading returns the time, then moves it on by ``step`` seconds."""

    def __init__(self, step: float = 0.0):
        self.now, self.step = 100.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now - self.step


@pytest.mark.parametrize("durations, median", [([0.003, 0.001, 0.002], 0.002), ([0.004, 0.001, 0.002, 0.010], 0.003)])
def test_timed_is_the_median_of_the_calls_after_five_warm_ups(monkeypatch, durations, median):
    """timed(fn, calls) calls fn five times untimed, then ``calls`` times, and returns the median of those (the mean
    of the middle two for an even count); the warm-up calls, each 9 s long here, never reach it"""
    clock, calls = Clock(), []

    def fn():
        calls.append(clock.now)
        clock.now += 9.0 if len(calls) <= 5 else durations[len(calls) - 6]

    monkeypatch.setattr(one_row, "time", SimpleNamespace(perf_counter=clock))  # MAX keeps the real one
    got = one_row.timed(fn, len(durations))
    assert len(calls) == 5 + len(durations), f"fn ran {len(calls)} times, expected 5 warm-ups and {len(durations)}"
    assert got == pytest.approx(median, abs=1e-9), f"timed gave {got}, expected the median {median} of {durations}"


def _rows(out: str) -> dict[str, list[str]]:
    """The table's rows by name: the cells after the name, split on spaces."""
    rows = {}
    for line in out.splitlines():
        for name in ["NumPy x @ W.T", "NumPy W.sum() (one thread)", *FORMS]:
            if line.startswith(name):
                rows[name] = line[len(name):].split()
    return rows


def test_main_prints_each_form_with_its_time_bandwidth_compile_and_error(monkeypatch, capsys, mojo_kernels):
    """main's table: each row's ms and GB/s from the time timed gives (2.5 ms here) and the weight's bytes, each form's
    compile time from the clock around its compile (1.5 s a reading here), and each form's largest |Δ| from NumPy's
    x @ W.T, computed by its compiled graph (4,001 rows of 24: the kernel's groups of four rows and 16 columns have
    leftovers); the header names the shapes, the megabytes and the number of calls, which reach timed"""
    asked, results = [], []

    def timed(fn, calls):
        results.append(np.asarray(fn()))  # each row's work runs once, as timed would run it
        asked.append(calls)
        return 0.0025

    monkeypatch.setattr(one_row, "timed", timed)
    monkeypatch.setattr(one_row, "time", SimpleNamespace(perf_counter=Clock(step=1.5)))
    assert one_row.main(["--rows", "4001", "--width", "24", "--calls", "7"]) == 0
    out = capsys.readouterr().out
    product, total, *forms = results  # what each row timed: NumPy's x @ W.T, NumPy's sum, then each form's graph
    assert product.shape == (1, 4001) and total.shape == () and [f.shape for f in forms] == [(1, 4001)] * 4, (
        f"the rows timed results of shapes {[r.shape for r in results]}, expected x @ W.T's [1, 4001], a sum, "
        f"and four [1, 4001]")
    worst = max(float(np.abs(f - product).max()) for f in forms)
    assert worst <= 1e-5 and abs(float(total)) > 0, f"a form's timed call is {worst} from x @ W.T, or the sum is 0"
    nbytes = 4001 * 24 * 4  # 0.38 MB
    assert out.splitlines()[0] == "one row [1, 24] times a weight [4001, 24] (0 MB), median of 7 calls", out
    assert re.split(r"\s{2,}", out.splitlines()[1].strip()) == ["ms", "GB/s", "compile s", "max |Δ| vs NumPy"], out
    rows = _rows(out)
    gb_s = f"{nbytes / 1e9 / 0.0025:.1f}"  # 0.2
    assert rows.pop("NumPy x @ W.T") == ["2.500", gb_s] and rows.pop("NumPy W.sum() (one thread)") == ["2.500", gb_s], out
    assert list(rows) == FORMS, f"the forms' rows are {list(rows)}, expected {FORMS}:\n{out}"
    for name, cells in rows.items():
        assert cells[:3] == ["2.500", gb_s, "1.5"], f"{name}: {cells[:3]}, expected 2.500 ms, {gb_s} GB/s, 1.5 s:\n{out}"
        assert float(cells[3]) <= 1e-5, f"{name} is {cells[3]} from NumPy's x @ W.T (bound 1e-5):\n{out}"
    assert asked == [7] * 6, f"timed was asked for {asked} calls, expected 7 for each of the 6 rows"
    # the same matrix and row from run to run: the table again, to the digit
    results.clear()
    one_row.main(["--rows", "4001", "--width", "24", "--calls", "7"])
    assert capsys.readouterr().out == out, "a second run printed another table: the matrix or the row changed"


def test_main_refuses_nothing_and_defaults_to_the_head(monkeypatch):
    """with no arguments main times GPT-2's head, [50257, 768], over 50 calls (read from its parsed arguments)"""
    parsed = []

    class Parsed(Exception):
        pass

    def parse_args(self, argv=None):
        parsed.append(argparse.ArgumentParser.parse_known_args(self, argv)[0])
        raise Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_args)
    with pytest.raises(Parsed):
        one_row.main([])
    assert vars(parsed[0]) == {"rows": 50257, "width": 768, "calls": 50}, vars(parsed[0])


def test_help_names_the_command_and_its_first_line(capsys):
    """--help: the command learners type, the docstring's first line, alone, as the description, and what --rows and
    --width are"""
    lines = one_row.__doc__.splitlines()
    assert_help(one_row.main, capsys, "python -m course.authoring.one_row", lines[0], lines[2], (
        ("--rows ROWS", "the weight's rows (out); 50257 is GPT-2's head"), ("--width WIDTH", "the weight's width (in)")))
