"""Step 11 · GPT2LMHeadModel against Hugging Face's GPT2LMHeadModel.

Logits are compared with a batch of 2 on two configs:

* the small config with a 64-token vocabulary, so that the tied table is square
  (vocab_size = n_embd): a head that forgets the transpose fails on the numbers,
  not only on a shape;
* GPT-2 small's real width, heads, context and vocabulary (768, 12, 1024, 50257)
  with 1 block instead of 12. MAX runs the checks eagerly, op by op, and a 12-block
  forward at that width takes ~11 s on 2 cores, while the head (a [2, 7, 768] ×
  [768, 50257] product against the tied table) is the same at any depth; step 10
  checks the stacking of blocks.

Besides the largest |Δ|, each comparison counts how often the most likely next
token (the argmax) agrees. Where Hugging Face's two top logits are closer than
the tolerance, a different argmax is a tie, not a bug, and is reported as such.

A separate, untied head (its own ``lm_head.weight``, 38.6M more parameters in GPT-2
small) is named as such before any number is compared, and so is any other parameter of
its own (a bias on the logits: GPT-2's head has none). The head is then checked on
its own (``head(hidden)`` against ``hidden @ wteᵀ``), so that a mistake in it is told
apart from one in ``forward``. (The parameter count of the
four GPT-2 sizes is checked in step 10: with the head tied, the body's count is the
whole model's.)

Tolerance: the harness default, 1e-4 + 1e-4·|expected|. Measured worst case |Δ| on
solutions/: 2.9e-6 on the small config and 1.6e-5 at GPT-2 small's width (logits of
size ~10, where the tolerance is ~1e-3; 768-term dot products summed in a different
order). The argmax agrees at 14 of 14 positions on both. A head without the
transpose is off by 8.4 on the square table (argmax agreeing at 0 of 14).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

from course.check.hints import todo_label, todos_in
from course.runtime import from_numpy
from harness import (
    Mistake, assert_close, attribute, build, fail, forward, load_weights, rejects, solution, todo_in, top_two_tied
)
from reference import GPT2_SMALL, SMALL, hf_config, hidden_states, log_softmax, seeded, softmax, to_max_state, token_ids

pytestmark = pytest.mark.step11

VARIANTS = {
    # The small config with a 64-token vocabulary, so that wte is square (64 × 64).
    "small, square wte": dict(SMALL, vocab_size=SMALL["n_embd"]),
    "gpt2-small, 1 block": dict(GPT2_SMALL, n_layer=1),
}


def _hf_model(sizes: dict, seed: int = 11) -> transformers.GPT2LMHeadModel:
    """A seeded Hugging Face GPT2LMHeadModel, built on the meta device first (skips its own init)."""
    with torch.device("meta"):
        model = transformers.GPT2LMHeadModel(hf_config(**sizes))
    model = model.to_empty(device="cpu")
    model.tie_weights()  # to_empty gives lm_head its own tensor; GPT-2's is wte's
    return seeded(model, seed=seed)


def _build(step, hf) -> object:
    """The learner's model for ``hf``, once it has no parameter of its own besides its body's."""
    mine = build(attribute(step, "GPT2LMHeadModel"), solution(1).GPT2Config.from_hf(hf))
    shapes = {name: [int(d) for d in value.shape] for name, value in mine.parameters}
    own = sorted(name for name in shapes if not name.startswith("transformer."))
    if not own or "transformer.wte.weight" not in shapes:
        return mine
    cls = type(mine)
    where = todo_label(todos_in(cls.__init__) + todos_in(getattr(cls, "head", None)), step.__file__)
    table = sorted([hf.vocab_size, hf.n_embd])
    if any(sorted(shapes[name]) == table for name in own):  # a [vocab_size, n_embd] matrix, either way round
        fail(
            f"GPT2LMHeadModel has its own parameter {', '.join(own)}: GPT-2 ties its head to the token embedding, "
            f"one [vocab_size, n_embd] matrix (38.6M parameters in GPT-2 small) that reads tokens in and scores "
            f"them out. The checkpoint holds it once, as wte.weight (Hugging Face's has no separate "
            f"lm_head.weight), and step 14 loads only transformer.wte.weight and relies on the tie: score against "
            f"self.transformer.wte.weight instead — {where}"
        )
    name = own[0]
    if shapes[name] == [hf.vocab_size]:
        fail(f"GPT2LMHeadModel has its own parameter {name}, of shape {shapes[name]}: a bias on the logits; "
             f"GPT-2's head has none (the checkpoint holds no such weight): the logits are hidden @ wteᵀ alone "
             f"— {where}")
    fail(f"GPT2LMHeadModel has its own parameter {name}, of shape {shapes[name]}, which GPT-2's checkpoint does "
         f"not hold: the head has no parameter of its own, only the tied table, hidden @ wteᵀ — {where}")


def head_mistakes(hidden: np.ndarray, wte: np.ndarray, wpe: np.ndarray) -> list[Mistake]:
    """The common wrong heads (TODO 2), in NumPy on the check's hidden vectors, wte and wpe."""
    root = np.sqrt(hidden.shape[-1])
    found = [
        Mistake(f"the logits are divided by √n_embd ({root:g}), as attention's scores are (step 07); the head "
                f"is the plain product hidden @ wteᵀ, with no scale", 2, lambda: hidden @ wte.T / root),
        Mistake("the head multiplies by wpe, the position table [n_positions, n_embd]; it scores against wte, the "
                "token table: hidden @ wteᵀ, one logit per token", 2, lambda: hidden @ wpe.T),
        Mistake("the head returns probabilities (a softmax); it returns the logits, hidden @ wteᵀ, and "
                "generation (step 13) applies the softmax", 2, lambda: softmax(hidden @ wte.T)),
        Mistake("the head returns log-probabilities (a log-softmax); it returns the logits, hidden @ wteᵀ", 2,
                lambda: log_softmax(hidden @ wte.T)),
    ]
    if wte.shape[0] == wte.shape[1]:  # square: the product without the transpose has the right shape
        found.append(Mistake("the head multiplies by wte, not by its transpose: logits = hidden @ wteᵀ, one "
                             "dot product with each token's row", 2, lambda: hidden @ wte))
    return found


