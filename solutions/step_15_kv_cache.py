"""Step 15 · The KV cache: fast decoding.

Step 13 reruns the whole sequence for every new token. Most of that work is
repeated: in a causal model, the keys and values of token ``t`` depend only on
tokens ``0 .. t``, so they are the same at every later step. A **KV cache**
keeps each layer's keys and values and feeds the model only the new tokens.

    prefill  ids [1, T]   past K, V [1, H, 0, D]      ->  logits, K, V [1, H, T, D]
    decode   ids [1, 1]   past K, V [1, H, P, D]      ->  logits, K, V [1, H, P + 1, D]

(per layer; H = n_head, D = head_dim). In each attention layer the new
tokens' k and v are appended to the past ones along the token axis; the new
queries attend over all ``P + T`` keys. The mask is step 02's with
``past_len = P``: new token ``i`` sits at position ``P + i``, sees every cached
key and the new keys up to itself. The positions (step 06) start at ``P`` too.

Prefill and decode are the same computation with a different ``P``, so one
compiled graph serves both, with two symbolic sizes: ``"seq"`` (new tokens) and
``"past"`` (cached ones). A prefill passes an empty cache (``P = 0``).

Layout: one K and one V tensor per layer, ``[1, H, P, D]``, passed into the
graph as lists and returned grown by the new tokens (a concatenation). The
returned tensors go straight back in on the next step, without a copy.

Check this step with ``pixi run s15``.
"""

from __future__ import annotations

import numpy as np
from max.experimental import functional as F
from max.experimental.nn import ModuleList
from max.experimental.tensor import Tensor

from step_01_config import GPT2Config
from step_02_causal_mask import causal_mask
from step_06_position_embeddings import Embeddings, check_positions
from step_07_attention import CausalSelfAttention
from step_08_residual import residual
from step_09_block import Block
from step_11_lm_head import GPT2LMHeadModel


