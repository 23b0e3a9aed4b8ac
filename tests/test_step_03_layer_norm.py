"""Step 03 · LayerNorm against torch.nn.LayerNorm and Hugging Face's ln_1.

Measured worst case |Δ| on solutions/: about 2e-6 (values of size ~3).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.models.gpt2.modeling_gpt2 import GPT2Block

from course.check.hints import todo_label
from harness import Mistake, assert_close, attribute, build, fail, forward, load_weights
from reference import CONFIGS, hf_config, hidden_states, run, seeded, to_max_state

pytestmark = pytest.mark.step03


def _inputs(width: int) -> np.ndarray:
    """Two sequences of tokens; the last token of each is nearly constant (variance ~1e-6)
    so the result depends on eps, as it does for a real token whose values barely vary."""
    x = hidden_states(2, 7, width, scale=3.0) + 1.5
    x[:, -1] = hidden_states(2, width, seed=5, scale=1e-3)
    return x


def mistakes(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> list[Mistake]:
    """The common wrong LayerNorms, computed in NumPy on the check's own input and weights."""
    x = x.astype(np.float64)
    mean = x.mean(axis=-1, keepdims=True)

    var, sample_var = x.var(axis=-1, keepdims=True), x.var(axis=-1, keepdims=True, ddof=1)

    def norm(denominator):
        return (x - mean) / denominator * weight + bias

    return [
        Mistake(
            "the variance divides by n - 1 (the sample variance); LayerNorm's divides by n", 2,
            lambda: norm(np.sqrt(sample_var + eps)),
        ),
        Mistake(
            "eps is added outside the square root, (x - mean) / (sqrt(var) + eps); it belongs inside, "
            "sqrt(var + eps)", 3,
            lambda: norm(np.sqrt(var) + eps),
        ),
        Mistake(
            "eps is left out: sqrt(var + eps) keeps a nearly constant token from being divided by ~0", 3,
            lambda: norm(np.sqrt(var)),
        ),
        *(
            Mistake(
                f"the output matches eps = {other:g}, not the eps = {eps:g} this LayerNorm was given: use self.eps "
                f"(its default is GPT-2's 1e-5)", 3,
                lambda other=other: norm(np.sqrt(var + other)),
            )
            for other in (1e-5, 1e-6)  # hard-coded, or a default changed
            if other != eps
        ),
    ]


def _check(step, torch_norm: torch.nn.LayerNorm, what: str, **kwargs):
    width = torch_norm.normalized_shape[0]
    seeded(torch_norm, seed=width)
    mine = build(attribute(step, "LayerNorm"), width, **kwargs)
    state = to_max_state(torch_norm)
    load_weights(mine, state)
    x = _inputs(width)
    wrong = mistakes(x, state["weight"], state["bias"], torch_norm.eps)
    try:
        assert_close(forward(mine, x), run(torch_norm, x), what, mistakes=wrong, step=step)
    except pytest.fail.Exception as mismatch:
        _diagnose_axis(step, x, torch_norm.eps, mismatch, **kwargs)
        raise


def _diagnose_axis(step, x: np.ndarray, eps: float, mismatch, **kwargs) -> None:
    """Names a reduction over the wrong axis, when that is certain.

    With weight 1 and bias 0, every token whose values vary far more than eps must come
    out with mean 0 and variance 1 over its last axis, whatever eps is. When those
    tokens do not, but the output's mean is 0 over another axis, the statistics were
    taken over that axis.
    """
    cls = attribute(step, "LayerNorm")
    plain = build(cls, x.shape[-1], **kwargs)
    load_weights(plain, {"weight": np.ones(x.shape[-1], np.float32), "bias": np.zeros(x.shape[-1], np.float32)})
    y = forward(plain, x).astype(np.float64)
    varied = x.var(axis=-1) > 1000 * eps  # tokens where eps cannot matter
    mean, var = y.mean(axis=-1)[varied], y.var(axis=-1)[varied]
    if np.abs(mean).max() < 1e-3 and np.abs(var - 1).max() < 1e-2:
        return  # the statistics are right; the mismatch is elsewhere
    others = [axis for axis in range(x.ndim - 1) if np.abs(y.mean(axis=axis)).max() < 1e-3]
    if not others:
        return
    fail(
        f"the statistics were not taken over the last axis: with weight 1 and bias 0 a token's "
        f"output should have mean 0 and variance 1 over its {x.shape[-1]} features, but it has mean "
        f"up to {np.abs(mean).max():.3g} and variance {var.min():.3g}–{var.max():.3g}; the output "
        f"averages to 0 over axis {others[0]} instead (x has shape {list(x.shape)}) — "
        f"{todo_label(2, step.__file__)}. ({mismatch})"
    )


@pytest.mark.parametrize("width", [64, 768])
def test_matches_torch_layer_norm(step, width):
    """matches torch.nn.LayerNorm with GPT-2's eps=1e-5"""
    _check(step, torch.nn.LayerNorm(width, eps=1e-5), f"LayerNorm({width}) vs torch.nn.LayerNorm")


def test_uses_given_eps(step):
    """uses the eps it is given"""
    _check(step, torch.nn.LayerNorm(64, eps=1e-3), "LayerNorm(64, eps=1e-3) vs torch.nn.LayerNorm", eps=1e-3)


#: How far from 0 a token's mean may sit: GPT-2's residual stream has features in the hundreds.
OFFSET = 500.0


def test_a_large_mean_is_subtracted_exactly(step):
    """a token whose mean (500) is large against its spread (1) normalizes as torch.nn.LayerNorm does"""
    width = 768
    torch_norm = torch.nn.LayerNorm(width, eps=1e-5)
    seeded(torch_norm, seed=width)
    mine = build(attribute(step, "LayerNorm"), width)
    load_weights(mine, to_max_state(torch_norm))
    x = hidden_states(2, 7, width, seed=9)
    got, expected = forward(mine, x + OFFSET), run(torch_norm, x + OFFSET)
    worst = float(np.abs(got - expected).max())
    if worst > 1e-2 and float(np.abs(forward(mine, x) - run(torch_norm, x)).max()) < 1e-3:
        fail(f"LayerNorm is right on tokens of mean 0 but off by up to {worst:.3g} once every feature is shifted by "
             f"{OFFSET:g} (LayerNorm subtracts the mean, so the output should not change): the variance is taken in a "
             f"way that cancels in float32, such as E[x²] − E[x]², whose two terms are ~{OFFSET ** 2:.0e} and differ "
             f"by ~1; average the squared deviations from the mean instead — {todo_label(2, step.__file__)}")
    # atol: MAX's float32 mean of 768 values near 500 is itself off by up to ~5e-4 (torch's sums more exactly),
    # and so is every x - mean; a variance that cancels is off by ~1.
    assert_close(got, expected, f"LayerNorm(768) vs torch.nn.LayerNorm, every feature shifted by {OFFSET:g}", atol=2e-3,
                 step=step)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_matches_gpt2_ln_1(step, name):
    """matches Hugging Face GPT2Block.ln_1"""
    config = hf_config(**CONFIGS[name])
    _check(
        step,
        GPT2Block(config).ln_1,
        f"LayerNorm vs Hugging Face GPT2Block.ln_1 ({name})",
        eps=config.layer_norm_epsilon,
    )
