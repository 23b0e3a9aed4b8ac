"""Step 25 · Serving GPT-2: a ragged batch on a paged cache.

``main`` decodes one prompt at a time: one sequence, one cache of its own, grown
by a concatenation every step (step 15). A server has many requests in flight,
each at its own length, and it decodes them together, because on a CPU as on a
GPU one pass over the weights for 8 sequences costs little more than for one.
MAX's server (``max serve``) does the scheduling; this step writes the model it
runs, in the form it asks of an architecture:

* **A ragged batch.** The batch's new tokens come as one flat row of ids,
  ``tokens [N]``, with ``input_row_offsets [B + 1]`` saying where each sequence
  starts: sequence ``b`` owns ``tokens[offsets[b] : offsets[b + 1]]``. A
  prefilling request brings its whole prompt, a decoding one a single token, in
  the same row: no padding, no wasted rows. Every layer but attention works on
  ``[N, C]`` rows and never needs to know where one sequence ends.
* **A paged cache.** MAX keeps every request's keys and values in fixed-size
  pages (128 tokens) of one shared pool, with a page table saying which pages
  are whose; ``cache_lengths [B]`` says how many tokens each request already has
  there. A request that ends gives its pages back, and the next one takes them:
  no request's cache has to be one long block, so nothing is copied as it grows.
* **Positions come from the cache.** Token ``i`` of sequence ``b`` sits at
  position ``cache_lengths[b] + i - offsets[b]``. The wpe lookup (step 06) takes
  that, one position a token.
* **Attention through the pages.** Each layer writes its new k and v into the
  pages, then MAX's ragged flash attention reads them back, every query against
  its own sequence's keys only, causally. The learner's step-07 attention did
  that for one sequence with a mask; the kernel does it for the batch, page by
  page, without building a ``[T, T]`` mask.

    tokens [N]  offsets [B + 1]  cache (pages)  ->  logits [B, vocab]   (one row a sequence: its last token)

Everything else is the learner's: step 07's ``c_attn`` and ``c_proj``, step
09's layer norms and MLP, step 11's tied head, step 14's weight loading. The
contract with MAX (a config, the pipeline model, the batch of inputs, the
registration under ``GPT2LMHeadModel``) is the course's, in
``course/architectures.py``. Check this step with ``pixi run s25``; then
``pixi run serve --model course``.
"""

from __future__ import annotations

import math

from max.dtype import DType
from max.experimental import functional as F
from max.experimental.nn import ModuleList
from max.experimental.tensor import Tensor

from course.paged import PagedCache, attend_paged, store_paged
from step_01_config import GPT2Config
from step_07_attention import CausalSelfAttention
from step_08_residual import residual
from step_09_block import Block
from step_11_lm_head import GPT2LMHeadModel


# ANCHOR: positions
def ragged_positions(n_tokens, input_row_offsets: Tensor, cache_lengths: Tensor) -> Tensor:
    """Each token's position, [n_tokens] int64: token i of sequence b sits at cache_lengths[b] + i - offsets[b]."""
    # TODO 1: Find each token's sequence b (how many sequences end at or before it),
    #   then its position: what that sequence already has cached, plus how far the
    #   token is from the sequence's first new token.
    # Hint: a token's sequence is the number of sequences that end at or before it: an
    #   [N, B] comparison of the token indices with the ends offsets[1:], counted along B.
    #   Look up F.greater_equal, F.sum and F.gather. The offsets and lengths are uint32:
    #   cast to int64 before subtracting.
    # ANCHOR: positions_body | stub: return None
    index = F.arange(0, n_tokens, dtype=DType.int64)
    offsets = F.cast(input_row_offsets, DType.int64)
    ended = F.greater_equal(F.unsqueeze(index, 1), F.unsqueeze(offsets[1:], 0))
    row = F.sum(F.cast(ended, DType.int64), axis=-1).reshape([-1])
    starts = F.gather(offsets, row, axis=0)
    cached = F.gather(F.cast(cache_lengths, DType.int64), row, axis=0)
    return cached + index - starts
    # ANCHOR_END: positions_body


# ANCHOR_END: positions


# ANCHOR: paged_attention
class PagedSelfAttention(CausalSelfAttention):
    """Step 07's attention over a ragged batch, its keys and values in MAX's paged cache."""

    def forward(self, x: Tensor, cache: PagedCache, layer: int, input_row_offsets: Tensor) -> Tensor:
        """x [N, C], the batch's new tokens in one row -> [N, C]."""
        # TODO 2: q, k and v from c_attn as in step 07, each [N, C] -> [N, H, D] (no
        #   batch axis: the rows are tokens); write this layer's k and v into the pages
        #   (store_paged), attend (attend_paged, scale 1/sqrt(D)), then c_proj on the
        #   heads merged back to [N, C].
        # Hint: the cache is written before it is read: the new tokens see themselves.
        #   The kernel takes one layer's index, and the offsets that say whose token is whose.
        # ANCHOR: paged_forward | stub: return None
        q, k, v = (t.reshape([-1, self.n_head, self.head_dim]) for t in F.split(self.c_attn(x), [self.n_embd] * 3, axis=-1))
        store_paged(cache, layer, k, v, input_row_offsets)
        y = attend_paged(cache, layer, q, input_row_offsets, scale=1.0 / math.sqrt(self.head_dim))
        return self.c_proj(y.reshape([-1, self.n_embd]))
        # ANCHOR_END: paged_forward


# ANCHOR_END: paged_attention


class PagedBlock(Block):
    """Step 09's block with the paged attention; the weights keep their names (given)."""

    def __init__(self, config: GPT2Config):
        super().__init__(config)
        self.attn = PagedSelfAttention(config)

    def forward(self, x: Tensor, cache: PagedCache, layer: int, input_row_offsets: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x), cache, layer, input_row_offsets)
        return residual(x, self.ln_2, self.mlp)


# ANCHOR: served_model
class ServedGPT2(GPT2LMHeadModel):
    """GPT-2 as MAX's server runs it: a ragged batch of new tokens in, each sequence's next-token logits out."""

    def __init__(self, config: GPT2Config):
        super().__init__(config)
        self.transformer.h = ModuleList(PagedBlock(config) for _ in range(config.n_layer))

    def forward(self, tokens: Tensor, cache: PagedCache, input_row_offsets: Tensor) -> Tensor:
        """tokens [N], input_row_offsets [B + 1] -> logits [B, vocab_size]."""
        body = self.transformer
        # TODO 3: Embed every token at its position (TODO 1, with the cache's
        #   cache_lengths), run the blocks (each with its layer's index), and return the
        #   logits of each sequence's last token only: B rows, not N.
        # Hint: the last token of sequence b is row offsets[b + 1] - 1; F.gather picks
        #   rows. Taking them before ln_f and the head saves the work on the others.
        # ANCHOR: served_forward | stub: return None
        positions = ragged_positions(tokens.shape[0], input_row_offsets, cache.cache_lengths)
        x = body.wte(tokens) + body.wpe(positions)
        for layer, block in enumerate(body.h):
            x = block(x, cache, layer, input_row_offsets)
        last = F.gather(x, F.cast(input_row_offsets[1:], DType.int64) - 1, axis=0)
        return self.head(body.ln_f(last))
        # ANCHOR_END: served_forward


# ANCHOR_END: served_model
