"""``course/authoring/train.py``, piece by piece: what the course model reads, how it learns, what it writes.

``tests/test_course_model.py`` checks the models the course ships (trained for 20 minutes by
``pixi run train``) and that two short runs agree. Here each piece is checked on small inputs
whose right answer is known: the prose taken from a chapter, the held-out cut, the learning
rate, the loss over GPT-2's whole vocabulary (against Hugging Face's own, on the folder
written), the training curve's points, and the command's lines.
"""

from __future__ import annotations

import hashlib
import json
import math
import re

import numpy as np
import pytest

from course.authoring import train as training
from course.outline import COURSE_LLAMA, COURSE_MODEL, GPT2_TOKENIZER

pytestmark = pytest.mark.programs

TINY = dict(n_layer=1, n_head=2, n_embd=32, n_positions=64)
TINY_LLAMA = dict(num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, hidden_size=32,
                  intermediate_size=96, max_position_embeddings=64, tie_word_embeddings=True)


def test_a_chapters_prose_is_its_sentences_without_markdown_or_code():
    markdown = """# A heading line

A first plain sentence of words. See [the linked page](https://example.com) for **bold words** here! Too short.
Uses `code` here in this one. A *quiet* sentence ends with a colon: then this one follows on.

```python
print("a code block, with sentences of words.")
```

<!-- a comment of many words in a row -->

| a | table | row | of | cells |

![an image of four words](x.svg)

{{#include ../x.py}}

$$ a display of math $$

<div>an html line of words</div>

1. A numbered item with its words.
- A dashed item with its words.

x_1 = 2 is code. Only three words."""
    assert training.prose(markdown) == (
        "A first plain sentence of words. See the linked page for bold words here! A quiet sentence ends with a "
        "colon: then this one follows on.\n\nA numbered item with its words. A dashed item with its words.")


def test_the_held_out_tail_is_cut_at_the_paragraph_break_nearest_its_share():
    paragraphs = [f"paragraph {i:02d} of the text" for i in range(10)]
    text = "\n\n".join(paragraphs)
    assert training.split(text) == ("\n\n".join(paragraphs[:9]), paragraphs[9])
    assert training.split(text, 0.3) == ("\n\n".join(paragraphs[:7]), "\n\n".join(paragraphs[7:]))
    lines = "\n".join(paragraphs)  # one paragraph: at the nearest line break
    assert training.split(lines) == ("\n".join(paragraphs[:9]), paragraphs[9])
    assert training.split("x" * 100) == ("x" * 90, "x" * 10)  # no break at all: at the share itself


def test_windows_are_consecutive_with_their_shifted_targets():
    assert training.windows(np.arange(11), 3).tolist() == [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9]]
    assert training.windows(np.arange(10), 3).tolist() == [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9]]
    assert training.windows(np.arange(9), 3).tolist() == [[0, 1, 2, 3], [3, 4, 5, 6]]


