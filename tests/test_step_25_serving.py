"""Step 25 · GPT-2 on a ragged batch and MAX's paged cache, against Hugging Face's GPT-2 one sequence at a time.

* ``ragged_positions`` (TODO 1), eagerly, before anything is compiled: batches of prefilling and decoding
  sequences, some with tokens cached, against the positions worked out in NumPy. Its common mistakes are named:
  the cache ignored (every sequence restarting at 0), the offsets ignored (one count over the whole row).
* The served model (TODOs 2 and 3) with the course's trained GPT-2's weights, compiled for the pool of ``course.paged.PagePool`` (pages of 4 tokens,
  so a sequence spans several, handed out interleaved) and run as MAX's server runs it: three prompts of 7, 1
  and 10 tokens in one batch, then six decode steps in which a fourth request joins (its 5-token prompt
  prefilled beside the others' single tokens) and one leaves, its pages given back. After every pass each
  sequence's logits must match ``GPT2LMHeadModel`` on that sequence's whole text. A stub's ``None``, or a forward
  that returns a row per token instead of one a sequence, is named with its TODO while the graph is traced, before
  anything compiles; wrong logits say where to look, from the pass they are wrong in (:data:`PREFILLING`,
  :data:`DECODING`).

Tolerance: the harness default, 1e-4 + 1e-4·|expected|. Measured worst |Δ| on solutions/: 9.1e-6 (logits
of size ~10).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import GPT2LMHeadModel

from course.runtime import from_numpy, to_numpy
from harness import Mistake, assert_close, attribute, build, call, fail, load_weights, matching_mistake, solution
from harness import todo_in, todo_label
from course.outline import COURSE_MODEL
from reference import to_max_state

pytestmark = pytest.mark.step25

#: Ragged batches: (the new tokens of each sequence, what each has cached already).
BATCHES = [([7, 1, 10], [0, 0, 0]), ([1, 1, 1, 1], [3, 0, 12, 5]), ([1, 5, 1], [9, 0, 2]), ([4], [6])]
PAGE = 4
#: Where to look when a pass's logits are wrong and no named mistake matches them: in the first pass nothing is cached
#: yet, so the cache is not the cause; after it, the prefill matched and the pass reads the pages.
PREFILLING = ("Nothing is cached in this first pass, so look at the attention (q, k and v split into heads, a Llama's "
              "q and k rotated, the scale 1/√head_dim, the heads merged back) and at the model (each token's "
              "embedding, the blocks in order, each sequence's last row)")
DECODING = ("The prefill matched, and this pass reads the pages: each layer stores its new k and v, under its own "
            "index, before it attends, and a token's position starts after what its sequence has cached")
#: What the served model returns, said wherever it returns something else.
ONE_ROW = "it returns one row a sequence, its last token's (rows offsets[1:] - 1)"
#: The course's GPT-2's vocabulary: the check runs on its trained weights (book/experiments/step_25_serving.py
#: compiles the same graph).
VOCAB = 50257


def _positions(new: list[int], cached: list[int]) -> np.ndarray:
    return np.concatenate([np.arange(c, c + n) for n, c in zip(new, cached)]).astype(np.int64)


def _offsets(new: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(new)]).astype(np.uint32)


def position_mistakes(new: list[int], cached: list[int]) -> list[Mistake]:
    return [
        Mistake("every sequence's positions start at 0: the cache is ignored; a decoding token sits after what its "
                "sequence has cached (cache_lengths[b])", 1,
                lambda: _positions(new, [0] * len(new))),
        Mistake("the positions count along the whole row (i itself, plus the cache): each sequence's count starts "
                "at its own first new token, i - offsets[b]", 1,
                lambda: np.arange(sum(new)) + np.repeat(cached, new)),
        Mistake("the positions are the row's index i: each sequence counts from its own start, after its cache", 1,
                lambda: np.arange(sum(new))),
    ]


def test_ragged_positions(step):
    """ragged_positions gives token i of sequence b the position cache_lengths[b] + i - offsets[b]"""
    fn = attribute(step, "ragged_positions")
    for new, cached in BATCHES:
        what = f"ragged_positions for new tokens {new} after {cached} cached"
        got = call(fn, sum(new), from_numpy(_offsets(new)), from_numpy(np.array(cached, dtype=np.uint32)), what=what)
        try:
            got = to_numpy(got)
        except Exception as error:  # noqa: BLE001 - a lazily-raised MAX error is still the learner's
            fail(f"{what} gave a value MAX could not compute: {error}")
        expected = _positions(new, cached)
        if got.shape != expected.shape or not np.array_equal(got, expected):
            known = matching_mistake(got, position_mistakes(new, cached), atol=0, rtol=0) if got.shape == expected.shape else None
            reason = known.says if known else f"got {got.tolist()}, expected {expected.tolist()}"
            fail(f"{what}: {reason} — {todo_in(fn)}")


class Runner:
    """The learner's served model compiled on a page pool, beside the Hugging Face model with the same weights."""

    def __init__(self, step, monkeypatch, classes: tuple[str, str], reference, config, heads: tuple[int, int, int],
                 model: str = "GPT-2"):
        from course.paged import PagePool, RaggedRunner

        self.reference, self.file = reference, step.__file__
        self._guard(step, monkeypatch, classes)
        state = to_max_state(reference)
        served = build(attribute(step, classes[-1]), config)
        load_weights(served, state, model=model)
        kv_heads, head_dim, layers = heads
        self.pool = PagePool.for_model(kv_heads, head_dim, layers, pages=40, page_size=PAGE)
        try:
            self.runner = RaggedRunner(served, self.pool, state)
        except Exception as error:  # noqa: BLE001 - the learner's graph did not build
            from course.check.hints import explain_exception

            fail(f"step {Path(step.__file__).stem[5:7]}'s model did not compile for a ragged batch: "
                 f"{explain_exception(error, step.__file__)}")

    @staticmethod
    def _guard(step, monkeypatch, classes):
        """The learner's classes, each forward's None named with its TODO while the graph is traced."""
        for name in classes:
            cls = attribute(step, name)
            original = cls.forward

            def forward(self, *args, _original=original, _name=name, **kwargs):
                out = _original(self, *args, **kwargs)
                if out is None:
                    fail(f"{_name}.forward returned None — finish {todo_in(_original)}")
                rows = list(getattr(out, "shape", []))[:1]
                if _name == classes[-1] and args and rows == [args[0].shape[0]]:  # traced: named before it compiles
                    shape = ", ".join(map(str, out.shape))
                    fail(f"{_name}.forward returns [{shape}], a row for each of the batch's new tokens; {ONE_ROW} — "
                         f"{todo_in(_original)}")
                return out

            monkeypatch.setattr(cls, "forward", forward)

    def expected(self, ids: list[int]) -> np.ndarray:
        with torch.no_grad():
            return self.reference(torch.tensor([ids])).logits[0, -1].numpy()


