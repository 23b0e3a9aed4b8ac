"""Step 11 · The language-model head.

The body (step 10) leaves one ``n_embd``-wide vector per token. To predict the
next token, GPT-2 scores that vector against every token in the vocabulary: a
``logit`` per token, where a larger logit means a likelier next token.

    hidden  [batch, seq, n_embd]          GPT2Model, step 10
    logits  [batch, seq, vocab_size]      logits = hidden @ wteᵀ

GPT-2 has no separate output matrix. It reuses the token embedding table ``wte``
(step 05), ``[vocab_size, n_embd]``, transposed: the score for token ``v`` is the
dot product of the hidden vector with ``wte[v]``, the same vector that token is
read in as. This is **weight tying**. It saves 38.6M parameters in GPT-2 small
(a third of the model), and Hugging Face's ``lm_head.weight`` is that same tensor.
The head has no bias.

The logits at position ``t`` predict token ``t + 1``. Softmax turns them into
probabilities; generation (step 13) picks from them.

Check this step with ``pixi run s11``.
"""

from __future__ import annotations

from max.experimental.nn import Module
from max.experimental.tensor import Tensor

from step_01_config import GPT2Config
from step_10_model import GPT2Model


# ANCHOR: lm_head_model
class GPT2LMHeadModel(Module):
    """GPT-2 with its language-model head: token ids in, next-token logits out."""

    def __init__(self, config: GPT2Config):
        # TODO 1: Create transformer, the GPT2Model of step 10 (the checkpoint's name).
        # Hint: no lm_head layer: the head reuses transformer.wte's weight.
        # ANCHOR: transformer | stub: self.transformer = None
        self.transformer = GPT2Model(config)
        # ANCHOR_END: transformer

    def head(self, hidden: Tensor) -> Tensor:
        """The language-model head: hidden vectors [..., n_embd] -> logits [..., vocab_size]."""
        # TODO 2: Score each hidden vector against every row of the token embedding
        #   table.
        # Hint: the table is wte's weight, [vocab_size, n_embd], and hidden is [..., n_embd]:
        #   which matrix product gives [..., vocab_size]?
        # ANCHOR: logits | stub: return None
        return hidden @ self.transformer.wte.weight.T
        # ANCHOR_END: logits

    def forward(self, input_ids: Tensor) -> Tensor:
        # TODO 3: Run the body, then the head: [batch, seq] ids -> [batch, seq, vocab_size].
        # ANCHOR: forward | stub: return None
        return self.head(self.transformer(input_ids))
        # ANCHOR_END: forward


# ANCHOR_END: lm_head_model
