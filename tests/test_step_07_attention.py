"""Step 07 · CausalSelfAttention against Hugging Face's GPT2Attention (eager).

``GPT2Attention`` on its own is not causal (``GPT2Model`` builds the mask), so the
reference is given the mask ``GPT2Model`` would build (``reference.hf_causal_mask``).
The pieces are checked on their own first, so a failure names the method to fix:
``split_heads`` and ``merge_heads`` against NumPy's reshape and transpose,
``attend`` against Hugging Face's ``eager_attention_forward`` (also with
``past_len``, as step 15 will call it), then the whole module, then causality
directly: changing token t must leave every output before t unchanged. When the
whole module is off, its pieces are checked again first, so that a mistake in
one of them is named with its own TODO, not read as forward's (attend's k·qᵀ
gives the numbers of c_attn's output split as k, q, v, TODO 5's mistake).

Tolerance: the harness default, 1e-4 + 1e-4·|expected|. Measured worst case |Δ| on
solutions/ (float32 noise: MAX and PyTorch sum in different orders): 7e-7 for
``attend``, 1.4e-6 for the module on the small config, 1e-5 at GPT-2 small's width
(768-term dot products). The planted bugs are off by 1.3 (no 1/√d scaling) to 4.3
(heads merged without moving the head axis back), ≥ 1000× the tolerance; q, k, v
split in the wrong order shows from 2 tokens on (at 1 token softmax gives weight 1
whatever the scores), softmax over the queries from 2 tokens on as well. The common
wrong versions (of the split, the scaling, the softmax axis, the mask, the merge) are
computed in NumPy below, so that a ✗ names the mistake and its TODO.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from transformers.models.gpt2.modeling_gpt2 import GPT2Attention, eager_attention_forward

from course.runtime import from_numpy, to_numpy
from harness import (
    Mistake, assert_close, attribute, build, call, fail, forward, load_weights, matching_mistake, solution, todo_in
)
from reference import (
    CONFIGS, SMALL, hf_causal_mask, hf_config, hidden_states, run_masked, seeded, softmax, to_max_state
)

pytestmark = pytest.mark.step07

#: One token, two, a short prompt, and one longer than 16.
LENGTHS = [1, 2, 7, 19]


# --- the common mistakes, in NumPy -------------------------------------------------------------


SPLIT_WITHOUT_TRANSPOSE = (
    "split_heads reshapes [B, T, C] straight to [B, H, T, D], which cuts across tokens; reshape to "
    "[B, T, H, D], then swap the token and head axes"
)
MERGE_WITHOUT_TRANSPOSE = (
    "merge_heads reshapes [B, H, T, D] straight to [B, T, C], which mixes tokens; move the head axis back "
    "behind the token axis first (transpose), then reshape"
)


def split_heads(x: np.ndarray, n_head: int, transpose: bool = True) -> np.ndarray:
    """[B, T, C] -> [B, H, T, D]; without the transpose, reshaped straight to [B, H, T, D] (a mistake)."""
    batch, seq, width = x.shape
    if not transpose:
        return x.reshape(batch, n_head, seq, width // n_head)
    return x.reshape(batch, seq, n_head, width // n_head).transpose(0, 2, 1, 3)


def merge_heads(y: np.ndarray, transpose: bool = True) -> np.ndarray:
    """[B, H, T, D] -> [B, T, C]; without the transpose, reshaped straight to [B, T, C] (a mistake)."""
    batch, heads, seq, head_dim = y.shape
    if transpose:
        y = y.transpose(0, 2, 1, 3)
    return y.reshape(batch, seq, heads * head_dim)


def attend(q, k, v, past_len: int = 0, *, scale: str = "√D", axis: int = -1, masked: bool = True,
           k_first: bool = False) -> np.ndarray:
    """softmax(q kᵀ / √D + mask) v per head, in float64; the keywords make the common mistakes."""
    head_dim = q.shape[-1]
    scores = k @ q.swapaxes(-1, -2) if k_first else q @ k.swapaxes(-1, -2)
    scores = scores / {"√D": math.sqrt(head_dim), "D": head_dim, "1": 1.0, "1/√D": 1 / math.sqrt(head_dim)}[scale]
    if masked:
        scores = scores + np.triu(np.full(scores.shape[-2:], -np.inf), k=past_len + 1)
    return softmax(scores, axis) @ v


def attend_variants(head_dim: int, past_len: int = 0) -> list[tuple[str, dict]]:
    """The common wrong versions of attend (TODO 3): what each does, and attend's keywords for it."""
    root = f"{math.sqrt(head_dim):g}"
    variants = [
        (f"the scores are not scaled: divide q·kᵀ by √head_dim (√{head_dim} = {root})", dict(scale="1")),
        (f"the scores are divided by head_dim ({head_dim}), not by √head_dim ({root})", dict(scale="D")),
        (f"the scores are multiplied by √head_dim ({root}); divide by it", dict(scale="1/√D")),
        ("the softmax runs over the queries (axis -2); each query's weights must sum to 1 over the keys, "
         "the last axis", dict(axis=-2)),
        ("no causal mask: add self.mask(seq_len, past_len) to the scores, before the softmax", dict(masked=False)),
    ]
    if past_len == 0:  # k qᵀ has the right shape only without cached keys
        variants.append(("q and k are swapped: the scores are k·qᵀ, one row per key; they must be q·kᵀ, one row "
                         "per query", dict(k_first=True)))
    return variants


