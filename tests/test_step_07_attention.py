"""Step 07 · CausalSelfAttention against Hugging Face's GPT2Attention (eager).

``GPT2Attention`` on its own is not causal (``GPT2Model`` builds the mask), so the
reference is given the mask ``GPT2Model`` would build (``reference.hf_causal_mask``).
The pieces are checked on their own first, so a failure names the method to fix:
``split_heads`` and ``merge_heads`` against NumPy's reshape and transpose,
``attend`` against Hugging Face's ``eager_attention_forward`` (also with
``past_len``, as step 15 will call it), then the whole module, then causality
directly: changing token t must leave every output before t unchanged.

Tolerance: the harness default, 1e-4 + 1e-4·|expected|. Measured worst case |Δ| on
solutions/ (float32 noise: MAX and PyTorch sum in different orders): 7e-7 for
``attend``, 1.4e-6 for the module on the small config, 1e-5 at GPT-2 small's width
(768-term dot products). The planted bugs are off by 1.3 (no 1/√d scaling) to 4.3
(heads merged without moving the head axis back), ≥ 1000× the tolerance; q, k, v
split in the wrong order shows from 2 tokens on (at 1 token softmax gives weight 1
whatever the scores), softmax over the queries from 2 tokens on as well.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.models.gpt2.modeling_gpt2 import GPT2Attention, eager_attention_forward

from course.runtime import from_numpy, to_numpy
from harness import assert_close, attribute, build, call, fail, forward, load_weights, solution
from reference import CONFIGS, SMALL, hf_causal_mask, hf_config, hidden_states, run_masked, seeded, to_max_state

pytestmark = pytest.mark.step07

#: One token, two, a short prompt, and one longer than 16.
LENGTHS = [1, 2, 7, 19]


def _attention(step, sizes: dict, seed: int = 7):
    """The learner's CausalSelfAttention and a seeded GPT2Attention with the same weights."""
    hf = hf_config(**sizes)
    reference = seeded(GPT2Attention(hf, layer_idx=0), seed=seed)
    mine = build(attribute(step, "CausalSelfAttention"), solution(1).GPT2Config.from_hf(hf))
    load_weights(mine, to_max_state(reference))
    return mine, reference


def _method(module, name: str, *args, **kwargs) -> np.ndarray:
    method = getattr(module, name, None)
    if method is None:
        fail(f"CausalSelfAttention has no method `{name}` — keep the name the stub gives it")
    given = ", ".join([*("…" for _ in args), *(f"{k}={v}" for k, v in kwargs.items())])
    what = f"CausalSelfAttention.{name}({given})"
    result = call(method, *(from_numpy(a) for a in args), what=what, **kwargs)
    try:
        return to_numpy(result)
    except Exception as error:  # noqa: BLE001 - a lazily-raised MAX error is still the learner's
        fail(f"{what} gave a value MAX could not compute: {error}")


def test_split_and_merge_heads(step):
    """split_heads gives [B, H, T, D] with each head's slice; merge_heads undoes it"""
    mine, _ = _attention(step, SMALL)
    batch, seq, heads = 2, 5, SMALL["n_head"]
    x = hidden_states(batch, seq, SMALL["n_embd"])
    head_dim = SMALL["n_embd"] // heads
    expected = x.reshape(batch, seq, heads, head_dim).transpose(0, 2, 1, 3)
    assert_close(_method(mine, "split_heads", x), expected, "split_heads(x) vs x split into heads [B, H, T, D]")
    assert_close(_method(mine, "merge_heads", np.ascontiguousarray(expected)), x, "merge_heads(split_heads(x)) vs x")


@pytest.mark.parametrize("seq_len,past_len", [(7, 0), (3, 4)])
def test_attend_matches_scaled_dot_product(step, seq_len, past_len):
    """attend matches Hugging Face's eager attention, with the causal mask"""
    mine, reference = _attention(step, SMALL)
    generator = torch.Generator().manual_seed(seq_len * 31 + past_len)
    shape = (2, SMALL["n_head"], seq_len, SMALL["n_embd"] // SMALL["n_head"])
    q = torch.randn(shape, generator=generator) * 2
    k = torch.randn((*shape[:2], past_len + seq_len, shape[3]), generator=generator) * 2
    v = torch.randn((*shape[:2], past_len + seq_len, shape[3]), generator=generator)
    mask = torch.from_numpy(hf_causal_mask(seq_len, past_len))[None, None]
    expected, _ = eager_attention_forward(reference, q, k, v, mask)  # [B, T, H, D]
    got = _method(mine, "attend", q.numpy(), k.numpy(), v.numpy(), past_len=past_len)
    assert_close(
        got,
        expected.transpose(1, 2).numpy(),
        f"attend(q, k, v, past_len={past_len}) [B, H, T, D] vs softmax(q kᵀ / √d + mask) v",
    )


@pytest.mark.parametrize("name", list(CONFIGS))
def test_matches_gpt2_attention(step, name):
    """CausalSelfAttention matches Hugging Face GPT2Attention under the causal mask"""
    sizes = CONFIGS[name]
    mine, reference = _attention(step, sizes)
    for seq in LENGTHS:
        x = hidden_states(2, seq, sizes["n_embd"], seed=seq)
        assert_close(
            forward(mine, x),
            run_masked(reference, x),
            f"attention output for {seq} tokens vs Hugging Face GPT2Attention ({name})",
        )


def test_is_causal(step):
    """changing token t leaves every output before t unchanged"""
    mine, _ = _attention(step, SMALL)
    x = hidden_states(1, 9, SMALL["n_embd"])
    t = 4
    changed = x.copy()
    changed[:, t] = hidden_states(1, SMALL["n_embd"], seed=9)
    before, after = forward(mine, x), forward(mine, changed)
    leaked = np.abs(after[:, :t] - before[:, :t]).max()
    if leaked > 1e-5:
        position = int(np.argmax(np.abs(after[:, :t] - before[:, :t]).max(axis=(0, 2))))
        fail(
            f"changing token {t} changed the output at position {position} by {leaked:.3g}: a token "
            f"must not see later tokens (is the mask added before the softmax, and the softmax over the keys?)"
        )
    if np.abs(after[:, t:] - before[:, t:]).max() < 1e-6:
        fail(f"changing token {t} did not change any output from position {t} on: are the values used?")
