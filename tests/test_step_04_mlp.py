"""Step 04 · MLP against Hugging Face's GPT2MLP.

Measured worst case |Δ| on solutions/: about 1e-5 at GPT-2 small's width (values of
size ~10), 1e-6 on the small config.
"""

from __future__ import annotations

import pytest
from transformers.models.gpt2.modeling_gpt2 import GPT2MLP

from harness import assert_close, attribute, build, forward, load_weights, solution
from reference import CONFIGS, SMALL, hf_config, hidden_states, run, seeded, to_max_state

pytestmark = pytest.mark.step04

VARIANTS = {
    "small": CONFIGS["small"],
    "gpt2-small": CONFIGS["gpt2-small"],
    # n_inner == n_embd makes c_fc and c_proj square: a weight used without its
    # transpose no longer fails on shape, only on the numbers.
    "square": dict(SMALL, n_inner=SMALL["n_embd"]),
}


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
    assert_close(forward(mine, x), run(reference, x), f"MLP output vs Hugging Face GPT2MLP ({name})")
