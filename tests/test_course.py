"""Checks of the course itself: steps/ is rendered, every stub fails well, and the
checks catch planted bugs. They run on a scratch copy, never on your steps/."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from transformers.models.gpt2.modeling_gpt2 import GPT2MLP

from course import render
from course.outline import ROOT, SOLUTIONS, available, step_path
from harness import assert_close, build, forward, load_weights, solution
from reference import SMALL, hf_config, hidden_states, run, seeded, to_max_state

pytestmark = pytest.mark.course

#: Bugs planted in a copy of a solution:
#: (step, the code as written, the buggy code, what the check must then report).
PLANTED = {
    "exact GELU instead of tanh": (4, 'approximate="tanh"', 'approximate="none"', r"max \|Δ\| = "),
    "wrong LayerNorm epsilon": (3, "eps: float = 1e-5", "eps: float = 1e-6", r"max \|Δ\| = "),
    "causal mask off by one": (2, "num_upper=past_len,", "num_upper=past_len + 1,", r"expected -inf"),
}


def _python(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=900, check=False
    )


def test_steps_are_rendered_from_solutions():
    """steps/ is exactly what `python -m course.render` makes of solutions/"""
    problems = render.stale()
    assert not problems, (
        "; ".join(problems) + ". Instructors: run `python -m course.render`. Learners: this is "
        "expected once you edit steps/; check your work with `pixi run sNN` instead."
    )


def test_render_keeps_a_learners_edits(tmp_path):
    """render never overwrites an edited stub unless forced, and restores a deleted one"""
    render.render_all(tmp_path)
    edited = tmp_path / "step_04_mlp.py"
    edited.write_text(edited.read_text() + "# my work\n")
    (tmp_path / "step_01_config.py").unlink()
    written, kept = render.render_all(tmp_path)
    assert kept == ["step_04_mlp.py"] and written == ["step_01_config.py"]
    assert edited.read_text().endswith("# my work\n")
    render.render_all(tmp_path, force=True)
    assert not edited.read_text().endswith("# my work\n")


@pytest.fixture(scope="module")
def stubs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("stubs")
    written, kept = render.render_all(out)
    assert written and not kept
    return out


@pytest.mark.parametrize("number", available())
def test_stub_fails_with_a_hint(stubs, number):
    """each stub fails its own check, names a TODO, and prints no traceback"""
    result = _python("-m", "course.check", str(number), "--steps-dir", str(stubs))
    output = result.stdout + result.stderr
    assert result.returncode == 1, f"exit code {result.returncode}, expected 1 (checks failed):\n{output}"
    assert "✗" in output and re.search(r"TODO \d+(, \d+)* in ", output), f"no ✗ line naming a TODO:\n{output}"
    assert "Traceback" not in output, f"a traceback reached the learner:\n{output}"
    assert "could not load" not in output and "internal error" not in output, output


def test_copied_solutions_pass_as_steps(tmp_path):
    """the control for the planted bugs: unchanged solutions pass when checked as steps/"""
    for path in SOLUTIONS.glob("step_*.py"):
        (tmp_path / path.name).write_text(path.read_text())
    result = _python("-m", "course.check", "all", "--steps-dir", str(tmp_path))
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "✗" not in output, output


@pytest.mark.parametrize("bug", list(PLANTED))
def test_planted_bug_is_caught(tmp_path, bug):
    """a known bug planted in a copy of a solution fails that step's check, for that reason"""
    number, good, bad, report = PLANTED[bug]
    original = step_path(number)
    source = original.read_text()
    assert source.count(good) == 1, f"the planted bug needs exactly one `{good}` in {original.name}"
    (tmp_path / original.name).write_text(source.replace(good, bad))
    result = _python("-m", "course.check", str(number), "--steps-dir", str(tmp_path))
    output = result.stdout + result.stderr
    assert result.returncode == 1, f"the check passed with the bug planted:\n{output}"
    assert re.search(report, output), f"the check failed, but not with /{report}/:\n{output}"
    assert "Traceback" not in output, output


def test_missing_transpose_is_caught():
    """weights loaded without the Conv1D transpose fail the MLP check, even when square"""
    hf = hf_config(**SMALL, n_inner=SMALL["n_embd"])
    reference = seeded(GPT2MLP(hf.n_inner, hf), seed=4)
    untransposed = {
        name: np.ascontiguousarray(value.T) if value.ndim == 2 else value
        for name, value in to_max_state(reference).items()
    }
    mlp = build(solution(4).MLP, solution(1).GPT2Config.from_hf(hf))
    load_weights(mlp, untransposed)
    x = hidden_states(2, 5, hf.n_embd)
    with pytest.raises(pytest.fail.Exception, match=r"max \|Δ\|"):
        assert_close(forward(mlp, x), run(reference, x), "MLP with untransposed weights")
