# Your file for step 05: fill in its TODOs, then run `pixi run s05`.
# (Rendered from solutions/step_05_token_embeddings.py by `python -m course.authoring.render`.)
"""Step 05 · Token embeddings.

A model reads numbers, not text. The tokenizer (step 12) turns text into token
ids, whole numbers in ``[0, vocab_size)``, and the first thing GPT-2 does is
swap every id for a learned vector of ``n_embd`` numbers: row ``id`` of a
``[vocab_size, n_embd]`` table called ``wte`` (word token embeddings).

    input_ids  [batch, seq]              integers, e.g. [[15496, 11, 995]]
    wte        [vocab_size, n_embd]      one row per token in the vocabulary
    output     [batch, seq, n_embd]      output[b, t] = wte[input_ids[b, t]]

A lookup is not a matrix multiply: it copies rows. It is what multiplying a
one-hot vector by the table would give, without building the one-hot vectors.
The same table comes back at the very end of the model (step 11), where GPT-2
reuses it to turn vectors back into scores over the vocabulary.

Check this step with ``pixi run s05``.
"""

from __future__ import annotations

import numpy as np
from max.experimental.nn import Embedding, Module
from max.experimental.tensor import Tensor

from step_01_config import GPT2Config


def check_token_ids(input_ids: Tensor, vocab_size: int) -> None:
    """Raises a clear error for ids that are not a ``[batch, seq]`` tensor of valid token ids.

    Given code, not a TODO. A lookup with an id outside the table would read
    memory that is not part of it, so the ids are checked before they are used.
    The range is only checked when the ids hold concrete values: inside a
    compiled graph (step 13) they are placeholders, and reading them would force
    the graph to run.
    """
    if not input_ids.dtype.is_integral():
        raise TypeError(
            f"token ids must be integers, but got a {input_ids.dtype} tensor "
            "(the tokenizer gives whole numbers; cast with .cast(DType.int64) if needed)"
        )
    if input_ids.rank != 2:
        raise ValueError(
            f"token ids must be shaped [batch, seq], but got shape {[int(d) for d in input_ids.shape]} "
            "(for one sequence, add a batch axis: ids[None] in NumPy)"
        )
    if input_ids.real:
        ids = np.asarray(input_ids.to_numpy())
        if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
            bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
            raise ValueError(f"token id {bad} is outside the vocabulary [0, {vocab_size})")


class TokenEmbeddings(Module):
    """Looks up each token id's learned vector in ``wte``."""

    def __init__(self, config: GPT2Config):
        self.vocab_size = config.vocab_size
        # TODO 1: Create wte, the token embedding table: one n_embd-wide row for
        #   every id in the vocabulary.
        # Hint: max.experimental.nn has a module that is exactly such a table; its
        #   weight is [vocab_size, n_embd], as in GPT-2's checkpoint (`wte.weight`).
        self.wte = None

    def forward(self, input_ids: Tensor) -> Tensor:
        check_token_ids(input_ids, self.vocab_size)
        # TODO 2: Return each id's row of wte: [batch, seq] ids -> [batch, seq, n_embd].
        # Hint: a module is called like a function.
        return None