def test_the_learning_rate_warms_up_then_falls_along_a_cosine_to_a_tenth():
    top, warm = training.LEARNING_RATE, training.WARMUP
    lr = lambda step, steps=1000: training.learning_rate(step, steps)  # noqa: E731
    assert lr(0) == pytest.approx(top / warm) and lr(warm - 1) == pytest.approx(top)
    assert [lr(step) for step in range(warm)] == pytest.approx([top * (s + 1) / warm for s in range(warm)])
    assert lr(warm) == pytest.approx(top) and lr(1000) == pytest.approx(top / 10)
    assert lr(warm + (1000 - warm) // 2) == pytest.approx(top * 0.55)  # half way down: 0.1 + 0.9 / 2
    assert lr(warm + 100, warm + 400) == pytest.approx(top * (0.1 + 0.45 * (1 + math.cos(math.pi / 4))))  # a quarter
    assert lr(warm, warm) == pytest.approx(top) and lr(warm + 1, warm) == pytest.approx(top / 10)  # no room to fall


def test_the_tokenizer_is_gpt2s_with_its_end_of_text():
    tok = training.tokenizer()
    assert tok.encode("Hello world<|endoftext|> again").ids == [15496, 995, 50256, 757]
    assert tok.decode([15496, 995, 50256, 757], skip_special_tokens=False) == "Hello world<|endoftext|> again"
    assert tok.get_vocab_size() == training.VOCABULARY


def test_the_chapters_are_the_books_pages_without_its_table_of_contents(tmp_path, monkeypatch):
    for name, text in (("b.md", "B"), ("SUMMARY.md", "contents"), ("a.md", "A"), ("notes.txt", "no")):
        (tmp_path / name).write_text(text, encoding="utf-8")
    monkeypatch.setattr(training, "BOOK", tmp_path)
    assert training.chapters() == [("a", "A"), ("b", "B")]


CHAPTER = """# One

The first paragraph of chapter one has words.

The second paragraph of chapter one has words.

The third paragraph of chapter one has more words than the others, so that the cut falls before it."""
BOOKS = ["Genesis\n\nIn the beginning were the words of it.\n\nAnd a second chapter of words.",
         "Exodus\n\nNow these are the names of them all.\n\nAnd a later chapter of its own."]


def read(patch, chapters: list[tuple[str, str]], books: list[str]) -> None:
    """train.py reads these chapters and these books of the Bible instead of the whole book and the whole Bible."""
    patch.setattr(training, "chapters", lambda: list(chapters))
    patch.setattr(training, "bible", lambda: list(books))


@pytest.fixture
def small_text(monkeypatch):
    """One chapter and two books of the Bible, instead of the whole book and the whole Bible."""
    read(monkeypatch, [("one", CHAPTER)], BOOKS)


def test_the_corpus_holds_each_texts_head_and_keeps_its_tail_apart(small_text):
    """the chapters as prose and the Bible's books, each cut in two: the heads trained on, joined and ended by
    <|endoftext|>; the tails held out (the chapters' and the Bible's apart); the digest of both texts"""
    tok = training.tokenizer()
    text = training.corpus()
    prose = training.prose(CHAPTER)
    heads_tails = [training.split(t) for t in (prose, *BOOKS)]
    trained = "<|endoftext|>".join(head for head, _ in heads_tails) + "<|endoftext|>"
    assert text["ids"] == tok.encode(trained).ids
    assert text["held_out_text"] == heads_tails[0][1] and text["held_out"] == tok.encode(heads_tails[0][1]).ids
    bible_tails = "<|endoftext|>".join(tail for _, tail in heads_tails[1:])
    assert text["kjv_held_out_text"] == bible_tails and text["kjv_held_out"] == tok.encode(bible_tails).ids
    assert text["sha256"] == hashlib.sha256("".join((prose, *BOOKS)).encode("utf-8")).hexdigest()


def test_another_models_held_out_text_is_held_out_here_too(small_text):
    """corpus(held_out_text): that text is the held-out part, and its paragraphs are never trained on"""
    tok = training.tokenizer()
    second = "The second paragraph of chapter one has words."
    text = training.corpus(f"{second}\n\nA paragraph the chapter does not have.")
    head, _ = training.split(training.prose(CHAPTER))
    kept = "\n\n".join(p for p in head.split("\n\n") if p != second)
    assert text["held_out_text"] == f"{second}\n\nA paragraph the chapter does not have."
    assert text["held_out"] == tok.encode(text["held_out_text"]).ids
    assert text["ids"] == tok.encode(kept + "<|endoftext|>" + "<|endoftext|>".join(
        training.split(book)[0] for book in BOOKS) + "<|endoftext|>").ids


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_the_full_vocabulary_gives_every_unused_token_the_shared_row(family):
    """the small model's rows spread over GPT-2's 50,257: a used token's logit is its row's, every unused token's
    the shared row's; the head stays tied to the embedding, and the end of text is the config's bos and eos"""
    import torch
    import transformers

    model_class, config_class, _, _, _ = training.FAMILIES[family]
    model_class, config_class = getattr(transformers, model_class), getattr(transformers, config_class)
    sizes = TINY if family == "gpt2" else TINY_LLAMA
    used = np.array([5, 17, 300, 50256])
    index = np.full(training.VOCABULARY, len(used), dtype=np.int64)
    index[used] = np.arange(len(used))
    torch.manual_seed(0)
    small = model_class(config_class(vocab_size=len(used) + 1, **sizes)).eval()
    full = training.full_vocabulary(small, index, sizes, model_class, config_class).eval()
    ids = torch.tensor([[17, 5, 300, 50256, 17]])
    with torch.no_grad():
        expected = small(torch.from_numpy(index)[ids]).logits
        got = full(ids).logits
    assert got.shape[-1] == training.VOCABULARY
    worst = float((got[..., used] - expected[..., : len(used)]).abs().max())  # float32 rounding only
    assert worst < 1e-6, f"a used token's logit is {worst:.3g} from its row's"
    unused = np.setdiff1d(np.arange(training.VOCABULARY), used)
    worst = float((got[..., unused] - expected[..., len(used):]).abs().max())
    assert worst < 1e-6, f"an unused token's logit is {worst:.3g} from the shared row's"
    assert full.get_output_embeddings().weight.data_ptr() == full.get_input_embeddings().weight.data_ptr()
    assert (full.config.bos_token_id, full.config.eos_token_id) == (50256, 50256)


def test_the_curve_draws_each_loss_at_its_step_and_value():
    """plot(record): the training loss at every step, both held-out losses at the steps they were measured, on
    axes from 0 to the loss above the highest, ticked each nat and at each quarter of the run"""
    record = {"train_loss": [4.0, 3.0, 2.0, 1.5], "held_out_loss": [(0, 5.0), (4, 2.5)],
              "kjv_held_out_loss": [(0, 4.5), (2, 3.0), (4, 2.0)], "batch": 8, "sizes": dict(TINY)}
    svg = training.plot(record)
    width, height, pad, top = 640, 320, 48, 5  # the loss axis ends at ceil(5.0)
    assert re.search(r'viewBox="0 0 (\d+) (\d+)"', svg).groups() == (str(width), str(height))
    x = lambda step: pad + (width - 2 * pad) * step / 4  # noqa: E731
    y = lambda loss: height - pad - (height - 2 * pad) * loss / top  # noqa: E731
    lines = [[float(v) for point in points.split() for v in point.split(",")]
             for points in re.findall(r'<polyline points="([^"]*)"', svg)]
    assert len(lines) == 3, svg
    expected = ([v for i, loss in enumerate(record["train_loss"]) for v in (x(i + 1), y(loss))],
                [v for s, loss in record["held_out_loss"] for v in (x(s), y(loss))],
                [v for s, loss in record["kjv_held_out_loss"] for v in (x(s), y(loss))])
    for drawn, points in zip(lines, expected):
        assert drawn == pytest.approx(points, abs=0.06), (drawn, points)
    ticks = {(text, float(tx), float(ty)) for tx, ty, text in re.findall(r'<text x="([\d.]+)" y="([\d.]+)" text-anchor='
                                                                       r'"(?:end|middle)">(\d+)</text>', svg)}
    assert {(str(k), round(y(k) + 4)) for k in range(6)} == {(t, ty) for t, tx, ty in ticks if tx == pad - 6}
    assert {(str(k), round(x(k))) for k in range(5)} == {(t, tx) for t, tx, ty in ticks if ty == height - pad + 16}
    assert "training step (batches of 8 × 64 tokens)" in svg
    record["sizes"] = dict(TINY_LLAMA)
    assert "training step (batches of 8 × 64 tokens)" in training.plot(record)
    record["train_loss"] = [14.0] + record["train_loss"]  # a loss axis to 14: a tick every 2 nats
    assert re.findall(r'<text x="42" y="[\d.]+" text-anchor="end">(\d+)</text>', training.plot(record)) == [
        str(k) for k in range(0, 15, 2)]


#: A small book and Bible for whole runs: enough text for windows of 16 tokens in each held-out tail.
SHORT = dict(n_layer=1, n_head=2, n_embd=32, n_positions=16)
CURVE_WINDOWS = 4  # the Bible's held-out windows the curve measures (of 9; the book's 40 of 1,652)
SMALL_BOOK = [("one", "\n\n".join(f"Paragraph {i} of the small book says that the model reads a few plain words."
                                   for i in range(40)))]
SMALL_BIBLE = [f"Book {b}\n\n" + "\n\n".join(f"And in chapter {c} of book {b} there were words, and they were good."
                                             for c in range(30)) for b in range(3)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One short run of the GPT-2 family on the small book: 60 steps, so the held-out losses are measured at 0, 50
    and 60; its folder, curve, record and the text it read."""
    out = tmp_path_factory.mktemp("trained")
    with pytest.MonkeyPatch.context() as patch:
        read(patch, SMALL_BOOK, SMALL_BIBLE)
        patch.setattr(training, "KJV_CURVE_WINDOWS", CURVE_WINDOWS)
        record = training.train(out / "model", steps=60, seed=1, curve=out / "curve.svg", sizes=SHORT)
        again = training.train(out / "again", steps=60, seed=1, curve=None, sizes=SHORT)
        other = training.train(out / "other", steps=60, seed=2, curve=None, sizes=SHORT)
        text = training.corpus()
    return out, record, text, again, other


def test_the_llama_holds_out_the_gpt2_models_text(tmp_path, monkeypatch):
    """`--family llama`: a Llama of the sizes given, whose held-out text is the GPT-2 model's heldout.txt, word for
    word, and never trained on"""
    from transformers import LlamaForCausalLM

    read(monkeypatch, SMALL_BOOK, SMALL_BIBLE)
    sizes = dict(TINY_LLAMA, max_position_embeddings=16)
    record = training.train(tmp_path / "llama", steps=2, seed=0, curve=None, sizes=sizes, family="llama")
    same = (COURSE_MODEL / "heldout.txt").read_text(encoding="utf-8")
    assert (tmp_path / "llama" / "heldout.txt").read_text(encoding="utf-8") == same
    assert (record["family"], record["sizes"]) == ("llama", sizes)
    assert record["held_out_tokens"] == (len(training.tokenizer().encode(same).ids) - 1) // 16 * 16, record
    model = LlamaForCausalLM.from_pretrained(tmp_path / "llama")
    assert (model.config.num_key_value_heads, model.config.vocab_size) == (1, training.VOCABULARY)


def test_a_run_records_what_it_read_and_how_it_went(trained):
    out, record, text, _, _ = trained
    used = len(np.unique(text["ids"]))
    assert {key: record[key] for key in ("family", "sizes", "steps", "batch", "seed", "learning_rate")} == {
        "family": "gpt2", "sizes": SHORT, "steps": 60, "batch": training.BATCH, "seed": 1,
        "learning_rate": training.LEARNING_RATE}
    windows = len(text["held_out"]) - 1, len(text["kjv_held_out"]) - 1
    assert (record["trained_tokens"], record["tokens_used"], record["text_sha256"]) == (len(text["ids"]), used, text["sha256"])
    assert (record["held_out_tokens"], record["kjv_held_out_tokens"]) == tuple(n // 16 * 16 for n in windows)
    assert len(record["train_loss"]) == 60 and all(isinstance(loss, float) for loss in record["train_loss"])
    assert [step for step, _ in record["held_out_loss"]] == [0, 50, 60] == [step for step, _ in record["kjv_held_out_loss"]]
    assert record["held_out_perplexity"] == round(math.exp(record["held_out_loss"][-1][1]), 2)
    assert record["held_out_loss"][-1][1] < record["held_out_loss"][0][1] - 1, record["held_out_loss"]  # it learns
    assert record["seconds"] > 0 and record["threads"] >= 1 and record["torch"].startswith("2.")
    assert json.loads((out / "model" / "training.json").read_text()) == json.loads(json.dumps(record))
    assert (out / "curve.svg").read_text() == training.plot(json.loads(json.dumps(record)))


def test_a_run_is_seeded(trained):
    """the same seed writes the same weights and losses; another seed, others"""
    out, record, _, again, other = trained
    weights = {name: (out / name / "model.safetensors").read_bytes() for name in ("model", "again", "other")}
    assert weights["model"] == weights["again"] and again["train_loss"] == record["train_loss"]
    assert weights["model"] != weights["other"] and other["train_loss"] != record["train_loss"]


def test_the_folder_is_a_checkpoint_whose_loss_is_the_one_recorded(trained):
    """the folder written: Hugging Face loads it with GPT-2's 50,257 tokens, float16, GPT-2's tokenizer files and
    the held-out texts; its cross-entropy on the held-out windows, over the whole vocabulary, is the recorded loss
    (the shared logit plus log(unused tokens) is exact), and the Bible's gives the recorded perplexity"""
    import torch
    from safetensors import safe_open
    from transformers import GPT2LMHeadModel

    out, record, text, _, _ = trained
    folder = out / "model"
    with safe_open(folder / "model.safetensors", "np") as f:
        assert {f.get_tensor(key).dtype for key in f.keys()} == {np.dtype("float16")}
    for name in ("vocab.json", "merges.txt"):
        assert (folder / name).read_bytes() == (GPT2_TOKENIZER / name).read_bytes(), name
    assert (folder / "heldout.txt").read_text(encoding="utf-8") == text["held_out_text"]
    assert (folder / "heldout-kjv.txt").read_text(encoding="utf-8") == text["kjv_held_out_text"]
    model = GPT2LMHeadModel.from_pretrained(folder, dtype=torch.float32).eval()
    assert model.config.vocab_size == training.VOCABULARY

    def loss(ids, windows=None) -> float:  # Hugging Face's mean cross-entropy over the windows
        held = torch.from_numpy(training.windows(np.asarray(ids), 16)[:windows, :-1])
        with torch.no_grad():
            return sum(float(model(part, labels=part).loss) * len(part) for part in held.split(8)) / len(held)

    assert loss(text["held_out"]) == pytest.approx(record["held_out_loss"][-1][1], abs=0.02)  # float16 weights
    assert loss(text["kjv_held_out"], CURVE_WINDOWS) == pytest.approx(record["kjv_held_out_loss"][-1][1], abs=0.02)
    assert math.exp(loss(text["kjv_held_out"])) == pytest.approx(record["kjv_held_out_perplexity"], rel=0.02)
    assert len(training.windows(np.asarray(text["kjv_held_out"]), 16)) > CURVE_WINDOWS  # the perplexity on all


def test_no_curve_is_written_unless_asked(tmp_path, monkeypatch):
    read(monkeypatch, SMALL_BOOK, SMALL_BIBLE)
    training.train(tmp_path / "model", steps=2, seed=0, curve=None, sizes=SHORT)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model"]


def test_the_command_trains_each_family_where_it_belongs_and_says_how_it_went(monkeypatch, capsys, tmp_path):
    calls = []
    record = {"seconds": 12.6, "held_out_loss": [(0, 9.0), (60, 5.4321)], "held_out_perplexity": 228.7,
              "kjv_held_out_perplexity": 61.04}
    monkeypatch.setattr(training, "train", lambda *args: calls.append(args) or record)
    assert training.main(["--steps", "60", "--seed", "2"]) == 0
    assert training.main(["--family", "llama"]) == 0
    assert training.main(["--out", str(tmp_path / "o"), "--curve", str(tmp_path / "c.svg")]) == 0
    assert calls == [(COURSE_MODEL, 60, 2, training.CURVE, training.SIZES, "gpt2"),
                     (COURSE_LLAMA, training.STEPS, 0, training.BOOK / "training-llama.svg", training.LLAMA_SIZES, "llama"),
                     (tmp_path / "o", training.STEPS, 0, tmp_path / "c.svg", training.SIZES, "gpt2")]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (f"trained 60 steps in 13 s; held-out loss 5.432 (perplexity 228.7) on the book, perplexity 61.0 "
                        f"on the Bible; wrote {COURSE_MODEL}"), lines
    assert lines[2].endswith(f"wrote {tmp_path / 'o'}") and lines[1].startswith(f"trained {training.STEPS} steps")


def test_the_command_imports_the_bible_from_debians_program(monkeypatch, capsys, tmp_path):
    dump = tmp_path / "dump.txt"
    dump.write_text("Genesis 1\n  1 In the beginning.\nExodus 1\n  1 Now.\n", encoding="utf-8")
    kjv = tmp_path / "kjv.txt"
    monkeypatch.setattr(training, "KJV", kjv)
    monkeypatch.setattr(training, "train", lambda *args: pytest.fail("--import-kjv trains nothing"))
    assert training.main(["--import-kjv", str(dump)]) == 0
    assert kjv.read_text(encoding="utf-8") == "Genesis\n\nIn the beginning.\n\n\nExodus\n\nNow.\n"
    assert capsys.readouterr().out == f"wrote {kjv}\n"
