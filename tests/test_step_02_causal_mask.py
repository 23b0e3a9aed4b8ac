"""Step 02 · causal_mask against the mask Hugging Face builds for GPT-2.

Measured worst case: the attention weights agree to 0.0 (bit for bit), since
both masks only ever add 0 to the allowed scores.

The first check looks at every case together and names the *kind* of a wrong mask
(not float, 1/0 instead of 0/-inf, inverted, diagonal shifted by k, past_len
ignored), so the first ✗ a learner reads is the most telling one.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.models.gpt2.modeling_gpt2 import GPT2Attention, eager_attention_forward

from course.runtime import to_numpy
from harness import assert_close, attribute, call, fail, todo_in
from reference import GPT2_SMALL, SMALL, hf_causal_mask, hf_config

pytestmark = pytest.mark.step02

# (new tokens, cached tokens): a prompt, one token, a chunk after a cache, a long prompt.
CASES = [(1, 0), (5, 0), (4, 3), (1, 7), (16, 0)]


def _mask(step, seq_len: int, past_len: int) -> np.ndarray:
    fn = attribute(step, "causal_mask")
    result = call(fn, seq_len, past_len, what=f"causal_mask({seq_len}, {past_len})")
    dtype = getattr(result, "dtype", None)
    if dtype is not None and "float" not in str(dtype).lower():
        fail(
            f"causal_mask({seq_len}, {past_len}) is a {str(dtype).split('.')[-1]} tensor; the mask is "
            f"*added* to float scores, so it must be float32, 0 where a query may look and -inf "
            f"where it may not — {todo_in(fn)}"
        )
    return to_numpy(result)


# The most telling cases first; one-row cases cannot show a shifted diagonal.
PATTERN_CASES = [(5, 0), (4, 3), (16, 0), (3, 6), (1, 7), (1, 0)]


def _blocked_if(kind: str, k: int, seq_len: int, past_len: int) -> np.ndarray:
    """Where a mask of a given kind puts -inf, for one case."""
    rows, cols = np.indices((seq_len, past_len + seq_len))
    if kind == "inverted":
        return cols <= past_len + rows
    if kind == "no offset":
        return cols > rows
    if kind == "band -1":  # F.band_part reads a negative bound as "no limit"
        return cols > past_len + rows - 1 if past_len else np.zeros_like(rows, dtype=bool)
    if kind == "open":
        return np.zeros_like(rows, dtype=bool)
    return cols > past_len + rows + k  # "shift": the diagonal moved by k (0 is right)


#: The kinds of wrong mask, most specific first, and what each means for a learner.
KINDS = [
    ("inverted", 0, "the mask is inverted: it blocks (-inf) exactly the keys a query may see and opens (0) "
     "its future; swap which region gets -inf"),
    ("no offset", 0, "the mask ignores past_len: it is right with nothing cached, but with past_len cached "
     "tokens query i sits at position past_len + i and may see keys 0 .. past_len + i"),
    ("band -1", 0, "the mask is off by one, too closed: with tokens cached, query i is blocked from key "
     "past_len + i, its own position; and with past_len = 0 nothing is blocked at all, because "
     "F.band_part reads a negative bound as \"no limit\""),
    *[("shift", k, f"the mask is too open by {k}: its diagonal sits {k} to the right, so every query also "
       f"sees the next {k} key(s), its future") for k in range(1, 4)],
    *[("shift", -k, f"the mask is too closed by {k}: its diagonal sits {k} to the left, so query i is "
       f"blocked from key past_len + i, its own position") for k in range(1, 4)],
    ("open", 0, "the mask blocks nothing: every entry is 0, so every query sees its future"),
]


def _diagnosis(blocked: dict[tuple[int, int], np.ndarray]) -> str | None:
    """The first kind of wrong mask that explains every case, or None."""
    for kind, k, meaning in KINDS:
        if all(np.array_equal(mask, _blocked_if(kind, k, *case)) for case, mask in blocked.items()):
            return meaning
    return None


def _first_wrong_entry(mask: np.ndarray, seq_len: int, past_len: int) -> str | None:
    """The first entry that should be -inf and is not (else the first that should be 0), in words."""
    rows, cols = np.indices(mask.shape)
    future = cols > past_len + rows
    for wrong, expected, verb in [
        (future & ~np.isneginf(mask), "-inf", "must not see"),
        (~future & (mask != 0), "0", "may see"),
    ]:
        if wrong.any():
            i, j = (int(v) for v in np.argwhere(wrong)[0])
            return (
                f"causal_mask({seq_len}, {past_len})[{i}, {j}] is {mask[i, j]}, expected {expected}: "
                f"query {i} sits at position {past_len + i} and {verb} key {j}"
            )
    return None


def test_mask_pattern(step):
    """float, 0 / -inf, and the causal pattern across every case"""
    fn = attribute(step, "causal_mask")
    masks, first_error = {}, None
    for seq_len, past_len in PATTERN_CASES:
        try:
            mask = _mask(step, seq_len, past_len)
        except pytest.fail.Exception as error:
            if "tensor; the mask is *added*" in str(error):
                raise
            first_error = first_error or error  # e.g. MAX refusing a band wider than the mask
            continue
        if mask.shape != (seq_len, past_len + seq_len):
            fail(
                f"causal_mask({seq_len}, {past_len}) has shape {list(mask.shape)}, expected "
                f"{[seq_len, past_len + seq_len]}: one row per new token, one column per key "
                f"(past_len cached + seq_len new) — {todo_in(fn)}"
            )
        values = set(np.unique(mask).tolist())
        if not values <= {0.0, float("-inf")}:
            shown = ", ".join(f"{v:g}" for v in sorted(values)[:4])
            boolean = " — that is a 1/0 (boolean-style) mask" if values <= {0.0, 1.0} else ""
            fail(
                f"causal_mask({seq_len}, {past_len}) holds the values {shown}{boolean}; an additive "
                f"mask holds only 0 (may look) and -inf (blocked), so that adding it to the scores "
                f"leaves allowed ones unchanged and softmax gives blocked ones weight 0 — {todo_in(fn)}"
            )
        masks[(seq_len, past_len)] = mask
    wrong = [(case, entry) for case, mask in masks.items() if (entry := _first_wrong_entry(mask, *case))]
    if not wrong:
        if first_error is not None:
            raise first_error
        return
    # A known kind of wrong mask, or else the first wrong entry, as plainly as possible.
    diagnosis = _diagnosis({case: np.isneginf(mask) for case, mask in masks.items()}) or wrong[0][1]
    fail(f"{diagnosis} — {todo_in(fn)}")


def test_nothing_cached_by_default(step):
    """causal_mask(seq_len), with no past_len, is the mask for nothing cached: causal_mask(seq_len, 0)"""
    fn = attribute(step, "causal_mask")
    alone = to_numpy(call(fn, 4, what="causal_mask(4)"))
    if not np.array_equal(alone, _mask(step, 4, 0)):
        fail(f"causal_mask(4) has shape {list(alone.shape)} and differs from causal_mask(4, 0): the signature's "
             "default is past_len=0, nothing cached — keep it as given")


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


@pytest.mark.parametrize("seq_len,past_len", CASES)
def test_shape_and_values(step, seq_len, past_len):
    """shape, and 0 / -inf in the right places"""
    mask = _mask(step, seq_len, past_len)
    expected_shape = (seq_len, past_len + seq_len)
    if mask.shape != expected_shape:
        fail(f"causal_mask({seq_len}, {past_len}) has shape {list(mask.shape)}, expected {list(expected_shape)}")
    if (wrong := _first_wrong_entry(mask, seq_len, past_len)) is not None:
        fail(wrong)


@pytest.mark.parametrize("seq_len,past_len", CASES)
def test_matches_hugging_face_attention(step, seq_len, past_len):
    """attention weights match Hugging Face's mask"""
    mine = _mask(step, seq_len, past_len)
    theirs = hf_causal_mask(seq_len, past_len, SMALL)
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
    _blocked_mismatch(_mask(step, n, 0), hf_causal_mask(n, 0, GPT2_SMALL), f"causal_mask({n}, 0)")
