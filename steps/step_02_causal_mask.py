# Your file for step 02: fill in its TODOs, then run `pixi run s02`.
# (Rendered from solutions/step_02_causal_mask.py by `python -m course.authoring.render`.)
"""Step 02 · The causal mask.

GPT-2 predicts each token from the tokens before it, never from the ones after.
Attention enforces that with an additive mask: before the softmax, every score
where a query would look into its own future gets ``-inf`` added, so its weight
becomes exactly zero; every allowed score gets ``0`` added and is unchanged.

With a KV cache (step 15) the queries are only the *new* tokens, while the keys
are the ``past_len`` cached tokens followed by the new ones. New token ``i`` then
sits at position ``past_len + i`` and may see keys ``0 .. past_len + i``.

Check this step with ``pixi run s02``.
"""

from __future__ import annotations

from max.experimental import functional as F
from max.experimental.tensor import Tensor


def causal_mask(seq_len: int, past_len: int = 0) -> Tensor:
    """The additive mask for ``seq_len`` new queries over ``past_len + seq_len`` keys.

    Returns a float ``[seq_len, past_len + seq_len]`` tensor: ``0`` where query
    ``i`` may attend key ``j`` (``j <= past_len + i``) and ``-inf`` elsewhere.
    """
    # TODO 1: Start from a [seq_len, past_len + seq_len] tensor filled with -inf.
    # Hint: MAX's functional module has a constructor that fills a shape with one value;
    #   Python's float() can spell minus infinity.
    mask = None

    # TODO 2: Set the allowed entries (key j <= past_len + i) to 0, keep -inf above them.
    # Hint: F.band_part(x, num_lower, num_upper, exclude) keeps a diagonal band
    #   (row m, column n) with m - n <= num_lower and n - m <= num_upper, and zeroes
    #   the rest; exclude=True does the opposite: it zeroes the band and keeps the rest.
    #   None means "no limit on that side". Which band is exactly the allowed region?
    return mask