def attend_mistakes(q, k, v, past_len: int = 0) -> list[Mistake]:
    """The common wrong versions of attend on the check's q, k and v."""
    return [
        Mistake(says, 3, lambda kwargs=kwargs: attend(q, k, v, past_len, **kwargs))
        for says, kwargs in attend_variants(q.shape[-1], past_len)
    ]


def attention(x: np.ndarray, state: dict[str, np.ndarray], n_head: int, *, order: str = "qkv",
              split: bool = True, merge: bool = True, **attend_kwargs) -> np.ndarray:
    """GPT-2's attention in NumPy; ``order`` is how the three thirds of c_attn's output were named."""
    qkv = x.astype(np.float64) @ state["c_attn.weight"].T + state["c_attn.bias"]
    named = dict(zip(order, np.split(qkv, 3, axis=-1)))
    q, k, v = (split_heads(named[name], n_head, transpose=split) for name in "qkv")
    y = merge_heads(attend(q, k, v, **attend_kwargs), transpose=merge)
    return y @ state["c_proj.weight"].T + state["c_proj.bias"]


def attention_mistakes(x: np.ndarray, state: dict[str, np.ndarray], n_head: int) -> list[Mistake]:
    """The common wrong attentions on the check's input and weights, each with its TODO."""
    found = [
        Mistake(f"c_attn's output was split as {', '.join(order)}; its three n_embd-wide parts are q, then k, "
                f"then v", 5, lambda order=order: attention(x, state, n_head, order="".join(order)))
        for order in itertools.permutations("qkv") if order != tuple("qkv")
    ]
    found += [
        Mistake(SPLIT_WITHOUT_TRANSPOSE, 2, lambda: attention(x, state, n_head, split=False)),
        Mistake(MERGE_WITHOUT_TRANSPOSE, 4, lambda: attention(x, state, n_head, merge=False)),
    ]
    found += [
        Mistake(says, 3, lambda kwargs=kwargs: attention(x, state, n_head, **kwargs))
        for says, kwargs in attend_variants(x.shape[-1] // n_head)
        if "k_first" not in kwargs  # the same numbers as c_attn's output split as k, q, v
    ]
    return found


# --- the checks ----------------------------------------------------------------------------------


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


def _check_heads(step, mine) -> None:
    """split_heads against NumPy's reshape and transpose, then merge_heads against its inverse."""
    heads = SMALL["n_head"]
    x = hidden_states(2, 5, SMALL["n_embd"])
    expected = split_heads(x, heads)
    split_mistakes = [
        Mistake(SPLIT_WITHOUT_TRANSPOSE, 2, lambda: split_heads(x, heads, transpose=False)),
        Mistake("split_heads returns [B, T, H, D]: after the reshape, swap the token and head axes", 2,
                lambda: x.reshape(*x.shape[:2], heads, -1)),
    ]
    assert_close(_method(mine, "split_heads", x), expected, "split_heads(x) vs x split into heads [B, H, T, D]",
                 mistakes=split_mistakes, step=step)
    merge_mistakes = [Mistake(MERGE_WITHOUT_TRANSPOSE, 4, lambda: merge_heads(expected, transpose=False))]
    assert_close(_method(mine, "merge_heads", np.ascontiguousarray(expected)), x, "merge_heads(split_heads(x)) vs x",
                 mistakes=merge_mistakes, step=step)


def test_split_and_merge_heads(step):
    """split_heads gives [B, H, T, D] with each head's slice; merge_heads undoes it"""
    mine, _ = _attention(step, SMALL)
    _check_heads(step, mine)


def check_attend(step, seq_len: int, past_len: int) -> None:
    """attend on seeded q, k, v (``past_len`` cached keys) against Hugging Face's eager attention."""
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
        mistakes=attend_mistakes(q.numpy(), k.numpy(), v.numpy(), past_len),
        step=step,
    )


