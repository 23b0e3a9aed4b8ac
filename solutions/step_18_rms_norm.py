"""Step 18 · RMS normalization.

Llama normalizes with RMSNorm, a simpler layer norm (step 03). It does not
subtract the mean and has no shift: it divides each token's vector by its root
mean square and applies a learned scale (``weight``):

    y = x / sqrt(mean(x²) + eps) * weight

The mean of the squares runs over the last axis only, so every token is
normalized on its own. ``eps`` sits inside the root, as in step 03, and keeps
the division finite for a token whose values are all (nearly) zero; SmolLM2
uses 1e-5 (``config.rms_norm_eps``).

Each Llama layer has one before attention (``input_layernorm``) and one before
the MLP (``post_attention_layernorm``), and one follows the last layer
(``norm``). The name ``weight`` matches the checkpoint, so pretrained values
load by name.

Check this step with ``pixi run s18``.
"""

from __future__ import annotations

from max.experimental import functional as F
from max.experimental.nn import Module
from max.experimental.tensor import Tensor


# ANCHOR: rms_norm
class RMSNorm(Module):
    """Root-mean-square normalization over the last axis, with a learned scale."""

    def __init__(self, dim: int, eps: float = 1e-5):
        self.eps = eps
        # TODO 1: Create the learned scale `weight` for a `dim`-wide input, starting
        #   as all ones. RMSNorm has no bias.
        # ANCHOR: params | stub: self.weight = None
        self.weight = Tensor.ones([dim])
        # ANCHOR_END: params

    def forward(self, x: Tensor) -> Tensor:
        # TODO 2: Compute the mean of x's squares over its last axis, keeping that
        #   axis so it broadcasts against x. Nothing is subtracted first.
        # ANCHOR: mean_square | stub: mean_square = None
        mean_square = F.mean(x * x, axis=-1)
        # ANCHOR_END: mean_square

        # TODO 3: Divide x by its root mean square, then scale by weight.
        # Hint: F.rsqrt(v) is 1 / sqrt(v). Where does eps go?
        # ANCHOR: normalize | stub: return None
        return x * F.rsqrt(mean_square + self.eps) * self.weight
        # ANCHOR_END: normalize


# ANCHOR_END: rms_norm
