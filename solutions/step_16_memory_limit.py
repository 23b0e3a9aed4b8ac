"""Step 16 · Decoding at the memory limit.

With step 15's cache, a decode step feeds the model one token. Every weight
matrix then multiplies a single row: two flops for each weight read from
memory, and each weight is read once per token. A CPU core does dozens of flops
in the time memory delivers one float32, so a decode step waits on memory. Its
speed has a ceiling, the **roofline**:

    tokens per second  <=  memory bandwidth / bytes read per token

How close a product gets depends on the order it reads the weights in. MAX's
``Linear`` computes ``x @ Wᵀ`` with W stored ``[out, in]``, a layout made for
many rows at once (the prefill). For one row, the same numbers are the matrix
times a column:

    y = x @ Wᵀ         [1, in] x [in, out]        the prefill's matmul
    yᵀ = W @ xᵀ        [out, in] x [in, 1]        one row: W read front to back

This step counts the bytes a decode step reads (TODO 1), writes the one-row
product (TODO 2), a ``DecodeLinear`` and a head that use it for a single row
(TODOs 3 and 4), and an attention that reads the cache where it lies (TODO 5).
The given code at the end runs it: a prefill graph, a decode graph for one new
token, and a cache allocated once (``course/decoding.py``; chapter 16).

Check this step with ``pixi run s16``.
"""

from __future__ import annotations

import math

from max.experimental import functional as F
from max.experimental.nn import Linear
from max.experimental.tensor import Tensor

from step_01_config import GPT2Config
from step_06_position_embeddings import Embeddings
from step_08_residual import residual
from step_15_kv_cache import CachedGPT2LMHeadModel, CachedNextLogits

from course.decoding import CacheInPlace, KernelDecoding, measure_bandwidth  # noqa: F401 (bench reads it here)


# ANCHOR: bytes_per_token
def bytes_per_token(config: GPT2Config, bytes_per_weight: float = 4) -> float:
    """The bytes of weights one decode step reads: the roofline's numerator."""
    # TODO 1: Count the weights a decode step reads: in each of the n_layer blocks,
    #   ln_1 and ln_2 (a weight and a bias each), c_attn, attn.c_proj, mlp.c_fc and
    #   mlp.c_proj (a matrix and a bias each); then ln_f, and the head, which reads
    #   all of wte. Return that count times bytes_per_weight.
    # Hint: of wpe (and of wte as an embedding) a step reads one row: leave them out.
    #   The MLP's width is config.inner_dim, not always 4 * n_embd.
    # ANCHOR: count | stub: return None
    c, inner = config.n_embd, config.inner_dim
    norms = 2 * (2 * c)
    attention = (c * 3 * c + 3 * c) + (c * c + c)
    mlp = (c * inner + inner) + (inner * c + c)
    weights = config.n_layer * (norms + attention + mlp) + 2 * c + config.vocab_size * c
    return weights * bytes_per_weight
    # ANCHOR_END: count


# ANCHOR_END: bytes_per_token


# ANCHOR: one_row
def one_row(x: Tensor, weight: Tensor) -> Tensor:
    """``x @ weight.T`` for a single row: x [1, ..., 1, in], weight [out, in] -> [1, ..., 1, out].

    Computed as the matrix times a column, ``weight @ xᵀ``, which reads ``weight``
    once, row after row, in the order it lies in memory.
    """
    # TODO 2: Compute weight @ xᵀ: make the row a column, multiply the weight by it as
    #   the weight lies, and give the result x's shape with out numbers in the last axis.
    # Hint: a reshape regroups numbers without moving them, so a [1, ..., 1, in] row
    #   and an [in, 1] column hold the same numbers in the same order. Which of
    #   weight's two sizes is out, and which is in?
    # ANCHOR: product | stub: return None
    column = x.reshape([weight.shape[1], 1])
    return (weight @ column).reshape([*x.shape[:-1], weight.shape[0]])
    # ANCHOR_END: product


# ANCHOR_END: one_row


# ANCHOR: decode_linear
class DecodeLinear(Linear):
    """Step 04's ``Linear`` (same weights, same names) that multiplies a single row as W @ xᵀ."""

    #: The product for a single row: your one_row (the Mojo kernel's in KernelGPT2LMHeadModel).
    one_row = staticmethod(one_row)

    def forward(self, x: Tensor) -> Tensor:
        # TODO 3: When x holds a single row (every size but the last is 1, as in the
        #   decode graph), multiply it by this layer's one-row product, bias included;
        #   otherwise (many rows, or a symbolic number of them) keep step 04's Linear.
        # Hint: in a compiled graph, x.shape holds Dims; a Dim equals 1 only when its
        #   size is the number 1, never when it is the symbol "seq". A subclass reaches
        #   the layer it extends through super().
        # ANCHOR: forward | stub: return None
        if all(size == 1 for size in x.shape[:-1]):
            return self.one_row(x, self.weight) + self.bias
        return super().forward(x)
        # ANCHOR_END: forward


# ANCHOR_END: decode_linear


