# Your file for step 16: fill in its TODOs, then run `pixi run s16`.
# (Rendered from solutions/step_16_memory_limit.py by `python -m course.authoring.render`.)
"""Step 16 · Decoding at the memory limit.

With step 15's cache, a decode step feeds the model one token. Every weight
matrix then multiplies a single row, ``[1, in] x [in, out]``: two flops for each
weight read from memory, and each weight is read once per token. A CPU core does
dozens of flops in the time memory delivers one float32, so a decode step waits
on memory, not on arithmetic. Its speed has a ceiling, the **roofline**:

    tokens per second  <=  memory bandwidth / bytes read per token

GPT-2 small reads 123.7M weights for each token (all of every block, ``ln_f``,
and the tied ``wte`` again as the head; of ``wpe`` and the embedding lookup,
one row each): 495 MB in float32. Memory that moves 30 GB/s cannot decode it
faster than about 60 tokens a second, whatever the kernels do.

How close a kernel gets depends on the order it reads the weights in. MAX's
``Linear`` computes ``x @ Wᵀ`` with W stored ``[out, in]``, a layout made for
many rows at once (the prefill). For one row, the same numbers are the matrix
times a column:

    y = x @ Wᵀ         [1, in] x [in, out]        the prefill's matmul
    yᵀ = W @ xᵀ        [out, in] x [in, 1]        one row: W read front to back

The second form walks W row after row, in memory order, each row a dot product
with the same ``x``: one streaming pass over the weights. Measured with MAX
26.7 on 2 cores it decodes GPT-2 small's sizes about 1.5x faster than step 15
(``pixi run bench``).

This step:

* counts the bytes a decode step reads, for the roofline (TODO 1);
* writes the one-row product as the matrix times a column (TODO 2);
* a ``DecodeLinear`` that uses it for a single row, and step 04's matmul for
  many (TODO 3), and the head the same way (TODO 4);
* (given) compiles the model twice: the prefill graph with a symbolic number of
  new tokens, where each ``DecodeLinear`` sees many rows and keeps the matmul,
  and a decode graph for exactly one new token, where each sees one row.

Check this step with ``pixi run s16``.
"""

from __future__ import annotations

import numpy as np
from max.experimental.nn import Linear
from max.experimental.tensor import Tensor

from step_01_config import GPT2Config
from step_15_kv_cache import CachedGPT2LMHeadModel, CachedNextLogits


def bytes_per_token(config: GPT2Config, bytes_per_weight: float = 4) -> float:
    """The bytes of weights one decode step reads: the roofline's numerator."""
    # TODO 1: Count the weights a decode step reads: in each of the n_layer blocks,
    #   ln_1 and ln_2 (a weight and a bias each), c_attn, attn.c_proj, mlp.c_fc and
    #   mlp.c_proj (a matrix and a bias each); then ln_f, and the head, which reads
    #   all of wte. Return that count times bytes_per_weight.
    # Hint: of wpe (and of wte as an embedding) a step reads one row: leave them out.
    #   The MLP's width is config.inner_dim, not always 4 * n_embd.
    return None




def one_row(x: Tensor, weight: Tensor) -> Tensor:
    """``x @ weight.T`` for a single row: x [1, ..., 1, in], weight [out, in] -> [1, ..., 1, out].

    Computed as the matrix times a column, ``weight @ xᵀ``, which reads ``weight``
    once, row after row, in the order it lies in memory.
    """
    # TODO 2: Make x a column [in, 1], multiply weight by it ([out, 1]), and give the
    #   result x's shape with the last axis out wide.
    # Hint: x.reshape([...]) regroups without moving numbers; one row has as many
    #   numbers as its column. weight.shape[0] is out, and [*x.shape[:-1], n] is x's
    #   shape with the last size replaced.
    return None




class DecodeLinear(Linear):
    """Step 04's ``Linear`` (same weights, same names) that multiplies a single row as W @ xᵀ."""

    def forward(self, x: Tensor) -> Tensor:
        # TODO 3: When x holds a single row (every size but the last is 1, as in the
        #   decode graph), return one_row(x, self.weight) plus the bias; otherwise
        #   (many rows, or a symbolic number of them) step 04's Linear: super().forward(x).
        # Hint: in a compiled graph, x.shape holds Dims; a Dim equals 1 only when its
        #   size is the number 1, never when it is the symbol "seq".
        return None




class DecodeGPT2LMHeadModel(CachedGPT2LMHeadModel):
    """Step 15's cached GPT-2 with every Linear a DecodeLinear, and the head as the table times a column."""

    def __init__(self, config: GPT2Config):
        super().__init__(config)
        for module in [self, *(module for _, module in self.descendants)]:
            for name, child in list(module.children):
                if type(child) is Linear:  # the same shape and bias; the weights are loaded later, by name
                    out_dim, in_dim = child.weight.shape
                    setattr(module, name, DecodeLinear(in_dim, out_dim, bias=not isinstance(child.bias, int)))

    def head(self, hidden: Tensor) -> Tensor:
        """Step 11's head for the last position, hidden [1, n_embd] -> logits [1, vocab_size]."""
        # TODO 4: Score the hidden vector against every row of wte, as one_row does.
        # Hint: step 11's head is hidden @ wteᵀ; the table is self.transformer.wte.weight.
        return None




# --- given code: a prefill graph and a decode graph -------------------------------------------
class DecodeNextLogits(CachedNextLogits):
    """Step 15's ``next_logits(ids)`` with two compiled graphs of one model.

    ``self.run`` (step 15's, symbolic ``"seq"``) runs the prefill: there each
    DecodeLinear sees a symbolic number of rows and keeps the matmul.
    ``self.decode`` takes exactly one new token, so every DecodeLinear sees one
    row. It is compiled on the first decode step, so that the first token does
    not wait for it. Both take and return the same cache.
    """

    def __init__(self, model: DecodeGPT2LMHeadModel, config: GPT2Config, device=None):
        super().__init__(model, config, device)  # compiles the prefill graph, self.run
        self.model, self.decode = model, None

    def graph(self, new_tokens: int):
        """The graph for a call with ``new_tokens`` new tokens after a non-empty cache or not."""
        if new_tokens != 1 or not self.seen:
            return self.run
        if self.decode is None:
            from max.dtype import DType
            from max.experimental.tensor import TensorType

            one = TensorType(DType.int64, [1, 1], self.device)
            layers = len(self.empty)
            self.decode = self.model.compile(one, [self.kv] * layers, [self.kv] * layers)
        return self.decode




def roofline(config: GPT2Config, bandwidth_gb_s: float, bytes_per_weight: float = 4) -> float:
    """The decode speed memory allows: ``bandwidth / bytes_per_token`` in tokens per second (given code)."""
    return bandwidth_gb_s * 1e9 / bytes_per_token(config, bytes_per_weight)


def measure_bandwidth(megabytes: int = 256, repeats: int = 5) -> float:
    """GB/s that NumPy reads on this machine: the best of ``repeats`` sums over a large array (given code)."""
    import time

    data = np.ones(megabytes * 2**20 // 4, dtype=np.float32)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        data.sum()
        best = min(best, time.perf_counter() - start)
    return data.nbytes / best / 1e9
