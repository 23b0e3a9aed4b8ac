"""The Hugging Face → MAX weight conversion (tests/reference.py) that every check uses, and the seeded random
weights behind it (course/weights.py): the spreads its docstring promises, seeded and drawn in order.

Spreads are measured on 60,000-value matrices and 20,000-value vectors, so a standard deviation
is within about 1% of its target; the bounds are 5%.
"""

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


# --- course/weights.py: the seeded random weights behind every reference ---------------------------------


def _spread(value: np.ndarray, target: float, what: str) -> None:
    std = float(value.std())
    assert abs(std - target) <= 0.05 * target, f"{what}: standard deviation {std:.4f}, expected {target:.4f} (±5%)"


def test_check_weights_have_the_documented_spreads():
    """check weights: matrices N(0, (1.5/√fan_in)²), fan_in the last axis unless given; layer-norm scales
    1 + N(0, 0.5²); other vectors N(0, 0.5²); float32, never ones or zeros"""
    import math

    from course.weights import random_weights

    shapes = {"h.c_fc.weight": (200, 300), "h.ln_1.weight": (20_000,), "h.ln_1.bias": (20_000,),
              "wte.weight": (300, 200)}
    values = random_weights(shapes, seed=4)
    assert list(values) == list(shapes), f"names {list(values)}, expected {list(shapes)}"
    for name, shape in shapes.items():
        assert values[name].shape == shape and values[name].dtype == np.float32, (name, values[name].shape,
                                                                                 values[name].dtype)
    _spread(values["h.c_fc.weight"], 1.5 / math.sqrt(300), "a [200, 300] matrix (fan_in the last axis)")
    _spread(values["wte.weight"], 1.5 / math.sqrt(200), "a [300, 200] matrix")
    scale, shift = values["h.ln_1.weight"], values["h.ln_1.bias"]
    assert abs(float(scale.mean()) - 1) < 0.02, f"a layer norm's scale has mean {scale.mean():.3f}, expected 1"
    assert abs(float(shift.mean())) < 0.02, f"a bias has mean {shift.mean():.3f}, expected 0"
    _spread(scale, 0.5, "a layer norm's scale")
    _spread(shift, 0.5, "a bias")
    assert not np.any(scale == 1) and not np.any(shift == 0), "check weights hold exact ones or zeros"
    first_axis = lambda name, shape: shape[0] if name.startswith("conv.") else shape[-1]  # noqa: E731
    given = random_weights({"conv.weight": (200, 300)}, seed=4, fan_in=first_axis)
    _spread(given["conv.weight"], 1.5 / math.sqrt(200), "a matrix whose fan_in(name, shape) is its first axis")
    _spread(random_weights({"w": (4, 50, 300)}, seed=4)["w"], 1.5 / math.sqrt(300), "a [4, 50, 300] array")
    drawn = random_weights({"x.weight": (20,)}, seed=4)["x.weight"] - 1
    assert np.allclose(drawn, random_weights({"x.bias": (20,)}, seed=4)["x.bias"]), (
        "a layer norm's scale is not 1 plus the draws that a bias in its place gets")


def test_gpt2_initialization_has_the_documented_values():
    """std=0.02 (GPT-2's own initialization): matrices N(0, 0.02²), biases zeros, layer-norm scales ones, float32"""
    from course.weights import random_weights

    shapes = {"c_attn.weight": (200, 300), "c_attn.bias": (600,), "ln_f.weight": (300,), "ln_f.bias": (300,)}
    values = random_weights(shapes, seed=5, std=0.02)
    assert all(value.dtype == np.float32 for value in values.values()), {k: v.dtype for k, v in values.items()}
    _spread(values["c_attn.weight"], 0.02, "a matrix")
    assert abs(float(values["c_attn.weight"].mean())) < 1e-3
    assert not values["c_attn.bias"].any() and not values["ln_f.bias"].any(), "biases must be zeros"
    assert np.all(values["ln_f.weight"] == 1), "layer-norm scales must be ones"
    _spread(random_weights({"w": (200, 300)}, seed=5, std=0.1)["w"], 0.1, "a matrix with std=0.1")


