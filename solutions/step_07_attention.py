"""Step 07 · Multi-head causal self-attention.

Attention is where tokens exchange information. Each token makes three vectors
from its own ``n_embd`` numbers:

* a **query** q: what am I looking for?
* a **key** k: what do I contain?
* a **value** v: what do I pass on to whoever attends to me?

Token ``i`` scores every key ``j`` with a dot product, ``q_i · k_j``, divided by
``sqrt(head_dim)`` so the scores do not grow with the width. The causal mask
(step 02) adds ``-inf`` wherever ``j`` is in ``i``'s future. A softmax over the
keys turns each row of scores into weights that sum to 1, and token ``i``'s
output is the weighted sum of the values:

    attention(Q, K, V) = softmax(Q Kᵀ / sqrt(head_dim) + mask) V

**Heads.** GPT-2 runs ``n_head`` attentions side by side, each on its own
``head_dim = n_embd / n_head`` slice of q, k and v, so each head can look for a
different kind of relation. The heads become a batch axis:

    x              [B, T, C]             C = n_embd
    c_attn(x)      [B, T, 3C]            q, k and v side by side, in that order
    q, k, v        [B, T, C] each
    split_heads    [B, H, T, D]          H = n_head, D = head_dim, C = H * D
    scores         [B, H, T, T]          q @ kᵀ: one row of scores per query
    weights @ v    [B, H, T, D]
    merge_heads    [B, T, C]             the heads side by side again
    c_proj         [B, T, C]             mixes what the heads found

``c_attn`` and ``c_proj`` are the checkpoint's names. ``c_attn`` computes q, k
and v with one ``[3C, C]`` weight: the first C outputs are q, the next C are k,
the last C are v.

``attend`` takes ``past_len`` so that step 15 can reuse it with a KV cache, where
the keys and values include ``past_len`` earlier tokens; it gets its mask from
``self.mask``, which step 15 overrides.

Check this step with ``pixi run s07``.
"""

from __future__ import annotations

import math

from max.experimental import functional as F
from max.experimental.nn import Linear, Module
from max.experimental.tensor import Tensor

from step_01_config import GPT2Config
from step_02_causal_mask import causal_mask


# ANCHOR: attention
class CausalSelfAttention(Module):
    """GPT-2's masked multi-head self-attention."""

    def __init__(self, config: GPT2Config):
        self.n_embd = config.n_embd
        self.n_head = config.n_head
        self.head_dim = config.head_dim
        # TODO 1: Create the two linear layers (both with bias), with the checkpoint's widths:
        #   c_attn computes q, k and v in one multiply, side by side;
        #   c_proj projects the merged heads back into the residual stream.
        # Hint: the chapter's table of shapes: how wide is each of q, k and v?
        # ANCHOR: layers | stub: self.c_attn = self.c_proj = None
        self.c_attn = Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = Linear(config.n_embd, config.n_embd)
        # ANCHOR_END: layers

    def split_heads(self, x: Tensor) -> Tensor:
        """[B, T, C] -> [B, H, T, D]: gives each head its own slice of every token."""
        # TODO 2: Reshape the last axis C into (n_head, head_dim), then move the head
        #   axis in front of the token axis.
        # Hint: x.reshape([...]) accepts x.shape[0] and x.shape[1] as sizes;
        #   x.transpose(a, b) swaps two axes.
        # ANCHOR: split_heads | stub: return None
        x = x.reshape([x.shape[0], x.shape[1], self.n_head, self.head_dim])
        return x.transpose(1, 2)
        # ANCHOR_END: split_heads

    def attend(self, q: Tensor, k: Tensor, v: Tensor, past_len: int = 0) -> Tensor:
        """Scaled dot-product attention with the causal mask, per head.

        q is [B, H, T, D] for T new tokens; k and v are [B, H, past_len + T, D].
        Returns [B, H, T, D].
        """
        seq_len = q.shape[2]  # a Dim: a number here, a symbol in a compiled graph
        # TODO 3: Score every query against every key, scaled by 1 / sqrt(head_dim);
        #   add self.mask(seq_len, past_len), step 02's mask; softmax over the keys;
        #   return the weighted sum of the values.
        # Hint: a @ b multiplies over the last two axes (the others are batch axes): which
        #   two axes of k must trade places for the scores to be [B, H, T, past_len + T]?
        #   F.softmax takes an axis: which axis holds the keys?
        # ANCHOR: attend | stub: return None
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        scores = scores + self.mask(seq_len, past_len)
        weights = F.softmax(scores, axis=-1)
        return weights @ v
        # ANCHOR_END: attend

    def mask(self, seq_len, past_len=0) -> Tensor:
        """The additive causal mask of step 02, ``[seq_len, past_len + seq_len]`` (given code).

        A method, so that step 15 can give the cached attention its own version.
        """
        return causal_mask(seq_len, past_len)

    def merge_heads(self, y: Tensor) -> Tensor:
        """[B, H, T, D] -> [B, T, C]: the inverse of split_heads."""
        # TODO 4: Move the head axis back behind the token axis, then join
        #   (n_head, head_dim) into one axis of n_embd.
        # Hint: reshape only regroups numbers in their memory order; which axes must
        #   be next to each other before H and D can become one?
        # ANCHOR: merge_heads | stub: return None
        return y.transpose(1, 2).reshape([y.shape[0], y.shape[2], self.n_embd])
        # ANCHOR_END: merge_heads

    def forward(self, x: Tensor) -> Tensor:
        # TODO 5: Compute q, k, v with c_attn and split them apart (q first, then k,
        #   then v); split each into heads; attend; merge the heads; project with c_proj.
        # Hint: F.split cuts an axis into pieces of the sizes you list: how wide is each?
        # ANCHOR: forward | stub: return None
        q, k, v = F.split(self.c_attn(x), [self.n_embd] * 3, axis=-1)
        y = self.attend(self.split_heads(q), self.split_heads(k), self.split_heads(v))
        return self.c_proj(self.merge_heads(y))
        # ANCHOR_END: forward


# ANCHOR_END: attention
