"""Step 19 · RoPE against Hugging Face's LlamaRotaryEmbedding, rotate_half and apply_rotary_pos_emb.

The pieces are checked on their own, so that a failure names the function to fix:
the cos/sin tables against ``LlamaRotaryEmbedding`` at positions 0… and after
``past_len`` cached tokens; ``rotate_half`` against Hugging Face's; ``apply_rope``
on Hugging Face's own tables against ``apply_rotary_pos_emb``. ``apply_rope`` calls
the learner's ``rotate_half`` (TODO 3), and one that gives ``[x2, -x1]`` makes the
right ``apply_rope`` read as "the rotated half is subtracted" (TODO 4): the course's
``rotate_half`` stands in for it there, so that a ✗ on ``apply_rope`` is TODO 4's alone.

Tolerance: the harness default, 1e-4 + 1e-4·|expected|. The angles reach
``position × 1`` radians for the first pair, so float32 cos/sin of angles up to ~40
differ from PyTorch's by about 1e-6. Measured worst case |Δ| on solutions/: 2.2e-7 for
the tables up to position 7, 9.5e-7 at position 40; 0 for rotate_half and apply_rope
(the same element-wise operations in the same order). The common wrong versions (theta ignored, the exponent
without its 2, the frequencies not inverted, the pairs interleaved as in GPT-J, positions not offset, cos
and sin swapped, the rotation's sign) are computed in NumPy below.

The frequencies not inverted, theta ** (+2i / head_dim), turn the last pairs by up to 142,000 rad (7 tokens,
head_dim 16) or 4.7 million (position 40, head_dim 64). There float32 holds the angle only to ~0.01 rad, and
MAX's cos and sin differ from NumPy's float64 ones by up to 1.7 (measured), so that mistake is compared only
where its angles stay within EXACT_ANGLES radians: measured, MAX's float32 tables of that mistake differ from
NumPy's by at most 5.8e-6 there (1.1e-5 up to 100 rad), and every check but the one token after 40 has entries
there that tell it from the right tables.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb, rotate_half

from course.runtime import from_numpy, to_numpy
from harness import Mistake, assert_close, attribute, call, fail, solution, todo_in
from reference import LLAMA_CONFIGS, hidden_states, llama_hf_config

pytestmark = pytest.mark.step19

#: (sequence length, cached tokens before it): a prompt, and new tokens after a cache.
POSITIONS = [(7, 0), (3, 5), (1, 40)]
#: Angles up to this many radians keep a float32 cos and sin within ~1e-5 of float64's, however the angle was
#: formed (float32's spacing at 64 is 3.8e-6): a mistake's tables are compared where its angles stay below it.
EXACT_ANGLES = 64.0


def _hf_tables(sizes: dict, seq_len: int, past_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Hugging Face's cos and sin, each [seq_len, head_dim]."""
    rotary = LlamaRotaryEmbedding(llama_hf_config(**sizes))
    with torch.no_grad():
        cos, sin = rotary(torch.zeros(1), torch.arange(past_len, past_len + seq_len)[None])
    return cos[0].numpy(), sin[0].numpy()