def forward_mistakes(logits: np.ndarray) -> list[Mistake]:
    """The common wrong forwards (TODO 3) around a head that is right: normalized logits."""
    return [
        Mistake("forward returns probabilities (a softmax of the logits); it returns the logits themselves, and "
                "generation (step 13) applies the softmax", 3, lambda: softmax(logits)),
        Mistake("forward returns log-probabilities (a log-softmax of the logits); it returns the logits "
                "themselves", 3, lambda: log_softmax(logits)),
    ]


def _argmax_agreement(got: np.ndarray, expected: np.ndarray) -> tuple[int, int, int]:
    """(positions whose argmax agrees, positions, disagreements that are ties within the tolerance)."""
    tie = top_two_tied(expected)
    agree = got.argmax(-1) == expected.argmax(-1)
    return int(agree.sum()), agree.size, int((~agree & tie).sum())


@pytest.mark.parametrize("name", list(VARIANTS))
def test_logits_match_gpt2_lm_head_model(step, name, record_property):
    """logits match Hugging Face GPT2LMHeadModel, and so does the most likely next token"""
    sizes = VARIANTS[name]
    reference = _hf_model(sizes)
    mine = _build(step, reference.config)
    state = to_max_state(reference)
    load_weights(mine, state)
    if not callable(getattr(mine, "head", None)):  # step 15 and --quantize call the head on its own
        fail(f"GPT2LMHeadModel has no head method — keep the name the stub gives it ({todo_in(type(mine))})")
    hidden, wte = hidden_states(2, 3, sizes["n_embd"]), state["transformer.wte.weight"]
    assert_close(
        forward(mine.head, hidden, what="GPT2LMHeadModel.head(hidden)"),
        hidden @ wte.T,
        f"head(hidden) vs hidden @ wteᵀ ({name})",
        mistakes=head_mistakes(hidden, wte, state["transformer.wpe.weight"]),
        step=step,
    )
    ids = token_ids(2, 7, sizes["vocab_size"])
    got = forward(mine, ids)
    with torch.no_grad():
        expected = reference(torch.from_numpy(ids)).logits.numpy()
    if got.shape != expected.shape:
        fail(f"logits have shape {list(got.shape)}, expected [batch, seq, vocab_size] = {list(expected.shape)}")
    agree, total, ties = _argmax_agreement(got, expected)
    summary = f"the argmax (most likely next token) agrees at {agree} of {total} positions"
    if ties:
        summary += f"; at {ties} of the others Hugging Face's top two logits are closer than the tolerance (a tie)"
    record_property("argmax_agreement", f"{agree}/{total}")
    try:
        assert_close(got, expected, f"logits vs Hugging Face GPT2LMHeadModel ({name})",
                     mistakes=forward_mistakes(expected), step=step)
    except pytest.fail.Exception as failure:
        fail(f"{failure.msg}; {summary}")
    if agree + ties < total:
        fail(f"logits are within the tolerance, but {summary}")
    print(f"{name}: {summary}")


def test_rejects_a_width_that_does_not_split_into_heads(step):
    """a width that does not split into heads raises a clear ValueError"""
    hf = hf_config(**dict(SMALL, n_embd=64, n_head=5))
    rejects(
        lambda: attribute(step, "GPT2LMHeadModel")(solution(1).GPT2Config.from_hf(hf)),
        error=ValueError,
        what="GPT2LMHeadModel for n_embd=64, n_head=5",
        why="64 does not split into 5 equal heads",
    )


def test_rejects_misused_ids(step):
    """float ids and 1-D ids raise clear errors"""
    reference = _hf_model(SMALL)
    mine = _build(step, reference.config)
    load_weights(mine, to_max_state(reference))
    ids = token_ids(1, 4, SMALL["vocab_size"])
    floats = from_numpy(ids.astype(np.float32))
    rejects(mine, floats, error=TypeError, what="GPT2LMHeadModel on float ids", why="token ids are integers")
    rejects(mine, from_numpy(ids[0]), error=ValueError, what="GPT2LMHeadModel on 1-D ids", why="ids are [batch, seq]")