def test_random_weights_are_seeded_and_drawn_in_order():
    """one seed gives the same arrays; another seed other ones; a name's values depend only on the names before
    it; shapes may be any integers (MAX's Dims, NumPy's)"""
    from course.weights import random_weights

    shapes = {"a.weight": (3, 4), "b.weight": (5,), "c.bias": (6,)}
    first, again = random_weights(shapes, seed=7), random_weights(shapes, seed=7)
    assert all(np.array_equal(first[name], again[name]) for name in shapes), "one seed, two draws"
    other = random_weights(shapes, seed=8)
    assert not any(np.array_equal(first[name], other[name]) for name in shapes), "seeds 7 and 8 drew the same"
    prefix = random_weights({"a.weight": (3, 4)}, seed=7)
    assert np.array_equal(prefix["a.weight"], first["a.weight"]), "a later name changed an earlier one's values"
    swapped = random_weights({"b.weight": (5,), "a.weight": (3, 4)}, seed=7)
    assert not np.array_equal(swapped["b.weight"], first["b.weight"]), "the order of the names did not matter"
    odd = random_weights({"a.weight": (np.int64(3), 4)}, seed=7)
    assert odd["a.weight"].shape == (3, 4) and np.array_equal(odd["a.weight"], first["a.weight"])


def test_shapes_of_reads_torch_and_max_parameters():
    """shapes_of: {name: tuple of ints} from torch's named_parameters() and MAX's .parameters"""
    import torch
    from max.experimental import functional as F
    from max.experimental.nn import Linear

    from course.weights import shapes_of

    assert shapes_of(torch.nn.Linear(3, 2).named_parameters()) == {"weight": (2, 3), "bias": (2,)}
    with F.lazy():
        layer = Linear(3, 2, bias=True)
    shapes = shapes_of(layer.parameters)
    assert shapes == {"weight": (2, 3), "bias": (2,)}, shapes
    assert all(type(d) is int for shape in shapes.values() for d in shape), shapes


def test_init_like_gpt2_loads_the_seeded_values():
    """init_like_gpt2 loads random_weights(shapes, seed, std) into a MAX module, every parameter"""
    from max.experimental import functional as F
    from max.experimental.nn import Linear

    from course.runtime import to_numpy
    from course.weights import init_like_gpt2, random_weights

    with F.lazy():
        layer = Linear(3, 2, bias=True)
    init_like_gpt2(layer, seed=9, std=0.5)
    expected = random_weights({"weight": (2, 3), "bias": (2,)}, seed=9, std=0.5)
    for name, value in layer.parameters:
        assert np.array_equal(to_numpy(value), expected[name]), (name, to_numpy(value), expected[name])


def test_the_defaults_are_seed_0_and_gpt2s_spread():
    """without a seed, random_weights draws seed 0's values, and init_like_gpt2 GPT-2's (seed 0, std 0.02): the
    values the book's printed numbers were made with"""
    from max.experimental import functional as F
    from max.experimental.nn import Linear

    from course.runtime import to_numpy
    from course.weights import init_like_gpt2, random_weights

    shapes = {"a.weight": (3, 4), "a.bias": (4,)}
    default, zero = random_weights(shapes), random_weights(shapes, seed=0)
    assert all(np.array_equal(default[name], zero[name]) for name in shapes), "random_weights' default seed is not 0"
    with F.lazy():
        layer = Linear(30, 20, bias=True)
    init_like_gpt2(layer)
    expected = random_weights({"weight": (20, 30), "bias": (20,)}, seed=0, std=0.02)
    for name, value in layer.parameters:
        assert np.array_equal(to_numpy(value), expected[name]), f"init_like_gpt2's default {name} is not seed 0's, std 0.02"