# ANCHOR: cached_attention
class CachedSelfAttention(CausalSelfAttention):
    """Step 07's attention, reading past keys and values and returning them grown."""

    def mask(self, seq_len, past_len=0) -> Tensor:
        """Step 02's mask, ``[seq_len, past_len + seq_len]``, for a ``past_len`` that may be symbolic.

        ``F.band_part`` needs a number for its band, and inside the compiled graph
        ``past_len`` is the symbol ``"past"``. Every new token may see every
        cached key, so the mask is zeros over the past, then step 02's mask for
        the new tokens among themselves.
        """
        # TODO 1: Return [zeros of shape (seq_len, past_len) | causal_mask(seq_len)]
        #   joined along the key axis.
        # Hint: F.zeros(shape) and F.concat([a, b], axis=...) accept symbolic sizes.
        # ANCHOR: mask | stub: return None
        return F.concat([F.zeros([seq_len, past_len]), causal_mask(seq_len, 0)], axis=1)
        # ANCHOR_END: mask

    def forward(self, x: Tensor, past_k: Tensor, past_v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x [B, T, C] for the new tokens; past_k, past_v [B, H, P, D]. Returns (y, k, v), k and v [B, H, P + T, D]."""
        # TODO 2: As in step 07: q, k, v from c_attn, split into heads. Then put the
        #   past keys and values in front of the new ones (along the token axis),
        #   attend with past_len = the number of cached tokens, merge the heads and
        #   project. Return the output and the grown k and v.
        # Hint: the cached length is past_k.shape[2]; attend passes it to self.mask.
        # ANCHOR: forward | stub: return None
        q, k, v = F.split(self.c_attn(x), [self.n_embd] * 3, axis=-1)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        k = F.concat([past_k, k], axis=2)
        v = F.concat([past_v, v], axis=2)
        y = self.attend(q, k, v, past_len=past_k.shape[2])
        return self.c_proj(self.merge_heads(y)), k, v
        # ANCHOR_END: forward


# ANCHOR_END: cached_attention


# ANCHOR: cached_block
class CachedBlock(Block):
    """Step 09's block with the cached attention; the weights keep their names."""

    def __init__(self, config: GPT2Config):
        super().__init__(config)
        self.attn = CachedSelfAttention(config)

    def forward(self, x: Tensor, past_k: Tensor, past_v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        # TODO 3: The block of step 09, with the attention branch passing the cache
        #   through: return the new x and the attention's grown k and v.
        # Hint: residual() expects a sublayer that returns one tensor; write the
        #   attention branch out as x + ...; the MLP branch can use residual().
        # ANCHOR: block | stub: return None
        attn_out, k, v = self.attn(self.ln_1(x), past_k, past_v)
        x = x + attn_out
        return residual(x, self.ln_2, self.mlp), k, v
        # ANCHOR_END: block


# ANCHOR_END: cached_block


# ANCHOR: cached_model
class CachedGPT2LMHeadModel(GPT2LMHeadModel):
    """GPT-2 with a KV cache: new ids and the cache in, next-token logits and the grown cache out."""

    def __init__(self, config: GPT2Config):
        super().__init__(config)
        self.transformer.h = ModuleList(CachedBlock(config) for _ in range(config.n_layer))

    def forward(
        self, input_ids: Tensor, past_keys: list[Tensor], past_values: list[Tensor]
    ) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        body = self.transformer
        # TODO 4: Embed the new ids at their positions (after the cached tokens); run
        #   each block with its own layer's past keys and values, collecting the
        #   grown ones; apply ln_f to the last position only and return its logits
        #   [batch, vocab_size] with the lists of keys and values.
        # Hint: step 06's Embeddings.forward takes a start position (GPT2Model overrides
        #   forward, so call it through the class, with body). zip walks the blocks and
        #   their caches side by side. A slice keeps only the last position, and step
        #   11's head method turns it into logits.
        # ANCHOR: model_forward | stub: return None
        x = Embeddings.forward(body, input_ids, past_len=past_keys[0].shape[2])
        keys, values = [], []
        for block, past_k, past_v in zip(body.h, past_keys, past_values):
            x, k, v = block(x, past_k, past_v)
            keys.append(k)
            values.append(v)
        return self.head(body.ln_f(x[:, -1, :])), keys, values
        # ANCHOR_END: model_forward


# ANCHOR_END: cached_model


# --- given code: one compiled graph for prefill and decode -----------------------------------
# ANCHOR: compiled
class CachedNextLogits:
    """``next_logits(ids)`` (step 13's interface) backed by the compiled cached model.

    It remembers the ids it has seen and their keys and values. Called with ids
    that extend them, it feeds only the new ids (one per decode step); called with
    anything else, it starts over with a prefill.

    It runs the compiled graph through its engine (``engine_model.execute``) on raw
    buffers, in the graph's input order: the ids, every layer's keys, every layer's
    values. Calling the graph as ``graph(ids, keys, values)`` gives the same numbers
    as Tensors, and costs about 1.2 ms more per call, a twentieth of a decode step.
    """

    def __init__(self, model: CachedGPT2LMHeadModel, config: GPT2Config, device=None):
        from max.driver import CPU, Buffer
        from max.dtype import DType
        from max.experimental.tensor import TensorType

        self.device = device or CPU()
        self.config = config
        layers, heads, head_dim = self.cache_shape(config)
        self.kv = TensorType(DType.float32, [1, heads, "past", head_dim], self.device)
        ids = TensorType(DType.int64, [1, "seq"], self.device)
        model.to(self.device)
        self.run = model.compile(ids, [self.kv] * layers, [self.kv] * layers)
        empty = np.zeros((1, heads, 0, head_dim), dtype=np.float32)
        self.empty = [Buffer.from_numpy(empty).to(self.device) for _ in range(layers)]
        self.reset()

    def cache_shape(self, config) -> tuple[int, int, int]:
        """(layers, heads, head_dim): one K and one V ``[1, heads, P, head_dim]`` per layer."""
        return config.n_layer, config.n_head, config.n_embd // config.n_head

    def check_positions(self, new: int, past: int) -> None:
        """Refuses positions beyond what the model learned (step 06's check)."""
        check_positions(new, past, self.config.n_positions)

    def reset(self) -> None:
        """Forgets the cache: the next call is a prefill."""
        self.seen: list[int] = []
        self.keys, self.values = self.empty, self.empty

    def __call__(self, ids: list[int]) -> np.ndarray:
        from max.driver import CPU, Buffer

        ids = [int(i) for i in ids]
        if ids[: len(self.seen)] != self.seen or len(ids) == len(self.seen):
            self.reset()
        new = ids[len(self.seen) :]
        self.check_positions(len(new), len(self.seen))
        new_ids = Buffer.from_numpy(np.asarray([new], dtype=np.int64)).to(self.device)
        outputs = self.run.engine_model.execute(new_ids, *self.keys, *self.values)
        layers = len(self.empty)  # out come the logits, every layer's keys, every layer's values
        logits, self.keys, self.values = outputs[0], outputs[1:1 + layers], outputs[1 + layers:]
        self.seen = ids
        return logits.to(CPU()).to_numpy()[0]


# ANCHOR_END: compiled
