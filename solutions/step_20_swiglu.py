"""Step 20 · The SwiGLU feed-forward network.

GPT-2's MLP (step 04) expands, applies GELU, and projects back. Llama's MLP
makes two expansions of the same token instead, and lets one of them *gate*
the other, number by number:

    gate_proj  hidden_size       -> intermediate_size    passed through SiLU
    up_proj    hidden_size       -> intermediate_size    left as it is
    multiply   the two, element by element
    down_proj  intermediate_size -> hidden_size

    mlp(x) = down_proj(silu(gate_proj(x)) * up_proj(x))
    silu(z) = z * sigmoid(z)

This is SwiGLU (Shazeer, 2020): a gated linear unit with the Swish (SiLU)
activation. None of the three layers has a bias. The names are the
checkpoint's, and MAX's ``Linear`` stores ``[out, in]`` as Llama's checkpoints do,
so no weight is transposed on load.

Check this step with ``pixi run s20``.
"""

from __future__ import annotations

from max.experimental import functional as F
from max.experimental.nn import Linear, Module
from max.experimental.tensor import Tensor

from step_17_llama_config import LlamaConfig


# ANCHOR: mlp
class LlamaMLP(Module):
    """Llama's gated feed-forward network."""

    def __init__(self, config: LlamaConfig):
        # TODO 1: Create gate_proj and up_proj, two Linear layers without a bias that
        #   expand hidden_size to intermediate_size.
        # ANCHOR: expand | stub: self.gate_proj = self.up_proj = None
        self.gate_proj = Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = Linear(config.hidden_size, config.intermediate_size, bias=False)
        # ANCHOR_END: expand

        # TODO 2: Create down_proj, a Linear layer without a bias that projects back.
        # ANCHOR: down | stub: self.down_proj = None
        self.down_proj = Linear(config.intermediate_size, config.hidden_size, bias=False)
        # ANCHOR_END: down

    def forward(self, x: Tensor) -> Tensor:
        # TODO 3: Return the SwiGLU MLP of x (the chapter's formula): SiLU of one expansion,
        #   the gate, times the other, element by element, projected back by down_proj.
        # Hint: F.silu is in MAX's functional module. Which of the two expansions is the
        #   gate? Their names say.
        # ANCHOR: forward | stub: return None
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        # ANCHOR_END: forward


# ANCHOR_END: mlp
