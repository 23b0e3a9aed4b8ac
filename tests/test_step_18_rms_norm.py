"""Step 18 · RMSNorm against Hugging Face's LlamaRMSNorm and a Llama layer's input_layernorm.

Tolerance: the harness default, 1e-4 + 1e-4·|expected|. Measured worst case |Δ| on
solutions/ (float32 noise): 4.8e-7 at width 64, 1.9e-6 at SmolLM2's 576 (values of
size ~3). The input's tokens have a mean of 1.5 and a spread of 3, so subtracting the
mean (LayerNorm's way) changes the output by about 0.5 of its size; the last token of
each sequence is nearly zero (mean square ~1e-6, a tenth of eps), so where eps goes and
which eps is used decide its output. The common wrong RMSNorms are computed in NumPy
below, so that a ✗ names the mistake and its TODO.
"""

from __future__ import annotations

import numpy as np
import pytest
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm

from harness import Mistake, assert_close, attribute, build, forward, load_weights
from reference import LLAMA_CONFIGS, hidden_states, llama_hf_config, run, seeded, to_max_state

pytestmark = pytest.mark.step18

#: The eps an RMSNorm gets when it is built without the config's (SmolLM2's 1e-5).
DEFAULT_EPS = 1e-5


def _inputs(width: int) -> np.ndarray:
    """Two sequences of 7 tokens around 1.5; the last token of each is nearly zero (mean square ~1e-6)."""
    x = hidden_states(2, 7, width, scale=3.0) + 1.5
    x[:, -1] = hidden_states(2, width, seed=5, scale=1e-3)
    return x


def mistakes(x: np.ndarray, weight: np.ndarray, eps: float) -> list[Mistake]:
    """The common wrong RMSNorms, computed in NumPy on the check's own input and weight."""
    x = x.astype(np.float64)
    mean_square = (x * x).mean(axis=-1, keepdims=True)
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return [
        Mistake(
            "the mean is subtracted, as in LayerNorm: (x - mean) / sqrt(var + eps); RMSNorm divides x itself "
            "by sqrt(mean(x²) + eps)", [2, 3],
            lambda: (x - mean) / np.sqrt(var + eps) * weight,
        ),
        Mistake(
            "x is divided by sqrt(var + eps), its spread around the mean; RMSNorm uses the mean of the squares "
            "of x itself, mean(x²), with nothing subtracted", 2,
            lambda: x / np.sqrt(var + eps) * weight,
        ),
        Mistake(
            "the squares are summed, not averaged: mean(x²) divides their sum by the width", 2,
            lambda: x / np.sqrt((x * x).sum(axis=-1, keepdims=True) + eps) * weight,
        ),
        Mistake(
            "the mean of the squares runs over axis 1 (the tokens); each token is normalized on its own, over "
            "the last axis", 2,
            lambda: x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * weight,
        ),
        Mistake(
            "eps is added outside the square root, x / (sqrt(mean(x²)) + eps); it belongs inside, "
            "sqrt(mean(x²) + eps)", 3,
            lambda: x / (np.sqrt(mean_square) + eps) * weight,
        ),
        Mistake(
            "eps is left out: sqrt(mean(x²) + eps) keeps a nearly zero token from being divided by ~0", 3,
            lambda: x / np.sqrt(mean_square) * weight,
        ),
        Mistake(
            "the square root is left out: x / (mean(x²) + eps) divides by the mean square itself", 3,
            lambda: x / (mean_square + eps) * weight,
        ),
        Mistake(
            "the scale is (1 + weight), as in Gemma's RMSNorm; Llama's multiplies by weight itself", 3,
            lambda: x / np.sqrt(mean_square + eps) * (1.0 + weight),
        ),
        Mistake(
            "weight is not applied: multiply the normalized x by self.weight", 3,
            lambda: x / np.sqrt(mean_square + eps),
        ),
        *(
            Mistake(
                f"the output matches eps = {other:g}, not the eps = {eps:g} this RMSNorm was given: use self.eps "
                f"(its default is SmolLM2's 1e-5)", 3,
                lambda other=other: x / np.sqrt(mean_square + other) * weight,
            )
            for other in (1e-5, 1e-6)  # hard-coded, or Llama 2's and LlamaRMSNorm's default
            if other != eps
        ),
    ]


def _check(step, reference: LlamaRMSNorm, what: str, **kwargs):
    width = reference.weight.shape[0]
    seeded(reference, seed=width)
    mine = build(attribute(step, "RMSNorm"), width, **kwargs)
    state = to_max_state(reference)
    load_weights(mine, state, model="Llama")
    x = _inputs(width)
    wrong = mistakes(x, state["weight"], reference.variance_epsilon)
    assert_close(forward(mine, x), run(reference, x), what, mistakes=wrong, step=step)


@pytest.mark.parametrize("width", [64, 576])
def test_matches_llama_rms_norm(step, width):
    """matches Hugging Face's LlamaRMSNorm with SmolLM2's eps=1e-5"""
    _check(step, LlamaRMSNorm(width, eps=DEFAULT_EPS), f"RMSNorm({width}) vs LlamaRMSNorm")


def test_uses_given_eps(step):
    """uses the eps it is given"""
    _check(step, LlamaRMSNorm(64, eps=1e-3), "RMSNorm(64, eps=1e-3) vs LlamaRMSNorm(64, eps=1e-3)", eps=1e-3)


@pytest.mark.parametrize("name", list(LLAMA_CONFIGS))
def test_matches_llama_input_layernorm(step, name):
    """matches Hugging Face LlamaDecoderLayer.input_layernorm"""
    config = llama_hf_config(**LLAMA_CONFIGS[name])
    norm = LlamaDecoderLayer(config, layer_idx=0).input_layernorm
    _check(step, norm, f"RMSNorm vs Hugging Face LlamaDecoderLayer.input_layernorm ({name})", eps=config.rms_norm_eps)
