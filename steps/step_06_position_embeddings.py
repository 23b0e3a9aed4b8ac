# Your file for step 06: fill in its TODOs, then run `pixi run s06`.
# (Rendered from solutions/step_06_position_embeddings.py by `python -m course.authoring.render`.)
"""Step 06 · Position embeddings.

Attention (step 07) compares every token with every other token, and by itself
it does not know which came first: "dog bites man" and "man bites dog" would
look the same. GPT-2 fixes that by adding a second learned vector to each
token, one per *position*: row ``p`` of a ``[n_positions, n_embd]`` table called
``wpe`` (word position embeddings).

    input_ids  [batch, seq]                 the token ids
    positions  [seq]                        past_len, past_len + 1, ..., past_len + seq - 1
    output     [batch, seq, n_embd]         wte[input_ids] + wpe[positions]

The positions are the same for every sequence in the batch, so ``wpe[positions]``
is ``[seq, n_embd]`` and broadcasting adds it to each one. GPT-2 learned only
``n_positions`` (1024) rows, so it cannot read a longer sequence.

``past_len`` counts the tokens the model has already seen. It is 0 when the
whole sequence is given at once. With a KV cache (step 15) the model is fed only
the new tokens, and the first new token sits at position ``past_len``, not 0.

Check this step with ``pixi run s06``.
"""

from __future__ import annotations

from max.dtype import DType
from max.experimental import functional as F
from max.experimental.nn import Embedding
from max.experimental.tensor import Tensor

from step_01_config import GPT2Config
from step_05_token_embeddings import TokenEmbeddings, check_token_ids


def check_positions(seq_len: int, past_len: int, n_positions: int) -> None:
    """Raises a clear error when the positions would run past the learned table (given code).

    Inside a compiled graph (steps 13 and 15) the lengths can be symbolic ``Dim``s,
    sizes that are only known when the graph runs; then the caller checks them.
    """
    try:
        seq_len, past_len = int(seq_len), int(past_len)
    except TypeError:  # a symbolic Dim: "int conversions only supported for static dims"
        return
    if past_len < 0:
        raise ValueError(f"past_len must be 0 or more, got {past_len}")
    if past_len + seq_len > n_positions:
        raise ValueError(
            f"positions {past_len}..{past_len + seq_len - 1} do not fit: GPT-2 learned "
            f"n_positions={n_positions} positions (0..{n_positions - 1}); "
            f"the sequence has {seq_len} tokens after {past_len} earlier ones"
        )


class Embeddings(TokenEmbeddings):
    """Token embeddings (``wte``, from step 05) plus learned position embeddings (``wpe``)."""

    def __init__(self, config: GPT2Config):
        super().__init__(config)  # self.wte, from step 05
        self.n_positions = config.n_positions
        # TODO 1: Create wpe, the position embedding table: one n_embd-wide row for
        #   every position GPT-2 can read.
        self.wpe = None

    def forward(self, input_ids: Tensor, past_len: int = 0) -> Tensor:
        check_token_ids(input_ids, self.vocab_size)
        seq_len = input_ids.shape[1]  # a Dim: a number here, a symbol in a compiled graph
        check_positions(seq_len, past_len, self.n_positions)

        # TODO 2: Make the positions of the seq_len tokens: past_len, past_len + 1, ...
        #   as an integer tensor of length seq_len.
        # Hint: F.arange counts from a start up to, not including, a stop; ids are integers.
        positions = None

        # TODO 3: Return the token embeddings plus the position embeddings.
        # Hint: step 05's forward, reached through super(), is the token lookup (and checks
        #   the ids). wpe's rows are [seq, n_embd]; how do they add to [batch, seq, n_embd]?
        return None
