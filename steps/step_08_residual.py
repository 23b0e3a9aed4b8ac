# Your file for step 08: fill in its TODOs, then run `pixi run s08`.
# (Rendered from solutions/step_08_residual.py by `python -m course.authoring.render`.)
"""Step 08 · Residual connections.

A GPT-2 block does not replace a token's vector; it *adds* to it. Each of its two
sublayers (attention, then the MLP) reads a normalized copy of the running
vector and writes its result back by addition:

    x = x + attn(ln_1(x))
    x = x + mlp(ln_2(x))

The running vector ``x`` is called the **residual stream**. Because every
sublayer only adds, the stream carries each token's embedding straight through
the whole stack, and every block's contribution is one more term in a sum. That
is what lets a deep stack train: gradients flow back through the additions
unchanged.

GPT-2 is **pre-norm**: the layer norm sits *inside* the branch, on the
sublayer's input, and the stream itself is never normalized until ``ln_f`` at
the very end (step 10). The original Transformer normalized after the addition
(post-norm) instead.

    x ──────────────────────────(+)──▶
     └──▶ norm ──▶ sublayer ─────┘

Check this step with ``pixi run s08``.
"""

from __future__ import annotations

from collections.abc import Callable

from max.experimental.tensor import Tensor


def residual(x: Tensor, norm: Callable[[Tensor], Tensor], sublayer: Callable[[Tensor], Tensor]) -> Tensor:
    """One pre-norm residual branch: normalize, apply the sublayer, add to the stream.

    ``norm`` is a LayerNorm (step 03) and ``sublayer`` is attention (step 07) or
    the MLP (step 04); both map ``[batch, seq, n_embd]`` to the same shape.
    """
    # TODO 1: Return x plus the sublayer applied to the normalized x.
    # Hint: which x goes into the sum: the stream as it came in, or its normalized copy?
    return None
