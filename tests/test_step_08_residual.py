"""Step 08 · residual against the two halves of Hugging Face's GPT2Block.

GPT2Block computes ``h = x + attn(ln_1(x))`` and then ``h + mlp(ln_2(h))``. The
learner's ``residual(x, norm, sublayer)`` is given the finished LayerNorm (step 03),
CausalSelfAttention (step 07) and MLP (step 04) from solutions/, loaded with the
Hugging Face block's weights, so only the residual wiring is graded. The attention
half gets the causal mask ``GPT2Model`` would build.

Tolerance: the harness default, 1e-4 + 1e-4·|expected|. Measured worst case |Δ| on
solutions/: 4.8e-6 on the small config, 1.6e-5 at GPT-2 small's width (values of
size ~10, where the tolerance is ~1e-3). Adding the normalized input instead of the
raw one is off by 5.1.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.models.gpt2.modeling_gpt2 import GPT2Block

from course.runtime import from_numpy, to_numpy
from harness import Mistake, assert_close, attribute, build, call, fail, load_weights, solution
from reference import CONFIGS, hf_causal_mask, hf_config, hidden_states, seeded, to_max_state

pytestmark = pytest.mark.step08


def _sublayers(sizes: dict, seed: int = 8):
    """Finished ln_1, attn, ln_2, mlp (from solutions/) with a seeded GPT2Block's weights, and the block."""
    hf = hf_config(**sizes)
    reference = seeded(GPT2Block(hf, layer_idx=0), seed=seed)
    config = solution(1).GPT2Config.from_hf(hf)
    state = to_max_state(reference)
    parts = {
        "ln_1": build(solution(3).LayerNorm, hf.n_embd, eps=hf.layer_norm_epsilon),
        "attn": build(solution(7).CausalSelfAttention, config),
        "ln_2": build(solution(3).LayerNorm, hf.n_embd, eps=hf.layer_norm_epsilon),
        "mlp": build(solution(4).MLP, config),
    }
    for prefix, part in parts.items():
        own = {name[len(prefix) + 1 :]: value for name, value in state.items() if name.startswith(prefix + ".")}
        load_weights(part, own)
    return parts, reference


def _residual(step, x: np.ndarray, norm, sublayer, what: str) -> np.ndarray:
    fn = attribute(step, "residual")
    result = call(fn, from_numpy(x), norm, sublayer, what=what)
    try:
        return to_numpy(result)
    except Exception as error:  # noqa: BLE001 - a lazily-raised MAX error is still the learner's
        fail(f"{what} gave a value MAX could not compute: {error}")


def mistakes(x: torch.Tensor, norm, sublayer) -> list[Mistake]:
    """The common wrong residuals, from the reference block's own norm and sublayer (torch)."""

    def run(fn):
        with torch.no_grad():
            return fn().numpy()

    return [
        Mistake("the normalized x is added back, norm(x) + sublayer(norm(x)); the residual adds the raw x: "
                "x + sublayer(norm(x))", 1, lambda: run(lambda: norm(x) + sublayer(norm(x)))),
        Mistake("the sublayer reads x itself; it reads the normalized x: x + sublayer(norm(x))", 1,
                lambda: run(lambda: x + sublayer(x))),
        Mistake("x is not added back: the sublayer's output replaces the stream; return x + sublayer(norm(x))", 1,
                lambda: run(lambda: sublayer(norm(x)))),
        Mistake("the norm comes after the addition, norm(x + sublayer(x)) (post-norm); GPT-2 normalizes the "
                "sublayer's input: x + sublayer(norm(x))", 1, lambda: run(lambda: norm(x + sublayer(x)))),
    ]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_matches_gpt2_block_halves(step, name):
    """residual gives GPT2Block's x + attn(ln_1(x)), then h + mlp(ln_2(h))"""
    sizes = CONFIGS[name]
    parts, reference = _sublayers(sizes)
    x = hidden_states(2, 7, sizes["n_embd"], scale=2.0) + 0.5  # the stream is not normalized
    mask = torch.from_numpy(hf_causal_mask(7))[None, None]
    with torch.no_grad():
        xt = torch.from_numpy(x)
        h = xt + reference.attn(reference.ln_1(xt), attention_mask=mask)[0]
        out = h + reference.mlp(reference.ln_2(h))
    attn = lambda v: reference.attn(v, attention_mask=mask)[0]  # noqa: E731
    got_h = _residual(step, x, parts["ln_1"], parts["attn"], "residual(x, ln_1, attn)")
    assert_close(got_h, h.numpy(), f"residual(x, ln_1, attn) vs GPT2Block's x + attn(ln_1(x)) ({name})",
                 mistakes=mistakes(xt, reference.ln_1, attn), step=step)
    got = _residual(step, h.numpy(), parts["ln_2"], parts["mlp"], "residual(h, ln_2, mlp)")
    assert_close(got, out.numpy(), f"residual(h, ln_2, mlp) vs GPT2Block's h + mlp(ln_2(h)) ({name})",
                 mistakes=mistakes(h, reference.ln_2, reference.mlp), step=step)
