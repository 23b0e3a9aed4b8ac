"""Step 03 · Layer normalization.

Deep networks train and run stably when each token's vector keeps a steady
scale. Layer norm rescales one token's ``n_embd`` numbers to mean 0 and
variance 1, then applies a learned scale (``weight``, gamma) and shift
(``bias``, beta):

    y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias

The mean and the (biased) variance run over the last axis only, so every token
is normalized on its own. ``eps`` keeps the division finite for a token whose
values are all equal; GPT-2 uses 1e-5 (``config.layer_norm_epsilon``).

GPT-2 has a layer norm before attention (``ln_1``), before the MLP (``ln_2``)
and after the last block (``ln_f``). The names ``weight`` and ``bias`` match the
checkpoint, so pretrained values load by name.

Check this step with ``pixi run s03``.
"""

from __future__ import annotations

from max.experimental import functional as F
from max.experimental.nn import Module
from max.experimental.tensor import Tensor


# ANCHOR: layer_norm
class LayerNorm(Module):
    """Layer normalization over the last axis, with a learned scale and shift."""

    def __init__(self, dim: int, eps: float = 1e-5):
        self.eps = eps
        # TODO 1: Create the learned parameters for a `dim`-wide input:
        #   weight, the scale, starting as all ones;
        #   bias, the shift, starting as all zeros.
        # Hint: Tensor has constructors for constant tensors of a given shape.
        # ANCHOR: params | stub: self.weight = self.bias = None
        self.weight = Tensor.ones([dim])
        self.bias = Tensor.zeros([dim])
        # ANCHOR_END: params

    def forward(self, x: Tensor) -> Tensor:
        # TODO 2: Compute the mean and the biased variance (divide by n, not n - 1)
        #   of x over its last axis, keeping that axis so they broadcast against x.
        # Hint: F.mean keeps the reduced axis (size 1); the variance is a mean too: of what?
        # ANCHOR: stats | stub: mean = var = None
        mean = F.mean(x, axis=-1)
        var = F.mean((x - mean) * (x - mean), axis=-1)
        # ANCHOR_END: stats

        # TODO 3: Normalize x, then scale by weight and shift by bias.
        # Hint: F.rsqrt(v) is 1 / sqrt(v). Where does eps go?
        # ANCHOR: normalize | stub: return None
        return (x - mean) * F.rsqrt(var + self.eps) * self.weight + self.bias
        # ANCHOR_END: normalize


# ANCHOR_END: layer_norm
