"""Step 02 · causal_mask against the mask Hugging Face builds for GPT-2.

Measured worst case: the attention weights agree to 0.0 (bit for bit), since
both masks only ever add 0 to the allowed scores.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import DynamicCache
from transformers.masking_utils import create_causal_mask
from transformers.models.gpt2.modeling_gpt2 import GPT2Attention, eager_attention_forward

from course.runtime import to_numpy
from harness import assert_close, attribute, call, fail
from reference import GPT2_SMALL, SMALL, hf_config

pytestmark = pytest.mark.step02

# (new tokens, cached tokens): a prompt, one token, a chunk after a cache, a long prompt.
CASES = [(1, 0), (5, 0), (4, 3), (1, 7), (16, 0)]


def _mask(step, seq_len: int, past_len: int) -> np.ndarray:
    fn = attribute(step, "causal_mask")
    return to_numpy(call(fn, seq_len, past_len, what=f"causal_mask({seq_len}, {past_len})"))


def _blocked_mismatch(mine: np.ndarray, theirs: np.ndarray, name: str) -> None:
    """Fails at the first position that is -inf in one mask and not in the other."""
    if mine.shape != theirs.shape:
        fail(f"{name} has shape {list(mine.shape)}; Hugging Face's is {list(theirs.shape)}")
    blocked_theirs = theirs < -1e30  # Hugging Face adds float32's most negative number
    differs = np.isneginf(mine) != blocked_theirs
    if differs.any():
        i, j = (int(v) for v in np.argwhere(differs)[0])
        expected = "-inf (blocked)" if blocked_theirs[i, j] else "0 (open)"
        fail(f"{name}[{i}, {j}] is {mine[i, j]}, but Hugging Face's mask has it {expected}")


def _hf_mask(seq_len: int, past_len: int, sizes: dict) -> np.ndarray:
    """The additive mask GPT2Model builds (GPT2Attention alone is not causal)."""
    config = hf_config(**sizes)
    head_dim = config.n_embd // config.n_head
    cache = DynamicCache(config=config)
    if past_len:
        past = torch.zeros(1, config.n_head, past_len, head_dim)
        cache.update(past, past, 0)
    mask = create_causal_mask(
        config=config,
        inputs_embeds=torch.zeros(1, seq_len, config.n_embd),
        attention_mask=None,
        past_key_values=cache,
        position_ids=torch.arange(past_len, past_len + seq_len)[None],
        allow_is_causal_skip=False,
    )
    return mask[0, 0].numpy()


@pytest.mark.parametrize("seq_len,past_len", CASES)
def test_shape_and_values(step, seq_len, past_len):
    """shape, and 0 / -inf in the right places"""
    mask = _mask(step, seq_len, past_len)
    expected_shape = (seq_len, past_len + seq_len)
    if mask.shape != expected_shape:
        fail(f"causal_mask({seq_len}, {past_len}) has shape {list(mask.shape)}, expected {list(expected_shape)}")
    rows, cols = np.indices(expected_shape)
    future = cols > past_len + rows
    for wrong, expected, verb in [
        (future & ~np.isneginf(mask), "-inf", "must not see"),
        (~future & (mask != 0), "0", "may see"),
    ]:
        if wrong.any():
            i, j = (int(v) for v in np.argwhere(wrong)[0])
            fail(
                f"causal_mask({seq_len}, {past_len})[{i}, {j}] is {mask[i, j]}, expected {expected}: "
                f"query {i} sits at position {past_len + i} and {verb} key {j}"
            )


@pytest.mark.parametrize("seq_len,past_len", CASES)
def test_matches_hugging_face_attention(step, seq_len, past_len):
    """attention weights match Hugging Face's mask"""
    mine = _mask(step, seq_len, past_len)
    theirs = _hf_mask(seq_len, past_len, SMALL)
    _blocked_mismatch(mine, theirs, f"causal_mask({seq_len}, {past_len})")
    generator = torch.Generator().manual_seed(seq_len * 31 + past_len)
    heads, head_dim = SMALL["n_head"], SMALL["n_embd"] // SMALL["n_head"]
    q = torch.randn(1, heads, seq_len, head_dim, generator=generator)
    k = torch.randn(1, heads, past_len + seq_len, head_dim, generator=generator)
    v = torch.randn(1, heads, past_len + seq_len, head_dim, generator=generator)
    module = GPT2Attention(hf_config(**SMALL), layer_idx=0).eval()
    _, weights_theirs = eager_attention_forward(module, q, k, v, torch.from_numpy(theirs)[None, None])
    _, weights_mine = eager_attention_forward(module, q, k, v, torch.from_numpy(mine)[None, None])
    assert_close(weights_mine.numpy(), weights_theirs.numpy(), "attention weights with your mask vs Hugging Face's")


def test_full_context_of_gpt2_small(step):
    """full 1024-token context matches Hugging Face"""
    n = GPT2_SMALL["n_positions"]
    _blocked_mismatch(_mask(step, n, 0), _hf_mask(n, 0, GPT2_SMALL), f"causal_mask({n}, 0)")