@pytest.mark.parametrize("seq_len,past_len", [(7, 0), (3, 4)])
def test_attend_matches_scaled_dot_product(step, seq_len, past_len):
    """attend matches Hugging Face's eager attention, with the causal mask"""
    check_attend(step, seq_len, past_len)


def _close(got: np.ndarray, expected: np.ndarray) -> bool:
    """Whether ``got`` matches ``expected`` within the harness's tolerance."""
    return matching_mistake(got, [Mistake("", 0, lambda: expected)]) is not None


@pytest.mark.parametrize("name", list(CONFIGS))
def test_matches_gpt2_attention(step, name):
    """CausalSelfAttention matches Hugging Face GPT2Attention under the causal mask"""
    sizes = CONFIGS[name]
    mine, reference = _attention(step, sizes)
    state = to_max_state(reference)
    for seq in LENGTHS:
        x = hidden_states(2, seq, sizes["n_embd"], seed=seq)
        got, expected = forward(mine, x), run_masked(reference, x)
        if not _close(got, expected):
            # forward runs split_heads, attend and merge_heads (TODO 2-4): a wrong one is named first. Else its
            # mistake can read as forward's: attend's k·qᵀ gives the numbers of c_attn's output split as k, q, v.
            _check_heads(step, _attention(step, SMALL)[0])  # the pieces' checks run on the small config
            check_attend(step, 7, 0)
        assert_close(
            got,
            expected,
            f"attention output for {seq} tokens vs Hugging Face GPT2Attention ({name})",
            mistakes=attention_mistakes(x, state, sizes["n_head"]),
            step=step,
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
        leak = f"changing token {t} changed the output at position {position} by {leaked:.3g}: a token sees later ones"
        try:  # split_heads and merge_heads move values between tokens too: rule them out first
            _check_heads(step, mine)
        except pytest.fail.Exception as fault:
            fail(f"{leak}, because {fault.msg}")
        fail(f"{leak}. Is the mask added before the softmax, and the softmax over the keys? — "
             f"{todo_in(type(mine).attend)}")
    if np.abs(after[:, t:] - before[:, t:]).max() < 1e-6:
        fail(f"changing token {t} did not change any output from position {t} on: are the values used? — "
             f"{todo_in(type(mine).attend)}")


def test_the_mask_with_nothing_cached_by_default(step):
    """the attention's mask(seq_len) (given) is step 02's causal mask with nothing cached"""
    mine, _ = _attention(step, SMALL)
    got, expected = to_numpy(mine.mask(5)), to_numpy(solution(2).causal_mask(5, 0))
    if got.shape != expected.shape or not np.array_equal(got, expected):
        fail(f"CausalSelfAttention.mask(5) is a {list(got.shape)} mask that differs from causal_mask(5, 0): its "
             "signature's default is past_len=0, nothing cached — keep it as given")
