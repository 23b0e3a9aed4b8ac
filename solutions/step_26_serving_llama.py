"""Step 26 · Serving the Llama: RoPE on a ragged batch, beside MAX's own Llama.

Step 25 served GPT-2 on MAX's paged cache. The Llama serves the same way, from
the same ragged row of tokens, with the same offsets and the same page pool; two
things differ, both in attention, and both were step 24's lesson:

* **RoPE at each token's own position.** Step 24 rotated one sequence's new
  tokens for positions ``P … P + T - 1``. In a ragged batch every token has a
  position of its own (step 25's ``ragged_positions``), so the rotation tables
  are looked up a row per token: one table of every position the model can
  reach, ``[max_position_embeddings, head_dim]``, built once, and a gather.
  Keys are rotated before they go into the pages: a cached key never moves.
* **The pages keep the key/value heads.** Grouped-query attention stores its
  ``num_key_value_heads`` heads (3 for SmolLM2, not 9), and MAX's attention
  kernel reads each one for the query heads it serves: there is no
  ``repeat_kv`` copy (step 21) at all.

    tokens [N]  offsets [B + 1]  cache (pages, K heads)  ->  logits [B, vocab]

The course's Llama then runs in MAX's server under the name of MAX's own,
``LlamaForCausalLM`` (``pixi run serve --llama course``), and ``bench --serve``
times the two on the same weights. Check this step with ``pixi run s26``.
"""

from __future__ import annotations

import math

from max.dtype import DType
from max.experimental import functional as F
from max.experimental.nn import ModuleList
from max.experimental.tensor import Tensor

from course.paged import PagedCache, attend_paged, store_paged
from step_08_residual import residual
from step_17_llama_config import LlamaConfig
from step_19_rope import apply_rope, rope_tables
from step_21_gqa import LlamaAttention
from step_22_llama_model import LlamaDecoderLayer, LlamaForCausalLM
from step_25_serving import ragged_positions


# ANCHOR: rope_at
def rope_at(config: LlamaConfig, positions: Tensor) -> tuple[Tensor, Tensor]:
    """cos and sin for each token's own position: ``[N, 1, head_dim]`` each, to broadcast over the heads."""
    # TODO 1: Build step 19's tables for every position the model can reach, pick each
    #   token's row, and give the result an axis for the heads.
    # Hint: rope_tables(head_dim, theta, seq_len) covers positions 0 … seq_len - 1; the config
    #   says how many the model reads. F.gather picks rows; F.unsqueeze adds an axis.
    # ANCHOR: rope_at_body | stub: return None
    cos, sin = rope_tables(config.head_dim, config.rope_theta, config.max_position_embeddings)
    return (F.unsqueeze(F.gather(cos, positions, axis=0), 1), F.unsqueeze(F.gather(sin, positions, axis=0), 1))
    # ANCHOR_END: rope_at_body


# ANCHOR_END: rope_at


# ANCHOR: paged_attention
class PagedLlamaAttention(LlamaAttention):
    """Step 21's attention over a ragged batch: RoPE at each token's position, its key/value heads in the pages."""

    def forward(self, x: Tensor, cache: PagedCache, layer: int, input_row_offsets: Tensor,
                cos: Tensor, sin: Tensor) -> Tensor:
        """x [N, hidden_size]; cos, sin [N, 1, head_dim] -> [N, hidden_size]."""
        # TODO 2: q, k and v from their projections, each [N, heads, head_dim] with its own
        #   number of heads; rotate q and k (step 19's apply_rope); write k and v into
        #   the pages, attend (scale 1/sqrt(head_dim)), and project back with o_proj.
        # Hint: the pages keep the key/value heads as they are: no repeat_kv here, the
        #   kernel knows which query heads share each one. Rotate before storing.
        # ANCHOR: paged_forward | stub: return None
        q = self.q_proj(x).reshape([-1, self.n_head, self.head_dim])
        k = self.k_proj(x).reshape([-1, self.n_kv_head, self.head_dim])
        v = self.v_proj(x).reshape([-1, self.n_kv_head, self.head_dim])
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        store_paged(cache, layer, k, v, input_row_offsets)
        y = attend_paged(cache, layer, q, input_row_offsets, scale=1.0 / math.sqrt(self.head_dim))
        return self.o_proj(y.reshape([-1, self.n_head * self.head_dim]))
        # ANCHOR_END: paged_forward


# ANCHOR_END: paged_attention


class PagedLlamaDecoderLayer(LlamaDecoderLayer):
    """Step 22's layer with the paged attention; the weights keep their names (given)."""

    def __init__(self, config: LlamaConfig):
        super().__init__(config)
        self.self_attn = PagedLlamaAttention(config)

    def forward(self, x: Tensor, cache: PagedCache, layer: int, input_row_offsets: Tensor,
                cos: Tensor, sin: Tensor) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cache, layer, input_row_offsets, cos, sin)
        return residual(x, self.post_attention_layernorm, self.mlp)


# ANCHOR: served_model
class ServedLlama(LlamaForCausalLM):
    """The Llama as MAX's server runs it: a ragged batch of new tokens in, each sequence's next-token logits out."""

    def __init__(self, config: LlamaConfig):
        super().__init__(config)
        self.config = config
        self.model.layers = ModuleList(PagedLlamaDecoderLayer(config) for _ in range(config.num_hidden_layers))

    def forward(self, tokens: Tensor, cache: PagedCache, input_row_offsets: Tensor) -> Tensor:
        """tokens [N], input_row_offsets [B + 1] -> logits [B, vocab_size]."""
        body = self.model
        # TODO 3: Each token's position (step 25) and its rotation (TODO 1), computed
        #   once for every layer; then the embedding, the layers, and the logits of
        #   each sequence's last token, as in step 25.
        # Hint: the Llama has no position table to add: positions only turn the
        #   queries and keys, inside attention.
        # ANCHOR: served_forward | stub: return None
        positions = ragged_positions(tokens.shape[0], input_row_offsets, cache.cache_lengths)
        cos, sin = rope_at(self.config, positions)
        x = body.embed_tokens(tokens)
        for layer, block in enumerate(body.layers):
            x = block(x, cache, layer, input_row_offsets, cos, sin)
        last = F.gather(x, F.cast(input_row_offsets[1:], DType.int64) - 1, axis=0)
        return self.head(body.norm(last))
        # ANCHOR_END: served_forward


# ANCHOR_END: served_model
