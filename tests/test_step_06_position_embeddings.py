"""Step 06 · Embeddings (wte + wpe) against the input of Hugging Face's first block.

The reference is ``GPT2Model(..., output_hidden_states=True).hidden_states[0]``:
``wte[ids] + wpe[positions]``, what GPT-2's first block reads. Its blocks do not
matter for that value, so the GPT-2 small variant keeps GPT-2 small's vocabulary,
context and width with a single block (building 12 seeded blocks would only cost time).

Tolerance: the harness default, 1e-4 + 1e-4·|expected|. Measured worst case |Δ| on
solutions/: 0 (one float32 addition, done the same way on both sides). Positions
shifted by one are off by the size of a weight (~0.3 on the small config).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

from course.runtime import from_numpy
from harness import Mistake, assert_close, attribute, build, fail, forward, load_weights, rejects, solution
from reference import GPT2_SMALL, SMALL, hf_config, seeded, to_max_state, token_ids

pytestmark = pytest.mark.step06

VARIANTS = {"small": SMALL, "gpt2-small (1 block)": dict(GPT2_SMALL, n_layer=1)}


def _pair(step, sizes: dict, seed: int = 6):
    """The learner's Embeddings, a seeded Hugging Face GPT2Model with the same wte and wpe, and those two."""
    hf = hf_config(**sizes)
    reference = seeded(transformers.GPT2Model(hf), seed=seed)
    state = {name: value for name, value in to_max_state(reference).items() if name in ("wte.weight", "wpe.weight")}
    mine = build(attribute(step, "Embeddings"), solution(1).GPT2Config.from_hf(hf))
    load_weights(mine, state)
    return mine, reference, state


def mistakes(state: dict[str, np.ndarray], ids: np.ndarray, past_len: int = 0) -> list[Mistake]:
    """The common wrong embeddings, computed in NumPy from the check's ids and its wte and wpe."""
    wte, wpe = state["wte.weight"], state["wpe.weight"]
    seq = ids.shape[1]

    def embeddings(first: int):
        return lambda: wte[ids] + wpe[first : first + seq]

    found = [Mistake("wpe is not added: these are the token embeddings alone", 3, lambda: wte[ids])]
    if past_len + seq < len(wpe):
        found.append(Mistake(f"positions start at {past_len + 1}, not {past_len}: F.arange counts from its "
                             f"start, and the first token's position is past_len", 2, embeddings(past_len + 1)))
    if past_len:
        found.append(Mistake(f"past_len is ignored: positions start at 0, not at past_len = {past_len}", 2,
                             embeddings(0)))
    return found


def _first_block_input(reference, ids: np.ndarray, past_len: int = 0) -> np.ndarray:
    """wte + wpe as GPT2Model computes them: its hidden_states[0]."""
    positions = torch.arange(past_len, past_len + ids.shape[1])[None].expand(ids.shape[0], -1)
    with torch.no_grad():
        out = reference(torch.from_numpy(ids), position_ids=positions, output_hidden_states=True)
    return out.hidden_states[0].numpy()


@pytest.mark.parametrize("name", list(VARIANTS))
def test_matches_gpt2_first_block_input(step, name):
    """Embeddings match Hugging Face's wte + wpe (the first block's input)"""
    sizes = VARIANTS[name]
    mine, reference, state = _pair(step, sizes)
    for seq in (7, sizes["n_positions"]) if sizes is SMALL else (7,):  # a short prompt; the full context
        ids = token_ids(2, seq, sizes["vocab_size"])
        assert_close(
            forward(mine, ids),
            _first_block_input(reference, ids),
            f"embeddings of {seq} tokens vs Hugging Face hidden_states[0] ({name})",
            mistakes=mistakes(state, ids),
            step=step,
        )


def test_past_len_offsets_the_positions(step):
    """with past_len, positions start at past_len"""
    mine, reference, state = _pair(step, SMALL)
    ids = token_ids(2, 4, SMALL["vocab_size"])
    past_len = 5
    assert_close(
        forward(mine, ids, past_len=past_len),
        _first_block_input(reference, ids, past_len),
        f"embeddings of 4 tokens after past_len={past_len} vs Hugging Face with position_ids 5..8",
        mistakes=mistakes(state, ids, past_len),
        step=step,
    )


def test_rejects_sequences_longer_than_the_context(step):
    """positions past n_positions, or before 0, raise the given check's ValueError, with the numbers"""
    mine, _, _ = _pair(step, SMALL)
    n = SMALL["n_positions"]
    # The given check's words, with the numbers: MAX's own gather refuses a position past the table with a
    # ValueError too, but names no position.
    for tokens, past, said in ((n + 1, 0, f"positions 0..{n} do not fit"), (4, n - 2, f"positions {n - 2}..{n + 1} do not fit")):
        message = rejects(
            mine,
            from_numpy(token_ids(1, tokens, SMALL["vocab_size"])),
            past_len=past,
            error=ValueError,
            what=f"Embeddings on {tokens} tokens after past_len={past}",
            why=f"positions {past}..{past + tokens - 1} run past n_positions={n}",
        )
        for part in (said, f"n_positions={n} positions (0..{n - 1})", f"{tokens} tokens after {past} earlier ones"):
            if part not in message:
                fail(f"Embeddings on {tokens} tokens after past_len={past} raised ValueError({message!r}), which does "
                     f"not say {part!r} — keep check_positions as given, called in forward before the lookup")
    message = rejects(mine, from_numpy(token_ids(1, 4, SMALL["vocab_size"])), past_len=-1, error=ValueError,
                      what="Embeddings after past_len=-1", why="a position cannot be negative")
    if "past_len must be 0 or more, got -1" not in message:
        fail(f"Embeddings after past_len=-1 raised ValueError({message!r}), which does not give past_len, -1 — "
             "keep check_positions as given")
