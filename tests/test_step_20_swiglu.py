"""Step 20 · LlamaMLP (SwiGLU) against Hugging Face's LlamaMLP.

Tolerance: the harness default, 1e-4 + 1e-4·|expected|. Measured worst case |Δ| on
solutions/ (float32 noise: MAX and PyTorch sum in different orders): 4.8e-6 on the small
config, 1.5e-5 at SmolLM2's widths (1536-term sums). The common wrong
MLPs (gate and up swapped, GELU or ReLU for SiLU, SiLU on the product, no gate) are
computed with the reference's own layers on the check's input, so that a ✗ names the
mistake and its TODO.
"""

from __future__ import annotations

import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaMLP

from harness import Mistake, assert_close, forward, llama_twin
from reference import LLAMA_CONFIGS, hidden_states, llama_hf_config, run, seeded

pytestmark = pytest.mark.step20


def mistakes(reference: LlamaMLP, x) -> list[Mistake]:
    """The common wrong SwiGLUs, each with its TODO."""
    gate, up, down = reference.gate_proj, reference.up_proj, reference.down_proj
    silu = torch.nn.functional.silu

    def mlp(body):
        return lambda: run(lambda h: down(body(h)), x)

    return [
        Mistake("gate_proj and up_proj trade places: SiLU goes on gate_proj(x), and up_proj(x) is left as it is", 3,
                mlp(lambda h: silu(up(h)) * gate(h))),
        Mistake("the activation is GELU (GPT-2's); Llama's gate uses SiLU, z * sigmoid(z)", 3,
                mlp(lambda h: torch.nn.functional.gelu(gate(h), approximate="tanh") * up(h))),
        Mistake("the activation is the exact GELU; Llama's gate uses SiLU, z * sigmoid(z)", 3,
                mlp(lambda h: torch.nn.functional.gelu(gate(h)) * up(h))),
        Mistake("the activation is a ReLU; Llama's gate uses SiLU", 3, mlp(lambda h: torch.relu(gate(h)) * up(h))),
        Mistake("SiLU is applied to the product: silu(gate_proj(x) * up_proj(x)); only gate_proj(x) goes through it",
                3, mlp(lambda h: silu(gate(h) * up(h)))),
        Mistake("the gate is sigmoid(gate_proj(x)), not silu: SiLU is z * sigmoid(z)", 3,
                mlp(lambda h: torch.sigmoid(gate(h)) * up(h))),
        Mistake("no gate: up_proj(x) goes to down_proj without being multiplied by silu(gate_proj(x))", 3,
                mlp(lambda h: up(h))),
        Mistake("no up_proj: silu(gate_proj(x)) must be multiplied by up_proj(x) before down_proj", 3,
                mlp(lambda h: silu(gate(h)))),
    ]


@pytest.mark.parametrize("name", list(LLAMA_CONFIGS))
def test_matches_llama_mlp(step, name):
    """LlamaMLP matches Hugging Face's LlamaMLP on the same weights"""
    hf = llama_hf_config(**LLAMA_CONFIGS[name])
    reference = seeded(LlamaMLP(hf), seed=20)
    mine = llama_twin(step, "LlamaMLP", reference, hf)
    x = hidden_states(2, 5, hf.hidden_size)
    assert_close(forward(mine, x), run(reference, x), f"LlamaMLP output vs Hugging Face LlamaMLP ({name})",
                 mistakes=mistakes(reference, x), step=step)
