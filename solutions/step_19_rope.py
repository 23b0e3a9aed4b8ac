"""Step 19 · Rotary position embeddings (RoPE).

GPT-2 adds a learned vector per position to each token (step 06). Llama has no
such table: it tells attention where tokens are by *rotating* each query and
key. A head's ``head_dim`` numbers are seen as ``head_dim / 2`` pairs, and pair
``i`` of the token at position ``p`` is turned by the angle

    p * theta ** (-2i / head_dim)        i = 0, 1, …, head_dim / 2 - 1

so the first pairs spin fast and the last ones slowly. ``theta`` is the config's
``rope_theta`` (100,000 for SmolLM2). A rotated query and a rotated key then
score by how far apart their positions are, not by where they are.

Which numbers form a pair is a convention. Hugging Face's Llama pairs number
``j`` of the first half with number ``j`` of the second half ("rotate half"):

    x = [x1, x2]            x1, x2: the two halves of the last axis
    rotate_half(x) = [-x2, x1]
    rope(x) = [x1 * cos - x2 * sin,  x2 * cos + x1 * sin]

with ``cos`` and ``sin`` of the angles, each angle written twice (once per
half): each pair turned as a point in the plane. Queries and keys are
rotated; values are not.

``past_len`` gives the tables of tokens that follow ``past_len`` cached ones, as
step 06's position embeddings did.

Check this step with ``pixi run s19``.
"""

from __future__ import annotations

from max.dtype import DType
from max.experimental import functional as F
from max.experimental.tensor import Tensor


# ANCHOR: tables
def rope_tables(head_dim: int, theta: float, seq_len: int, past_len: int = 0) -> tuple[Tensor, Tensor]:
    """cos and sin of every angle, each ``[seq_len, head_dim]``, for positions
    ``past_len`` to ``past_len + seq_len - 1``."""
    # TODO 1: Compute the head_dim / 2 frequencies theta ** (-2i / head_dim), one per pair.
    # Hint: F.arange can count 2i for every pair by itself (look up its step and dtype
    #   arguments); the rest is element-wise arithmetic, a Python number included.
    # ANCHOR: frequencies | stub: frequencies = None
    frequencies = 1.0 / theta ** (F.arange(0, head_dim, 2, dtype=DType.float32) / head_dim)
    # ANCHOR_END: frequencies

    # TODO 2: Multiply every position by every frequency ([seq_len, head_dim / 2]), write the
    #   angles twice side by side ([seq_len, head_dim]), and return their cos and sin.
    # Hint: the chapter's table of shapes. Broadcasting makes every product of a column
    #   (positions) and a row (frequencies); look up F.concat for "side by side".
    # ANCHOR: angles | stub: return None
    positions = F.arange(past_len, past_len + seq_len, dtype=DType.float32)
    angles = positions.reshape([seq_len, 1]) * frequencies.reshape([1, head_dim // 2])
    angles = F.concat([angles, angles], axis=-1)
    return F.cos(angles), F.sin(angles)
    # ANCHOR_END: angles


# ANCHOR_END: tables


# ANCHOR: apply
def rotate_half(x: Tensor) -> Tensor:
    """[x1, x2] -> [-x2, x1], the halves of x's last axis."""
    # TODO 3: Cut the last axis into its two halves and put them back as [-x2, x1].
    # Hint: F.split and F.concat each work along one axis. A width read from x.shape is a
    #   Dim, not a Python int: convert it before you halve it.
    # ANCHOR: rotate_half | stub: return None
    half = int(x.shape[-1]) // 2
    x1, x2 = F.split(x, [half, half], axis=-1)
    return F.concat([-x2, x1], axis=-1)
    # ANCHOR_END: rotate_half


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotates x ``[..., seq_len, head_dim]`` (queries or keys) by the tables of rope_tables."""
    # TODO 4: Return x rotated by the tables: its first half becomes x1 * cos - x2 * sin,
    #   its second x2 * cos + x1 * sin (the module docstring's rope(x)).
    # Hint: rotate_half(x) puts each number's partner, with its sign, where the number
    #   was; then the whole rotation is element-wise: which of x and rotate_half(x)
    #   goes with cos, and which with sin?
    # ANCHOR: rotate | stub: return None
    return x * cos + rotate_half(x) * sin
    # ANCHOR_END: rotate


# ANCHOR_END: apply
