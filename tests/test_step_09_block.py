"""Step 09 · Block against Hugging Face's GPT2Block under the causal mask.

``GPT2Block`` on its own is not causal (``GPT2Model`` builds the mask), so the
reference is given the mask ``GPT2Model`` would build. The block's parts
(LayerNorm, attention, MLP, residual) come from solutions/, so only the learner's
wiring is graded: the four sublayers, their names, the config's epsilon and MLP
width, and the order of the two branches. One variant sets ``n_inner`` and a large
``layer_norm_epsilon`` (0.1) so that a hard-coded width or epsilon shows: with
GPT-2's 1e-5 an epsilon ignored moves the output by ~1e-5 relative, inside the
noise of a block whose stream has variance ~4.

Tolerance: the harness default, 1e-4 + 1e-4·|expected|. Measured worst case |Δ| on
solutions/: 5e-6 to 7e-6 on the small config (it varies from run to run), 2e-5 at
GPT-2 small's width, 4e-6 with n_inner (outputs of size ~10, where the tolerance is
~1e-3). ``ln_2`` built with the default epsilon instead of the config's 0.1 is off
by 0.046 (50× the tolerance there); swapped or missing branches by ~1.
"""

from __future__ import annotations

import pytest
from transformers.models.gpt2.modeling_gpt2 import GPT2Block

from harness import assert_close, attribute, build, forward, load_weights, solution
from reference import CONFIGS, SMALL, hf_config, hidden_states, run_masked, seeded, to_max_state

pytestmark = pytest.mark.step09

VARIANTS = {
    **CONFIGS,
    "n_inner=48, eps=0.1": dict(SMALL, n_inner=48, layer_norm_epsilon=0.1),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_matches_gpt2_block(step, name):
    """Block matches Hugging Face GPT2Block on the same weights"""
    hf = hf_config(**VARIANTS[name])
    reference = seeded(GPT2Block(hf, layer_idx=0), seed=9)
    mine = build(attribute(step, "Block"), solution(1).GPT2Config.from_hf(hf))
    load_weights(mine, to_max_state(reference))
    x = hidden_states(2, 7, hf.n_embd, scale=2.0) + 0.5
    assert_close(forward(mine, x), run_masked(reference, x), f"Block output vs Hugging Face GPT2Block ({name})")