# ANCHOR: decode_model
class DecodeGPT2LMHeadModel(CachedGPT2LMHeadModel):
    """Step 15's cached GPT-2 with every Linear a DecodeLinear, and the head as the table times a column."""

    #: The Linear layers' class, and the head's product for a single row.
    linear, one_row = DecodeLinear, staticmethod(one_row)

    def __init__(self, config: GPT2Config):
        super().__init__(config)
        for module in [self, *(module for _, module in self.descendants)]:
            for name, child in list(module.children):
                if type(child) is Linear:  # the same shape and bias; the weights are loaded later, by name
                    out_dim, in_dim = child.weight.shape
                    setattr(module, name, self.linear(in_dim, out_dim, bias=not isinstance(child.bias, int)))

    def head(self, hidden: Tensor) -> Tensor:
        """Step 11's head for the last position, hidden [1, n_embd] -> logits [1, vocab_size]."""
        # TODO 4: Score the hidden vector against every token through this model's
        #   one-row product, so that the head, too, reads its table in memory order.
        # Hint: the head is tied (step 11): which weight holds a row for every token,
        #   and what shape is it stored in?
        # ANCHOR: head | stub: return None
        return self.one_row(hidden, self.transformer.wte.weight)
        # ANCHOR_END: head

    def decode(self, input_ids: Tensor, past_keys: list[Tensor], past_values: list[Tensor]):
        """One new token, ids [1, 1], over the cache read in place (given code).

        ``past_keys[i]`` and ``past_values[i]`` are layer i's cache, ``[P, H, D]``,
        token-major. Returns the logits [1, vocab_size] and each layer's new key
        and value, ``[1, H, D]``, for the caller to write into row P.
        """
        body = self.transformer
        x = Embeddings.forward(body, input_ids, past_len=past_keys[0].shape[0])
        keys, values = [], []
        for block, past_k, past_v in zip(body.h, past_keys, past_values):
            y, k, v = self.attend(block.attn.c_attn(block.ln_1(x)), past_k, past_v)
            x = x + block.attn.c_proj(y.reshape([1, 1, block.attn.n_embd]))
            x = residual(x, block.ln_2, block.mlp)
            keys.append(k)
            values.append(v)
        return self.head(body.ln_f(x[:, -1, :])), keys, values

    def writes_cache(self) -> bool:
        """Whether ``decode`` writes each layer's new key and value into the cache itself (given code): this
        model's returns them. A model whose ``decode`` does (the kernel model's) is handed P + 1 rows."""
        return False

    @staticmethod
    def attend(qkv: Tensor, past_k: Tensor, past_v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``decode``'s attention (given code): c_attn's output qkv [1, 1, 3C] split into the new token's q, k, v
        [1, H, D], and TODO 5's attend_in_place over the cache. Returns its output y and the new k and v."""
        q, k, v = (t.reshape([1, *past_k.shape[1:]]) for t in F.split(qkv, [int(qkv.shape[-1]) // 3] * 3, axis=-1))
        return attend_in_place(q, k, v, past_k, past_v), k, v


# ANCHOR_END: decode_model


# ANCHOR: attend_in_place
def attend_in_place(q: Tensor, k: Tensor, v: Tensor, past_k: Tensor, past_v: Tensor) -> Tensor:
    """One new token's attention over the cache as it lies in memory.

    q, k, v [1, H, D]: the new token's query, key and value. past_k, past_v
    [P, H, D]: the P cached tokens', token-major. The new token sees every cached
    token and itself, so there is nothing to mask. Returns y [1, H, D].
    """
    # TODO 5: Score q against every cached key and against the new key k (a dot
    #   product over D), scale by 1 / sqrt(D), softmax over the P + 1 tokens, and
    #   return the values weighted by those P + 1 weights, summed over the tokens.
    #   Read the cache as it lies: no transpose, no copy of past_k or past_v.
    # Hint: broadcasting pairs q [1, H, D] with every token of past_k [P, H, D] at
    #   once. MAX's sum keeps the axis it sums, as size 1. The cached and the new
    #   token's scores must share one softmax: look up F.concat, and slice the
    #   weights apart again afterwards.
    # ANCHOR: attend | stub: return None
    scale = 1 / math.sqrt(int(q.shape[-1]))
    scores = F.concat([(past_k * q).sum(-1), (k * q).sum(-1)], axis=0) * scale
    weights = F.softmax(scores, axis=0)
    past = past_k.shape[0]
    return (weights[:past] * past_v).sum(0) + weights[past:] * v
    # ANCHOR_END: attend


# ANCHOR_END: attend_in_place


# --- given code: the decode road and the Mojo kernels, built on your classes ----------------
# ANCHOR: given
class KernelGPT2LMHeadModel(KernelDecoding, DecodeGPT2LMHeadModel):
    """Your model with every one-row product, the head and the attention by the course's Mojo kernels
    (``course/decoding.py``; the appendix "Past the roofline")."""


class DecodeNextLogits(CacheInPlace, CachedNextLogits):
    """Step 15's ``next_logits(ids)`` with two graphs: the prefill (step 15's, where each DecodeLinear sees many
    rows) and a decode graph of ``model.decode`` for one new token, over a cache allocated once and read in place."""


# ANCHOR_END: given


# ANCHOR: roofline
def roofline(config: GPT2Config, bandwidth_gb_s: float, bytes_per_weight: float = 4) -> float:
    """The decode speed memory allows: ``bandwidth / bytes_per_token`` in tokens per second (given code)."""
    return bandwidth_gb_s * 1e9 / bytes_per_token(config, bytes_per_weight)
# ANCHOR_END: roofline
