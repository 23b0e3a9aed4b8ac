"""Step 05 · TokenEmbeddings against Hugging Face's ``GPT2Model.wte``.

Tolerance: the harness default, 1e-4 + 1e-4·|expected|. A lookup copies rows, so
the measured worst case |Δ| on solutions/ is 0 (bit for bit); any wrong row is off
by the size of a weight (~0.2 on the small config, ~0.05 at GPT-2 small's width).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness import assert_close, attribute, build, fail, forward, load_weights, rejects, solution
from reference import CONFIGS, SMALL, hf_config, run, seeded, to_max_state, token_ids

pytestmark = pytest.mark.step05


def _pair(step, sizes: dict, seed: int = 5):
    """The learner's TokenEmbeddings and Hugging Face's wte, with the same seeded table."""
    hf = hf_config(**sizes)
    wte = seeded(torch.nn.Embedding(hf.vocab_size, hf.n_embd), seed=seed)  # GPT2Model.wte
    mine = build(attribute(step, "TokenEmbeddings"), solution(1).GPT2Config.from_hf(hf))
    load_weights(mine, {f"wte.{name}": value for name, value in to_max_state(wte).items()})
    return mine, wte


@pytest.mark.parametrize("name", list(CONFIGS))
def test_matches_gpt2_wte(step, name):
    """TokenEmbeddings matches Hugging Face GPT2Model.wte on the same table"""
    sizes = CONFIGS[name]
    mine, wte = _pair(step, sizes)
    ids = token_ids(2, 9, sizes["vocab_size"])  # includes id 0 and id vocab_size - 1
    assert_close(forward(mine, ids), run(wte, ids), f"token embeddings vs Hugging Face wte ({name})")


def test_rejects_ids_outside_the_vocabulary(step):
    """ids outside [0, vocab_size) raise a clear ValueError"""
    mine, _ = _pair(step, SMALL)
    vocab = SMALL["vocab_size"]
    for bad in (vocab, -1):
        ids = token_ids(1, 4, vocab)
        ids[0, 0], ids[0, 2] = 0, bad  # id 0 is a token; the message names the one outside
        message = rejects(
            mine,
            _tensor(ids),
            error=ValueError,
            what=f"TokenEmbeddings on an id of {bad}",
            why=f"{bad} is not a token of a {vocab}-token vocabulary",
        )
        said = f"token id {bad} is outside the vocabulary [0, {vocab})"
        if said not in message:  # MAX's own gather raises ValueErrors too: the course's message is the check's
            fail(f"TokenEmbeddings on an id of {bad} raised ValueError({message!r}), not the given check's "
                 f"{said!r} — keep check_token_ids as given, and call it first in forward")


def test_rejects_float_ids(step):
    """float ids raise a clear TypeError"""
    mine, _ = _pair(step, SMALL)
    ids = token_ids(1, 4, SMALL["vocab_size"]).astype(np.float32)
    message = rejects(mine, _tensor(ids), error=TypeError, what="TokenEmbeddings on float ids",
                      why="token ids are integers")
    if "float32" not in message:
        fail(f"TokenEmbeddings on float ids raised TypeError({message!r}), which does not name their type, float32 — "
             "keep check_token_ids as given")


def test_rejects_ids_without_a_batch_axis(step):
    """1-D ids raise a clear ValueError: a batch axis is expected"""
    mine, _ = _pair(step, SMALL)
    ids = token_ids(1, 4, SMALL["vocab_size"])[0]
    message = rejects(mine, _tensor(ids), error=ValueError, what="TokenEmbeddings on 1-D ids", why="ids are [batch, seq]")
    if "[4]" not in message:
        fail(f"TokenEmbeddings on 1-D ids raised ValueError({message!r}), which does not give their shape, [4] — "
             "keep check_token_ids as given")


def _tensor(a: np.ndarray):
    from course.runtime import from_numpy

    return from_numpy(a)