def angles(head_dim: int, theta: float, seq_len: int, past_len: int = 0, *, exponent: float = 2.0,
           inverted: bool = True, interleaved: bool = False, start: int | None = None) -> np.ndarray:
    """Every position's angles, [seq_len, head_dim], in float64; the keywords make the common mistakes."""
    i = np.arange(head_dim // 2)
    frequencies = theta ** ((-1 if inverted else 1) * exponent * i / head_dim)
    first = past_len if start is None else start
    turns = np.arange(first, first + seq_len)[:, None] * frequencies[None, :]
    return np.repeat(turns, 2, axis=-1) if interleaved else np.concatenate([turns, turns], axis=-1)


def tables(head_dim: int, theta: float, seq_len: int, past_len: int = 0, **mistake) -> np.ndarray:
    """cos and sin stacked, [2, seq_len, head_dim], in float64; the keywords (``angles``') make the common
    mistakes."""
    turns = angles(head_dim, theta, seq_len, past_len, **mistake)
    return np.stack([np.cos(turns), np.sin(turns)])


def where_float32_holds(mine: np.ndarray, wrong: np.ndarray, turns: np.ndarray, right: np.ndarray) -> np.ndarray:
    """A wrong version's tables ``wrong`` (of the angles ``turns``) where float32 can still compute them, and the
    learner's own numbers ``mine`` where no float32 cos or sin is close to float64's (angles past EXACT_ANGLES): the
    learner's tables match a mistake this gives where they match it on every angle float32 holds. Where those
    angles cannot tell the mistake from the ``right`` tables (none, or all equal), the mistake's tables as they are
    (matched only by a learner whose numbers are those everywhere)."""
    held = np.broadcast_to(np.abs(turns) <= EXACT_ANGLES, wrong.shape)
    if mine.shape != wrong.shape or not (held & (np.abs(wrong - right) > 1e-3)).any():
        return wrong
    return np.where(held, wrong, mine)


def table_mistakes(head_dim: int, theta: float, seq_len: int, past_len: int, mine: np.ndarray) -> list[Mistake]:
    """The common wrong rope_tables, each with its TODO, on the angles float32 holds (``mine``: the learner's)."""
    right = tables(head_dim, theta, seq_len, past_len)

    def wrong(flip: bool = False, theta: float = theta, **mistake):
        turns = angles(head_dim, theta, seq_len, past_len, **mistake)
        made = np.stack([np.cos(turns), np.sin(turns)])
        return lambda: where_float32_holds(mine, made[::-1] if flip else made, turns, right)

    found = [
        Mistake(f"the frequencies use theta = {other:g}, not the theta = {theta:g} rope_tables was given "
                f"(the config's rope_theta)", 1, wrong(theta=other))
        for other in (10000.0, 500000.0) if other != theta
    ]
    found += [
        Mistake("the exponent is -i / head_dim; pair i turns at theta ** (-2i / head_dim), so the last pair is "
                "almost still", 1, wrong(exponent=1.0)),
        Mistake("the frequencies are theta ** (+2i / head_dim), not 1 / theta ** (2i / head_dim): every pair "
                "but the first spins far too fast", 1, wrong(inverted=False)),
        Mistake("each angle is repeated in place (a1, a1, a2, a2, …), the interleaved GPT-J layout; Hugging "
                "Face's Llama writes the angles twice side by side (a1, a2, …, a1, a2, …)", 2,
                wrong(interleaved=True)),
        Mistake("positions start at 1, not 0", 2, wrong(start=past_len + 1)),
        Mistake("cos and sin are swapped: return cos first, then sin", 2, wrong(flip=True)),
    ]
    if past_len:
        found.append(Mistake(f"past_len is ignored: positions start at 0, not at past_len = {past_len}", 2,
                             wrong(start=0)))
    return found


@pytest.mark.parametrize("name", list(LLAMA_CONFIGS))
@pytest.mark.parametrize("seq_len, past_len", POSITIONS, ids=[f"{t}-after-{p}" for t, p in POSITIONS])
def test_tables_match_llama_rotary_embedding(step, name, seq_len, past_len):
    """rope_tables gives LlamaRotaryEmbedding's cos and sin, also after cached tokens"""
    sizes = LLAMA_CONFIGS[name]
    head_dim, theta = sizes["hidden_size"] // sizes["num_attention_heads"], sizes["rope_theta"]
    fn = attribute(step, "rope_tables")
    result = call(fn, head_dim, theta, seq_len, past_len, what=f"rope_tables({head_dim}, {theta:g}, {seq_len}, "
                  f"past_len={past_len})")
    if not isinstance(result, tuple) or len(result) != 2:
        fail(f"rope_tables returned {type(result).__name__}, not the two tables (cos, sin) — {todo_in(fn)}")
    mine = np.stack([to_numpy(table) for table in result]) if _same_shapes(result) else None
    expected = np.stack(_hf_tables(sizes, seq_len, past_len))
    if mine is None:
        fail(f"rope_tables' cos and sin have shapes {[list(t.shape) for t in result]}; each should be "
             f"{list(expected.shape[1:])} — {todo_in(fn)}")
    assert_close(mine, expected, f"cos and sin for {seq_len} tokens after {past_len} ({name})",
                 mistakes=table_mistakes(head_dim, theta, seq_len, past_len, mine), step=step)


def _same_shapes(result) -> bool:
    return all(hasattr(t, "shape") for t in result) and len({tuple(int(d) for d in t.shape) for t in result}) == 1


def rotations(x: np.ndarray) -> dict[str, np.ndarray]:
    """Hugging Face's rotate_half of x and its common wrong versions, in float64."""
    x = x.astype(np.float64)
    x1, x2 = np.split(x, 2, axis=-1)
    pairs = x.reshape(*x.shape[:-1], -1, 2)
    interleaved = np.stack([-pairs[..., 1], pairs[..., 0]], axis=-1).reshape(x.shape)
    return {
        "right": np.concatenate([-x2, x1], axis=-1),
        "signs": np.concatenate([x2, -x1], axis=-1),
        "unsigned": np.concatenate([x2, x1], axis=-1),
        "interleaved": interleaved,
    }


ROTATION_MISTAKES = {
    "signs": "the halves come back as [x2, -x1], a rotation the other way; rotate_half gives [-x2, x1]",
    "unsigned": "the halves are swapped but nothing is negated: rotate_half gives [-x2, x1]",
    "interleaved": "neighbouring numbers are paired, (x0, x1), (x2, x3), …, as in GPT-J; Hugging Face's Llama pairs "
                   "the two halves: number j with number j + head_dim / 2",
}


def test_rotate_half_matches_hugging_face(step):
    """rotate_half gives [-x2, x1], as Hugging Face's does"""
    x = hidden_states(2, 4, 7, 16)
    fn = attribute(step, "rotate_half")
    mine = call(fn, from_numpy(x), what="rotate_half(x)")
    wrong = rotations(x)
    assert_close(to_numpy(mine), rotate_half(torch.from_numpy(x)).numpy(), "rotate_half(x) vs Hugging Face's",
                 mistakes=[Mistake(says, 3, lambda key=key: wrong[key]) for key, says in ROTATION_MISTAKES.items()],
                 step=step)


@pytest.mark.parametrize("name", list(LLAMA_CONFIGS))
@pytest.mark.parametrize("seq_len, past_len", POSITIONS[:2], ids=[f"{t}-after-{p}" for t, p in POSITIONS[:2]])
def test_apply_rope_matches_apply_rotary_pos_emb(step, monkeypatch, name, seq_len, past_len):
    """apply_rope, given Hugging Face's tables and the course's rotate_half, rotates queries as apply_rotary_pos_emb does"""
    sizes = LLAMA_CONFIGS[name]
    heads, head_dim = sizes["num_attention_heads"], sizes["hidden_size"] // sizes["num_attention_heads"]
    cos, sin = _hf_tables(sizes, seq_len, past_len)
    q = hidden_states(2, heads, seq_len, head_dim, seed=3)
    fn = attribute(step, "apply_rope")
    # apply_rope calls rotate_half, TODO 3's (checked on its own above). One giving [x2, -x1] would make a right
    # apply_rope read as "subtracted" (TODO 4), and "fixing" that would hide the bug: the course's stands in.
    monkeypatch.setattr(step, "rotate_half", solution(19).rotate_half, raising=False)
    mine = call(fn, from_numpy(q), from_numpy(cos), from_numpy(sin), what="apply_rope(q, cos, sin)")
    with torch.no_grad():
        expected, _ = apply_rotary_pos_emb(torch.from_numpy(q), torch.from_numpy(q), torch.from_numpy(cos)[None],
                                           torch.from_numpy(sin)[None])
    x, turned = q.astype(np.float64), rotations(q)
    mistakes = [
        Mistake("the rotated half is subtracted: x * cos - rotate_half(x) * sin turns the other way; add it", 4,
                lambda: x * cos - turned["right"] * sin),
        Mistake("cos and sin trade places: x is scaled by cos and rotate_half(x) by sin", 4,
                lambda: x * sin + turned["right"] * cos),
        Mistake("only x * cos: the rotated half, rotate_half(x) * sin, is missing", 4, lambda: x * cos),
    ]
    assert_close(to_numpy(mine), expected.numpy(), f"apply_rope(q, cos, sin) for {seq_len} tokens after {past_len} "
                 f"({name})", mistakes=mistakes, step=step)


def test_tables_with_nothing_cached_by_default(step):
    """rope_tables(head_dim, theta, seq_len), with no past_len, gives positions 0 .. seq_len - 1"""
    fn = attribute(step, "rope_tables")
    alone = call(fn, 8, 10000.0, 5, what="rope_tables(8, 10000.0, 5)")
    first = call(fn, 8, 10000.0, 5, 0, what="rope_tables(8, 10000.0, 5, 0)")
    if any(not np.array_equal(to_numpy(a), to_numpy(b)) for a, b in zip(alone, first)):
        fail("rope_tables(8, 10000.0, 5) differs from rope_tables(8, 10000.0, 5, 0): the signature's default is "
             "past_len=0, nothing cached — keep it as given")
