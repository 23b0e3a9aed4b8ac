# Your file for step 04: fill in its TODOs, then run `pixi run s04`.
# (Rendered from solutions/step_04_mlp.py by `python -m course.authoring.render`.)
"""Step 04 · The feed-forward network (MLP).

After attention has mixed information *between* tokens, each block gives every
token the same small two-layer network on its own:

    expand  c_fc    n_embd    -> inner_dim (4 * n_embd)
    GELU            a smooth ReLU
    project c_proj  inner_dim -> n_embd

GPT-2 uses the tanh approximation of GELU (``gelu_new`` in its config):

    gelu(x) = 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))

Using the exact, erf-based GELU instead changes the outputs slightly, and the
check for this step is tight enough to notice.

``c_fc`` and ``c_proj`` are the checkpoint's names. Hugging Face stores them as
``Conv1D`` layers whose weight is ``[in, out]``; MAX's ``Linear`` keeps
``[out, in]``. The checks (and step 14) transpose those weights on load.

Check this step with ``pixi run s04``.
"""

from __future__ import annotations

from max.experimental import functional as F
from max.experimental.nn import Linear, Module
from max.experimental.tensor import Tensor

from step_01_config import GPT2Config


class MLP(Module):
    """GPT-2's position-wise feed-forward network."""

    def __init__(self, config: GPT2Config):
        # TODO 1: Create c_fc, a Linear layer (with bias) that expands n_embd to the
        #   MLP's inner width.
        # Hint: the config from step 01 already knows the inner width.
        self.c_fc = None

        # TODO 2: Create c_proj, a Linear layer (with bias) that projects back to n_embd.
        self.c_proj = None

    def forward(self, x: Tensor) -> Tensor:
        # TODO 3: Expand with c_fc, apply GPT-2's GELU, project back with c_proj.
        # Hint: F.gelu takes an `approximate` argument; which form does GPT-2 use?
        return None
