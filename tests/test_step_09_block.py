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
by 0.039 (40× the tolerance there); swapped or missing branches by ~1. ``mistakes`` wires
the reference's own sublayers in the common wrong ways, so that a ✗ can name the wiring.
Two sublayers that are one object (``self.ln_2 = self.ln_1``) load without complaint and
look like ``ln_1`` used twice, so they are named from the module's structure first.
"""

from __future__ import annotations

import numpy as np
import pytest
from transformers.models.gpt2.modeling_gpt2 import GPT2Block

from harness import Mistake, assert_close, attribute, build, fail, forward, load_weights, solution, todo_named
from reference import (
    CONFIGS, DEFAULT_EPS, SMALL, hf_config, hidden_states, run, run_layer_norm, run_masked, seeded, to_max_state
)

pytestmark = pytest.mark.step09

VARIANTS = {
    **CONFIGS,
    "n_inner=48, eps=0.1": dict(SMALL, n_inner=48, layer_norm_epsilon=0.1),
}


def mistakes(reference: GPT2Block, x: np.ndarray, mine=None) -> list[Mistake]:
    """The common wrong blocks, wired from the reference's own sublayers on the check's input.

    ``mine``, the learner's block, only words a mistake: the epsilon its layer norms were built with.
    """
    eps = reference.ln_1.eps

    def ln(which: str, default_eps: bool = False):
        return lambda h: run_layer_norm(getattr(reference, which), h, DEFAULT_EPS if default_eps else None)

    def attn(h):
        return run_masked(reference.attn, h)

    def mlp(h):
        return run(reference.mlp, h)

    def block(first, ln_first, second, ln_second):
        """x + first(ln_first(x)), then the same with second: a pre-norm block in any wiring."""
        def wired():
            h = x + first(ln_first(x))
            return h + second(ln_second(h))
        return wired

    def post_norm():
        h = ln("ln_1")(x + attn(x))
        return ln("ln_2")(h + mlp(h))

    def attention_only():
        return x + attn(ln("ln_1")(x))

    def parallel():
        return x + attn(ln("ln_1")(x)) + mlp(ln("ln_2")(x))

    def swapped(norm, sublayer):
        """residual(x, sublayer, norm): the branch x + norm(sublayer(x))."""
        return lambda h: norm(sublayer(h))

    def unchanged(h):
        return h

    found = [
        Mistake("ln_1 is used before both branches; the MLP branch reads ln_2(x)", 2,
                block(attn, ln("ln_1"), mlp, ln("ln_1"))),
        Mistake("the MLP branch runs before the attention branch; GPT-2 attends first, then runs the MLP", 2,
                block(mlp, ln("ln_2"), attn, ln("ln_1"))),
        Mistake("ln_1 and ln_2 are swapped: ln_1 goes before attention, ln_2 before the MLP", 2,
                block(attn, ln("ln_2"), mlp, ln("ln_1"))),
        Mistake("the layer norms come after the residual additions (post-norm, as in the original Transformer); "
                "GPT-2 normalizes each branch's input: x + attn(ln_1(x))", 2, post_norm),
        Mistake("both branches read the block's input x (a parallel block, as in GPT-J); in GPT-2 the MLP branch "
                "reads the stream after attention has added to it", 2, parallel),
        Mistake("the MLP branch is missing: after x + attn(ln_1(x)), add mlp(ln_2(x))", 2, attention_only),
    ]
    order = "residual(x, norm, sublayer) takes the layer norm first (step 08)"
    found += [
        Mistake(f"residual()'s norm and sublayer are swapped in {where}: it computes {wrong}; {order}", 2, gives)
        for where, wrong, gives in [
            ("the attention branch", "x + ln_1(attn(x))",
             block(swapped(ln("ln_1"), attn), unchanged, mlp, ln("ln_2"))),
            ("the MLP branch", "x + ln_2(mlp(x))",
             block(attn, ln("ln_1"), swapped(ln("ln_2"), mlp), unchanged)),
            ("both branches", "x + ln_1(attn(x)), then x + ln_2(mlp(x))",
             block(swapped(ln("ln_1"), attn), unchanged, swapped(ln("ln_2"), mlp), unchanged)),
        ]
    ]
    if eps != DEFAULT_EPS:
        # An epsilon near GPT-2's 1e-5 (LayerNorm's default, or another small one) gives the same numbers
        # to the tolerance, so the message quotes the learner's own LayerNorm's eps, where it has one.
        found += [
            Mistake(f"{names} built without the config's epsilon: {_eps_of(mine, names)}this config's "
                    f"layer_norm_epsilon is {eps:g}", 1,
                    block(attn, ln("ln_1", "ln_1" in names), mlp, ln("ln_2", "ln_2" in names)))
            for names in ("ln_2 is", "ln_1 is", "ln_1 and ln_2 are")
        ]
    return found


def _eps_of(mine, names: str) -> str:
    """``its eps is 1e-06, `` (``their eps are …``): the epsilon of the learner's layer norms in ``names``,
    read from the modules; empty where one has none to read."""
    values = [getattr(getattr(mine, norm, None), "eps", None) for norm in ("ln_1", "ln_2") if norm in names]
    if not values or not all(isinstance(value, (int, float)) for value in values):
        return ""
    if len(values) == 1:
        default = " (LayerNorm's default)" if values[0] == DEFAULT_EPS else ""
        return f"its eps is {values[0]:g}{default}, "
    return f"their eps are {' and '.join(f'{value:g}' for value in values)}, "


def _shared_sublayers(step, mine) -> None:
    """Fails when two of the block's sublayers are one module object (``self.ln_2 = self.ln_1``).

    Such a block still lists both names' parameters, so every weight loads, but into the same
    tensors: the one loaded last wins, and both branches read it. Told apart by the module's
    structure, before any number: the numbers alone look like ln_1 used twice (TODO 2).
    """
    names = ("ln_1", "attn", "ln_2", "mlp")
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            a, b = getattr(mine, first, None), getattr(mine, second, None)
            if a is not None and a is b:
                fail(f"Block's {first} and {second} are one {type(a).__name__}: the checkpoint's {first} and "
                     f"{second} weights both load into it, the last one loaded wins, and both branches use "
                     f"it; create a {type(a).__name__} for each — {todo_named(step.__file__, second)}")


@pytest.mark.parametrize("name", list(VARIANTS))
def test_matches_gpt2_block(step, name):
    """Block matches Hugging Face GPT2Block on the same weights"""
    hf = hf_config(**VARIANTS[name])
    reference = seeded(GPT2Block(hf, layer_idx=0), seed=9)
    mine = build(attribute(step, "Block"), solution(1).GPT2Config.from_hf(hf))
    _shared_sublayers(step, mine)
    load_weights(mine, to_max_state(reference))
    x = hidden_states(2, 7, hf.n_embd, scale=2.0) + 0.5
    assert_close(
        forward(mine, x),
        run_masked(reference, x),
        f"Block output vs Hugging Face GPT2Block ({name})",
        mistakes=mistakes(reference, x, mine),
        step=step,
    )
