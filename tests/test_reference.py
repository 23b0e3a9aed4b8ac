"""The Hugging Face → MAX weight conversion (tests/reference.py) that every check uses."""

from __future__ import annotations

import numpy as np
import pytest
import transformers

from reference import SMALL, hf_config, seeded, to_max_state

pytestmark = pytest.mark.course


@pytest.fixture(scope="module")
def model():
    return seeded(transformers.GPT2LMHeadModel(hf_config(**SMALL)), seed=3)


def test_conv1d_weights_are_transposed(model):
    """c_attn, c_proj and c_fc arrive as [out, in], equal to Hugging Face's [in, out] transposed"""
    state = to_max_state(model)
    e = SMALL["n_embd"]
    shapes = {"attn.c_attn": (3 * e, e), "attn.c_proj": (e, e), "mlp.c_fc": (4 * e, e), "mlp.c_proj": (e, 4 * e)}
    for layer in range(SMALL["n_layer"]):
        for part, shape in shapes.items():
            name = f"transformer.h.{layer}.{part}.weight"
            assert state[name].shape == shape, f"{name}: {state[name].shape}, expected {shape}"
            hf = model.get_parameter(name).detach().numpy()
            assert np.array_equal(state[name], hf.T), f"{name} is not Hugging Face's weight transposed"
            assert state[name].flags.c_contiguous


def test_everything_else_is_unchanged(model):
    """embeddings, layer norms and biases keep Hugging Face's values and shapes"""
    state = to_max_state(model)
    for name, param in model.named_parameters():
        if not name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
            assert np.array_equal(state[name], param.detach().numpy()), name


def test_tied_head_and_buffers(model):
    """lm_head is tied to wte and appears once; attention mask buffers are not weights"""
    state = to_max_state(model)
    assert model.lm_head.weight is model.transformer.wte.weight
    assert "lm_head.weight" not in state
    assert state["transformer.wte.weight"].shape == (SMALL["vocab_size"], SMALL["n_embd"])
    assert not [name for name in state if name.endswith((".attn.bias", ".attn.masked_bias"))]
