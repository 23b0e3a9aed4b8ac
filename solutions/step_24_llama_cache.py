"""Step 24 · Generating with the Llama: the KV cache with RoPE and grouped heads.

Step 13's generation loop and step 15's cache serve the Llama as they served
GPT-2: the model takes the new ids and each layer's past keys and values, and
returns the next-token logits with the cache grown by the new tokens. Two
things are new, and both are in the attention:

* **Positions come from the cache.** GPT-2 added ``wpe`` at positions
  ``P, P + 1, …`` once, at the bottom (step 15). The Llama rotates q and k in
  every layer, so each layer's rotation must start at ``P``, the number of cached
  tokens: step 19's ``rope_tables(..., past_len=P)``. A new token rotated as if it
  sat at position 0 sees every cached key at the wrong distance.
* **The cache keeps the key/value heads, not their repeats.** Keys are cached
  after RoPE (a cached key never moves again) and before ``repeat_kv``: SmolLM2's
  3 key/value heads, not its 9 query heads. That is what grouped-query
  attention saves: a third of the memory, and a third of the bytes a decode step
  reads from the cache.

    prefill  ids [1, T]   past K, V [1, K, 0, D]   ->  logits, K, V [1, K, T, D]
    decode   ids [1, 1]   past K, V [1, K, P, D]   ->  logits, K, V [1, K, P + 1, D]

(per layer; K = num_key_value_heads, D = head_dim). Everything else is reused:
step 15's mask for a symbolic ``P``, its compiled ``next_logits`` (given below,
with the Llama's cache shape), and step 13's sampling loop.

Check this step with ``pixi run s24``; then ``pixi run main --model course-llama``.
"""

from __future__ import annotations

from max.experimental import functional as F
from max.experimental.nn import ModuleList
from max.experimental.tensor import Tensor

from step_15_kv_cache import CachedNextLogits, CachedSelfAttention
from step_17_llama_config import LlamaConfig
from step_19_rope import apply_rope, rope_tables
from step_21_gqa import LlamaAttention
from step_22_llama_model import LlamaDecoderLayer, LlamaForCausalLM


# ANCHOR: cache_size
def kv_bytes_per_token(config: LlamaConfig, bytes_per_value: int = 4) -> int:
    """How many bytes the cache grows by for each token: every layer's key and value heads."""
    # TODO 1: Return how many bytes one token adds to the cache, at bytes_per_value bytes
    #   a number.
    # Hint: what does each layer keep of a token (step 15), for how many heads, each how
    #   wide? The cache keeps the key/value heads, not the query heads: that is the saving
    #   of grouped-query attention.
    # ANCHOR: bytes | stub: return None
    return 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * bytes_per_value
    # ANCHOR_END: bytes


# ANCHOR_END: cache_size


# ANCHOR: cached_attention
class CachedLlamaAttention(LlamaAttention):
    """Step 21's attention, reading past keys and values and returning them grown."""

    mask = CachedSelfAttention.mask  # step 15's: zeros over the past, step 02's mask for the new tokens

    def forward(self, x: Tensor, past_k: Tensor, past_v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x [B, T, C] for the new tokens; past_k, past_v [B, K, P, D]. Returns (y, k, v), k and v [B, K, P + T, D]."""
        # TODO 2: As in step 21: project and split q, k and v. Rotate q and k with the
        #   tables of the positions P … P + T - 1, P the number of cached tokens. Put the
        #   past keys and values in front of the new ones (token axis); attend over the
        #   repeated k and v with past_len = P; merge, project with o_proj. Return the
        #   output and the grown, unrepeated k and v.
        # Hint: P is past_k.shape[2]; rope_tables takes past_len. Repeat after
        #   caching: the cache keeps num_key_value_heads heads.
        # ANCHOR: forward | stub: return None
        past_len = past_k.shape[2]
        q = self.split_heads(self.q_proj(x))
        k = self.split_heads(self.k_proj(x))
        v = self.split_heads(self.v_proj(x))
        cos, sin = rope_tables(self.head_dim, self.rope_theta, x.shape[1], past_len)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        k = F.concat([past_k, k], axis=2)
        v = F.concat([past_v, v], axis=2)
        y = self.attend(q, self.repeat_kv(k), self.repeat_kv(v), past_len=past_len)
        return self.o_proj(self.merge_heads(y)), k, v
        # ANCHOR_END: forward


# ANCHOR_END: cached_attention


# ANCHOR: cached_layer
class CachedLlamaDecoderLayer(LlamaDecoderLayer):
    """Step 22's layer with the cached attention; the weights keep their names."""

    def __init__(self, config: LlamaConfig):
        super().__init__(config)
        self.self_attn = CachedLlamaAttention(config)

    def forward(self, x: Tensor, past_k: Tensor, past_v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        # TODO 3: Step 22's two residual branches, the attention passing the cache through:
        #   return the new x and the attention's grown k and v.
        # Hint: as in step 15's block, write the attention branch out as x + ...
        # ANCHOR: layer | stub: return None
        attn_out, k, v = self.self_attn(self.input_layernorm(x), past_k, past_v)
        x = x + attn_out
        return x + self.mlp(self.post_attention_layernorm(x)), k, v
        # ANCHOR_END: layer


# ANCHOR_END: cached_layer


# ANCHOR: cached_model
class CachedLlamaForCausalLM(LlamaForCausalLM):
    """The Llama with a KV cache: new ids and the cache in, next-token logits and the grown cache out."""

    def __init__(self, config: LlamaConfig):
        super().__init__(config)
        self.model.layers = ModuleList(CachedLlamaDecoderLayer(config) for _ in range(config.num_hidden_layers))

    def forward(
        self, input_ids: Tensor, past_keys: list[Tensor], past_values: list[Tensor]
    ) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        body = self.model
        # TODO 4: Embed the new ids; run each layer with its own past keys and values,
        #   collecting the grown ones; apply the final norm to the last position only and
        #   return its logits [batch, vocab_size] with the lists of keys and values.
        # Hint: no positions to add here (RoPE is in each layer). self.head (step 22)
        #   knows whether the head is tied.
        # ANCHOR: model_forward | stub: return None
        x = body.embed_tokens(input_ids)
        keys, values = [], []
        for layer, past_k, past_v in zip(body.layers, past_keys, past_values):
            x, k, v = layer(x, past_k, past_v)
            keys.append(k)
            values.append(v)
        return self.head(body.norm(x[:, -1, :])), keys, values
        # ANCHOR_END: model_forward


# ANCHOR_END: cached_model


# --- given code: step 15's compiled next_logits, with the Llama's cache -----------------------
# ANCHOR: compiled
class CachedLlamaNextLogits(CachedNextLogits):
    """Step 15's ``next_logits(ids)``: one compiled graph for prefill and decode, with the
    Llama's cache, ``num_key_value_heads`` heads per layer."""

    def cache_shape(self, config: LlamaConfig) -> tuple[int, int, int]:
        return config.num_hidden_layers, config.num_key_value_heads, config.head_dim

    def check_positions(self, new: int, past: int) -> None:
        """RoPE has no table to run out of, but the model learned max_position_embeddings positions."""
        if past + new > self.config.max_position_embeddings:
            raise ValueError(f"positions {past}..{past + new - 1} do not fit: the model learned "
                             f"max_position_embeddings={self.config.max_position_embeddings} positions")


# ANCHOR_END: compiled
