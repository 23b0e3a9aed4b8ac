# Your file for step 09: fill in its TODOs, then run `pixi run s09`.
# (Rendered from solutions/step_09_block.py by `python -m course.authoring.render`.)
"""Step 09 · The transformer block.

A block is the unit GPT-2 repeats ``n_layer`` times. It is the two residual
branches of step 08, one around attention and one around the MLP, each with its
own layer norm:

    x = x + attn(ln_1(x))       tokens exchange information   (step 07)
    x = x + mlp(ln_2(x))        each token is processed alone  (step 04)

    x  [batch, seq, n_embd]  ->  [batch, seq, n_embd]

The shape never changes, which is what makes blocks stackable (step 10).

The four sublayers carry the checkpoint's names, so a block's weights load as
``ln_1.weight``, ``attn.c_attn.weight``, ``ln_2.bias``, ``mlp.c_fc.weight``, and
so on. Both layer norms use ``config.layer_norm_epsilon``, and the MLP's width
comes from ``config.inner_dim`` (``n_inner`` when a config sets it).

Check this step with ``pixi run s09``.
"""

from __future__ import annotations

from max.experimental.nn import Module
from max.experimental.tensor import Tensor

from step_01_config import GPT2Config
from step_03_layer_norm import LayerNorm
from step_04_mlp import MLP
from step_07_attention import CausalSelfAttention
from step_08_residual import residual


class Block(Module):
    """One GPT-2 transformer block: attention and MLP, each in a pre-norm residual branch."""

    def __init__(self, config: GPT2Config):
        # TODO 1: Create the four sublayers, with the checkpoint's names:
        #   ln_1  a LayerNorm over n_embd, before attention;
        #   attn  the CausalSelfAttention of step 07;
        #   ln_2  a LayerNorm over n_embd, before the MLP;
        #   mlp   the MLP of step 04.
        # Hint: LayerNorm's eps defaults to 1e-5; pass the config's value instead.
        self.ln_1 = self.attn = self.ln_2 = self.mlp = None

    def forward(self, x: Tensor) -> Tensor:
        # TODO 2: Apply the attention branch, then the MLP branch, with residual().
        return None
