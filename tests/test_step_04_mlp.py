"""Step 04 · MLP against Hugging Face's GPT2MLP.

Measured worst case |Δ| on solutions/: about 1e-5 at GPT-2 small's width (values of
size ~10), 1e-6 on the small config.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.models.gpt2.modeling_gpt2 import GPT2MLP

from harness import Mistake, assert_close, attribute, build, forward, load_weights, solution
from reference import CONFIGS, SMALL, hf_config, hidden_states, run, seeded, to_max_state

pytestmark = pytest.mark.step04

VARIANTS = {
    "small": CONFIGS["small"],
    "gpt2-small": CONFIGS["gpt2-small"],
    # n_inner == n_embd makes c_fc and c_proj square: a weight used without its
    # transpose no longer fails on shape, only on the numbers.
    "square": dict(SMALL, n_inner=SMALL["n_embd"]),
}


def mistakes(reference: GPT2MLP, x: np.ndarray) -> list[Mistake]:
    """The common wrong MLPs, computed with the reference's own layers on the check's input."""
    c_fc, c_proj = reference.c_fc, reference.c_proj

    def mlp(first, activation, second):
        return lambda: run(lambda h: second(activation(first(h))), x)

    found = [
        Mistake(
            "the GELU is the exact, erf-based one; GPT-2 uses its tanh approximation (approximate=\"tanh\")", 3,
            mlp(c_fc, torch.nn.functional.gelu, c_proj),
        ),
        Mistake("the activation is a ReLU; GPT-2 uses the tanh GELU", 3, mlp(c_fc, torch.relu, c_proj)),
        Mistake("no activation between c_fc and c_proj; GPT-2 applies the tanh GELU there", 3,
                mlp(c_fc, lambda h: h, c_proj)),
    ]
    if c_fc.weight.shape[0] == c_fc.weight.shape[1]:  # square: the two layers fit either way round
        found.append(Mistake("c_proj runs before c_fc; expand with c_fc first, then project back with c_proj", 3,
                             mlp(c_proj, reference.act, c_fc)))
    return found


@pytest.mark.parametrize("name", list(VARIANTS))
def test_matches_gpt2_mlp(step, name):
    """MLP matches Hugging Face GPT2MLP on the same weights"""
    sizes = VARIANTS[name]
    hf = hf_config(**sizes)
    reference = seeded(GPT2MLP(hf.n_inner or 4 * hf.n_embd, hf), seed=4)
    config = solution(1).GPT2Config.from_hf(hf)
    mine = build(attribute(step, "MLP"), config)
    load_weights(mine, to_max_state(reference))
    x = hidden_states(2, 5, hf.n_embd)
    assert_close(
        forward(mine, x),
        run(reference, x),
        f"MLP output vs Hugging Face GPT2MLP ({name})",
        mistakes=mistakes(reference, x),
        step=step,
    )
