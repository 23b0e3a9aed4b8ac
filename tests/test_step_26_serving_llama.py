"""Step 26 · the Llama on a ragged batch and MAX's paged cache, against Hugging Face's Llama one sequence at a time.

* ``rope_at`` (TODO 1), eagerly: the cos and sin rows of four ragged batches' positions (step 25's batches),
  against ``LlamaRotaryEmbedding`` at the same positions; a table built for the wrong length, or rows not picked
  at the positions, is named.
* The served Llama (TODOs 2 and 3) with the course's trained Llama's weights (2 key/value heads for 4 query
  heads), compiled for a pool of pages of 4 tokens and run as step 25's check runs GPT-2: three prompts in one
  batch, then decode steps as a fourth request joins and one leaves. After every pass each sequence's logits must
  match ``LlamaForCausalLM`` on that sequence's whole text. A stub's ``None`` is named with its TODO.

Tolerance: the harness default, 1e-4 + 1e-4·|expected|. Measured worst |Δ| on solutions/: see the ✓ lines.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from course.outline import COURSE_LLAMA
from course.runtime import from_numpy, to_numpy
from harness import Mistake, assert_close, attribute, call, fail, solution, todo_in
from test_step_25_serving import BATCHES, Runner, _positions, requests_come_and_go

pytestmark = pytest.mark.step26


def _reference() -> LlamaForCausalLM:
    return LlamaForCausalLM.from_pretrained(str(COURSE_LLAMA), dtype=torch.float32).eval()


def test_rope_at_each_tokens_position(step):
    """rope_at gives each token the cos and sin of its own position, as Hugging Face's rotary embedding does

    Rows [N, 1, head_dim], for step 25's four ragged batches."""
    fn = attribute(step, "rope_at")
    hf = _reference().config
    config = solution(17).LlamaConfig.from_hf(hf)
    rotary = LlamaRotaryEmbedding(hf)
    for new, cached in BATCHES:
        positions = _positions(new, cached)
        what = f"rope_at(positions {positions.tolist()})"
        got = call(fn, config, from_numpy(positions), what=what)
        if not (isinstance(got, tuple) and len(got) == 2):
            fail(f"{what} returned {type(got).__name__}; it returns the pair (cos, sin) — {todo_in(fn)}")
        cos, sin = (to_numpy(t) for t in got)
        with torch.no_grad():
            want_cos, want_sin = rotary(torch.zeros(1), torch.from_numpy(positions)[None])
        expected = [want_cos[0].numpy()[:, None, :], want_sin[0].numpy()[:, None, :]]
        for name, value, want in (("cos", cos, expected[0]), ("sin", sin, expected[1])):
            if value.shape != want.shape:
                fail(f"{what}: {name} is {list(value.shape)}, expected {list(want.shape)} ([N, 1, head_dim]: a row "
                     f"a token, an axis for the heads to broadcast over) — {todo_in(fn)}")
        for which, (name, value) in enumerate((("cos", cos), ("sin", sin))):
            assert_close(value, expected[which], f"{what}: {name}", step=step,
                         mistakes=rope_mistakes(rotary, positions, expected, which))


def rope_mistakes(rotary, positions: np.ndarray, expected: list[np.ndarray], which: int) -> list[Mistake]:
    """The common wrong rows of cos (``which`` 0) or sin (1), from Hugging Face's rotary embedding."""
    def first_rows() -> np.ndarray:
        with torch.no_grad():
            return rotary(torch.zeros(1), torch.arange(len(positions))[None])[which][0].numpy()[:, None, :]

    return [
        Mistake("the rows are the table's first N, positions 0 … N - 1: pick each token's row at its position", 1,
                first_rows),
        Mistake("cos and sin are swapped: return (cos, sin), as step 19's rope_tables does", 1,
                lambda: expected[1 - which]),
    ]


@pytest.fixture
def runner(step):
    reference = _reference()
    hf = reference.config
    config = solution(17).LlamaConfig.from_hf(hf)
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield Runner(step, monkeypatch, ("PagedLlamaAttention", "ServedLlama"), reference, config,
                     (config.num_key_value_heads, config.head_dim, config.num_hidden_layers), model="Llama")


def test_a_ragged_batch_of_the_llama_matches_hugging_face_as_requests_come_and_go(runner):
    """as requests come and go on the pages, each sequence's logits are LlamaForCausalLM's on its whole text

    Step 25's passes: three prompts (7, 1 and 10 tokens) prefilled in one batch, then six decode steps; a fourth
    request joins at the third, one leaves at the fifth. The pages hold the 2 key/value heads, not 4."""
    requests_come_and_go(runner, runner.reference.config.vocab_size)