@pytest.fixture
def runner(step):
    reference = GPT2LMHeadModel.from_pretrained(str(COURSE_MODEL), dtype=torch.float32).eval()
    hf = reference.config
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield Runner(step, monkeypatch, ("PagedSelfAttention", "ServedGPT2"), reference,
                     solution(1).GPT2Config.from_hf(hf), (hf.n_head, hf.n_embd // hf.n_head, hf.n_layer))


def requests_come_and_go(runner: Runner, vocab: int) -> None:
    """Three prompts (7, 1 and 10 tokens) prefilled in one batch, then six decode steps: a fourth request joins at
    the third, one leaves at the fifth; after every pass each sequence's logits are the reference's."""
    rng = np.random.default_rng(25)
    texts = {name: rng.integers(0, vocab, size).tolist() for name, size in (("a", 7), ("b", 1), ("c", 10))}
    batch = dict(texts)
    for step in range(7):
        what = f"pass {step} ({', '.join(f'{k}: {len(v)} new' for k, v in batch.items())})"
        logits = runner.runner.run(batch)
        if logits.shape[0] != len(batch):
            fail(f"{what}: the served model returned {logits.shape[0]} rows for {len(batch)} sequences; {ONE_ROW} "
                 f"— {todo_label(3, runner.file)}")
        for row, name in enumerate(batch):
            try:
                assert_close(logits[row], runner.expected(texts[name]), f"{what}, sequence {name!r}'s next-token logits")
            except pytest.fail.Exception as failure:  # no named mistake: where to look, from the pass it failed in
                fail(f"{failure.msg}. {DECODING if step else PREFILLING} — "
                     f"{todo_label([2, 3], runner.file)}")
        batch = {name: [int(rng.integers(0, vocab))] for name in texts}
        for name, ids in batch.items():
            texts[name] = texts[name] + ids
        if step == 2:
            batch["d"] = rng.integers(0, vocab, 5).tolist()
            texts["d"] = list(batch["d"])
        if step == 4:
            runner.pool.release("b")
            del texts["b"], batch["b"]
    assert set(runner.pool.tables) == {"a", "c", "d"}, runner.pool.tables


def test_a_ragged_batch_on_pages_matches_hugging_face_as_requests_come_and_go(runner):
    """as requests come and go on the pages, each sequence's logits are GPT2LMHeadModel's on its whole text

    Three prompts (7, 1 and 10 tokens) prefilled in one batch, then six decode steps: a fourth request joins at the
    third (its prompt prefilled beside the others' single tokens), one leaves at the fifth (its pages go back to
    the pool)."""
    requests_come_and_go(runner, VOCAB)
