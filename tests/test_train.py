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
import sys
import time

import numpy as np
import pytest

from course.authoring import train as training
from course.outline import COURSE_LLAMA, COURSE_MODEL, GPT2_TOKENIZER
from harness import assert_help, c_locale

pytestmark = pytest.mark.programs

TINY = dict(n_layer=1, n_head=2, n_embd=32, n_positions=64)
TINY_LLAMA = dict(num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, hidden_size=32,
                  intermediate_size=96, max_position_embeddings=64, tie_word_embeddings=True)


def test_a_chapters_prose_is_its_sentences_without_markdown_or_code():
    markdown = """# A heading line

A first plain sentence of words.<!-- an aside --> See [the linked page](https://example.com) for **bold words** here! Too short.
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

x_1 = 2 is code. Only three words. Four words are kept.

```text
a code block's first line

A plain sentence of words in a code block.
```

<!-- a comment

A plain sentence of words in a comment.
-->"""
    assert training.prose(markdown) == (
        "A first plain sentence of words. See the linked page for bold words here! A quiet sentence ends with a "
        "colon: then this one follows on.\n\nA numbered item with its words. A dashed item with its words.\n\n"
        "Four words are kept.")


@pytest.mark.parametrize("opening", ["# A heading.", "| a | table.", "![An image.](x.svg)", "{{#include x.py}}.",
                                     "$$ x. $$.", "<div>."])
def test_a_paragraph_that_opens_with_a_heading_table_image_include_math_or_html_is_left_out_whole(opening):
    assert training.prose(f"{opening}\nThen a plain sentence of words.") == ""


def test_the_held_out_tail_is_cut_at_the_paragraph_break_nearest_its_share():
    paragraphs = [f"paragraph {i:02d} of the text" for i in range(10)]
    text = "\n\n".join(paragraphs)
    assert training.split(text) == ("\n\n".join(paragraphs[:9]), paragraphs[9])
    assert training.split(text, 0.3) == ("\n\n".join(paragraphs[:7]), "\n\n".join(paragraphs[7:]))
    lines = "\n".join(paragraphs)  # one paragraph: at the nearest line break
    assert training.split(lines) == ("\n".join(paragraphs[:9]), paragraphs[9])
    assert training.split("x" * 100) == ("x" * 90, "x" * 10)  # no break at all: at the share itself
    # the share's point just after a break (21 of 30), and just after the first line break of a paragraph break
    assert training.split("a" * 20 + "\n\n" + "b" * 8, 0.3) == ("a" * 20, "b" * 8)
    assert training.split("a" * 20 + "\n" + "b" * 9, 0.3) == ("a" * 20, "b" * 9)
    for tail in ("  indented", "X marks it"):  # the tail as written, only the break's newlines taken off
        assert training.split("a" * 20 + "\n\n" + tail, 0.3) == ("a" * 20, tail)


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
    """the book's pages in file order, read as UTF-8 whatever the locale (the book is not ASCII)"""
    for name, text in (("b.md", "B — ✓"), ("SUMMARY.md", "contents"), ("a.md", "A"), ("notes.txt", "no")):
        (tmp_path / name).write_text(text, encoding="utf-8")
    monkeypatch.setattr(training, "BOOK", tmp_path)
    with c_locale():
        assert training.chapters() == [("a", "A"), ("b", "B — ✓")]


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
    axes from 0 to the loss above the highest, ticked each nat and at each quarter of the run; the axes' titles
    centred on them"""
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
    axes = [tuple(float(v) for v in found) for found in re.findall(
        r'<line x1="([\d.]+)" y1="([\d.]+)" x2="([\d.]+)" y2="([\d.]+)"', svg)]
    assert axes == [(x(0), y(0), x(4), y(0)), (x(0), y(top), x(0), y(0))], axes  # from the origin to the last step, the top
    [(tx, ty)] = re.findall(r'<text x="([\d.]+)" y="([\d.]+)" text-anchor="middle">training step', svg)
    assert (float(tx), float(ty)) == (width / 2, height - 10), (tx, ty)  # centred, its baseline 10 px above the edge
    [(lx, ly, rx, ry)] = re.findall(r'<text x="([\d.]+)" y="([\d.]+)" transform="rotate\(-90 ([\d.]+) ([\d.]+)\)" '
                                    r'text-anchor="middle">cross-entropy', svg)
    assert (lx, ly) == (rx, ry) and float(ly) == height / 2, (lx, ly, rx, ry)  # turned about itself, centred
    record["sizes"] = dict(TINY_LLAMA)
    assert "training step (batches of 8 × 64 tokens)" in training.plot(record)
    for highest, every in ((14.0, 2), (10.0, 2), (15.0, 3)):  # a loss axis to 14, 10 or 15: about five ticks
        record["train_loss"] = [highest, 4.0, 3.0, 2.0, 1.5]
        assert re.findall(r'<text x="42" y="[\d.]+" text-anchor="end">(\d+)</text>', training.plot(record)) == [
            str(k) for k in range(0, int(highest) + 1, every)], highest


@pytest.mark.parametrize("family", sorted(training.FAMILIES))
def test_the_books_training_curve_is_the_shipped_models_record_drawn(family):
    """book/src/training.svg (and training-llama.svg) are the curves of the models the course ships: plot() of their
    training.json, byte for byte"""
    _, _, _, folder, curve = training.FAMILIES[family]
    record = json.loads((folder / "training.json").read_text(encoding="utf-8"))
    assert curve.read_text(encoding="utf-8") == training.plot(record), (
        f"{curve.name} is not the curve of {folder.name}/training.json: `pixi run train` writes both")


#: A small book and Bible for whole runs: enough text for windows of 16 tokens in each held-out tail.
SHORT = dict(n_layer=1, n_head=2, n_embd=32, n_positions=16)
CURVE_WINDOWS = 4  # the Bible's held-out windows the curve measures (of 9; the book's 40 of 1,652)
SMALL_BOOK = [("one", "\n\n".join(f"Paragraph {i} of the small book says that the model reads a few plain words."
                                   for i in range(40)))]
SMALL_BIBLE = [f"Book {b}\n\n" + "\n\n".join(f"And in chapter {c} of book {b} there were words, and they were good."
                                             for c in range(30)) for b in range(3)]


@pytest.fixture
def small_book(monkeypatch):
    """Whole runs read the small book and Bible, and measure the Bible's curve on its first few windows."""
    read(monkeypatch, SMALL_BOOK, SMALL_BIBLE)
    monkeypatch.setattr(training, "KJV_CURVE_WINDOWS", CURVE_WINDOWS)


def keep_saved_model(monkeypatch) -> dict:
    """train() saves as it does, and the model it hands save() is kept, in float32 (save casts to float16), under
    "model" in the dict returned."""
    import copy

    kept, save = {}, training.save
    monkeypatch.setattr(training, "save", lambda model, *rest: (kept.update(model=copy.deepcopy(model)), save(model, *rest)))
    return kept


@pytest.fixture
def trained(small_book, tmp_path, monkeypatch, capsys):
    """One short run of the GPT-2 family on the small book: 60 steps, so the held-out losses are measured at 0, 50
    and 60, into a folder whose parent does not exist yet. Its folder, curve, record, the text it read, what it
    printed (off a terminal, 200 columns wide), its seconds by the test's clock and the model it saved, in float32.
    (A fixture of each check's own: one shared by the module would run in the first check's setup, and mutmut
    would map train() to that check alone.)"""
    import types

    import rich
    from rich.console import Console

    kept = keep_saved_model(monkeypatch)
    monkeypatch.setattr(rich, "_console", Console(width=200))  # the bar's console: wide enough for all its columns
    capsys.readouterr()
    started = time.perf_counter()
    record = training.train(tmp_path / "runs" / "model", steps=60, seed=1, curve=tmp_path / "curve.svg", sizes=SHORT)
    seconds = time.perf_counter() - started
    return types.SimpleNamespace(folder=tmp_path / "runs" / "model", curve=tmp_path / "curve.svg", record=record,
                                 text=training.corpus(), printed=capsys.readouterr().out, seconds=seconds,
                                 model=kept["model"])


def test_the_llama_holds_out_the_gpt2_models_text(tmp_path, monkeypatch):
    """`--family llama`: a Llama of the sizes given, whose held-out text is the GPT-2 model's heldout.txt, word for
    word, and never trained on"""
    from transformers import LlamaForCausalLM

    read(monkeypatch, SMALL_BOOK, [book.replace("good.", "good — ✓.") for book in SMALL_BIBLE])  # not ASCII either
    sizes = dict(TINY_LLAMA, max_position_embeddings=16)
    with c_locale():  # the GPT-2 model's held-out text is not ASCII: read and written as UTF-8 whatever the locale
        record = training.train(tmp_path / "llama", steps=2, seed=0, curve=None, sizes=sizes, family="llama")
    same = (COURSE_MODEL / "heldout.txt").read_text(encoding="utf-8")
    assert (tmp_path / "llama" / "heldout.txt").read_text(encoding="utf-8") == same
    assert "good — ✓." in (tmp_path / "llama" / "heldout-kjv.txt").read_text(encoding="utf-8")
    assert (record["family"], record["sizes"]) == ("llama", sizes)
    assert record["held_out_tokens"] == (len(training.tokenizer().encode(same).ids) - 1) // 16 * 16, record
    model = LlamaForCausalLM.from_pretrained(tmp_path / "llama")
    assert (model.config.num_key_value_heads, model.config.vocab_size) == (1, training.VOCABULARY)


def test_a_run_records_what_it_read_and_how_it_went(trained):
    record, text = trained.record, trained.text
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
    assert record["threads"] >= 1 and record["torch"].startswith("2.")
    assert 0 < record["seconds"] <= trained.seconds and record["seconds"] == round(record["seconds"], 1), (
        record["seconds"], trained.seconds)  # the steps' time, to a tenth of a second
    losses = record["train_loss"] + [loss for _, loss in record["held_out_loss"] + record["kjv_held_out_loss"]]
    assert all(isinstance(loss, float) and loss == round(loss, 4) for loss in losses), losses  # 4 decimals
    for name in ("held_out_perplexity", "kjv_held_out_perplexity"):
        assert isinstance(record[name], float) and record[name] == round(record[name], 2), record[name]
    written = (trained.folder / "training.json").read_text()
    assert json.loads(written) == json.loads(json.dumps(record))
    assert written == json.dumps(json.loads(written), indent=1) + "\n"  # a key a line, so that retrainings diff by line
    assert trained.curve.read_text() == training.plot(json.loads(json.dumps(record)))


def test_a_run_off_a_terminal_prints_a_line_at_each_measure_and_the_bar_once(trained):
    """off a terminal (a log, CI): at each held-out measure after the start, the step, the batch's loss and the
    held-out loss, and the seconds so far; then the bar as it ended (the steps done, the last losses)"""
    record = trained.record
    lines = trained.printed.splitlines()
    assert len(lines) == 3, trained.printed
    for line, step, held in zip(lines, (50, 60), record["held_out_loss"][1:]):
        match = re.fullmatch(rf"step {step}/60: loss (\d+\.\d\d), held out (\d+\.\d\d) \((\d+) s\)", line)
        assert match, line
        assert match[1] == f"{record['train_loss'][step - 1]:.2f}" and match[2] == f"{held[1]:.2f}", (line, held)
        assert int(match[3]) <= trained.seconds + 1, (line, trained.seconds)
    words = lines[2].split()
    assert words[0] == "training" and set(words[1]) == {"━"} and words[2:8] == [
        "60/60", "loss", f"{record['train_loss'][-1]:.2f}", "held", "out", f"{record['held_out_loss'][-1][1]:.2f}"], lines[2]
    assert all(re.fullmatch(r"\d+:\d\d:\d\d", word) for word in words[8:]) and len(words) == 10, lines[2]


def test_a_run_is_seeded(trained):
    """the same seed writes the same weights and losses (also over the folder of an earlier run); another seed,
    others"""
    record, folder = trained.record, trained.folder
    first = (folder / "model.safetensors").read_bytes()
    other = training.train(folder.parent / "other", steps=60, seed=2, curve=None, sizes=SHORT)
    again = training.train(folder, steps=60, seed=1, curve=None, sizes=SHORT)
    assert (folder / "model.safetensors").read_bytes() == first and again["train_loss"] == record["train_loss"]
    assert (folder.parent / "other" / "model.safetensors").read_bytes() != first
    assert other["train_loss"] != record["train_loss"]


def test_the_folder_is_a_checkpoint_whose_loss_is_the_one_recorded(trained):
    """the folder written: Hugging Face loads it with GPT-2's 50,257 tokens, float16, GPT-2's tokenizer files and
    the held-out texts; the model's cross-entropy by Hugging Face on the held-out windows, over the whole
    vocabulary, is the recorded loss (the shared logit plus log(unused tokens) is exact): to the 4 decimals recorded
    in float32, as it was trained, and to float16's rounding from the folder; the Bible's gives the recorded
    perplexity"""
    import torch
    from safetensors import safe_open
    from transformers import GPT2LMHeadModel

    record, text, folder = trained.record, trained.text, trained.folder
    with safe_open(folder / "model.safetensors", "np") as f:
        assert {f.get_tensor(key).dtype for key in f.keys()} == {np.dtype("float16")}
    for name in ("vocab.json", "merges.txt"):
        assert (folder / name).read_bytes() == (GPT2_TOKENIZER / name).read_bytes(), name
    assert (folder / "heldout.txt").read_text(encoding="utf-8") == text["held_out_text"]
    assert (folder / "heldout-kjv.txt").read_text(encoding="utf-8") == text["kjv_held_out_text"]
    saved = GPT2LMHeadModel.from_pretrained(folder, dtype=torch.float32).eval()
    assert saved.config.vocab_size == trained.model.config.vocab_size == training.VOCABULARY

    def loss(model, ids, windows=None) -> float:  # Hugging Face's mean cross-entropy over the windows
        held = torch.from_numpy(training.windows(np.asarray(ids), 16)[:windows, :-1])
        with torch.no_grad():
            return sum(float(model(part, labels=part).loss) * len(part) for part in held.split(8)) / len(held)

    exact = trained.model.eval()
    for model, tolerance in ((exact, 1e-4), (saved, 0.02)):  # the 4 decimals recorded; float16 weights
        assert loss(model, text["held_out"]) == pytest.approx(record["held_out_loss"][-1][1], abs=tolerance)
        assert loss(model, text["kjv_held_out"], CURVE_WINDOWS) == pytest.approx(
            record["kjv_held_out_loss"][-1][1], abs=tolerance)
    assert math.exp(loss(exact, text["kjv_held_out"])) == pytest.approx(record["kjv_held_out_perplexity"], abs=0.01)
    assert len(training.windows(np.asarray(text["kjv_held_out"]), 16)) > CURVE_WINDOWS  # the perplexity on all


def test_no_curve_is_written_unless_asked(tmp_path, monkeypatch):
    read(monkeypatch, SMALL_BOOK, SMALL_BIBLE)
    training.train(tmp_path / "model", steps=2, seed=0, curve=None, sizes=SHORT)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model"]


def test_the_command_trains_each_family_where_it_belongs_and_says_how_it_went(monkeypatch, capsys, tmp_path):
    calls = []
    record = {"seconds": 12.6, "held_out_loss": [(0, 9.0), (50, 6.0), (60, 5.4321)], "held_out_perplexity": 228.7,
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
    dump.write_text("Genesis 1\n  1 In the beginning.\n  2 And the earth.\nGenesis 2\n  1 Thus — the heavens.\n"
                    "  2 And on the seventh day.\nExodus 1\n  1 Now.\n", encoding="utf-8")
    kjv = tmp_path / "kjv.txt"
    monkeypatch.setattr(training, "KJV", kjv)
    monkeypatch.setattr(training, "train", lambda *args: pytest.fail("--import-kjv trains nothing"))
    with c_locale():  # the dump and kjv.txt are UTF-8 whatever the locale
        assert training.main(["--import-kjv", str(dump)]) == 0
    genesis = "Genesis\n\nIn the beginning. And the earth.\n\nThus — the heavens. And on the seventh day."
    assert kjv.read_text(encoding="utf-8") == f"{genesis}\n\n\nExodus\n\nNow.\n"  # a chapter a paragraph
    assert capsys.readouterr().out == f"wrote {kjv}\n"
    with c_locale():
        assert training.bible() == [genesis, "Exodus\n\nNow."]  # what the runs read of it, whatever the locale


def test_the_bible_the_course_ships_is_its_66_books_a_paragraph_a_chapter():
    books = training.bible()
    chapters = {book.split("\n\n")[0]: book.split("\n\n")[1:] for book in books}
    assert len(books) == len(chapters) == 66, [book[:20] for book in books]
    assert (len(chapters["Genesis"]), len(chapters["Psalms"]), len(chapters["Revelation"])) == (50, 150, 22)
    assert chapters["Genesis"][0].startswith("In the beginning God created the heaven and the earth.")
    assert books[-1].endswith("The grace of our Lord Jesus Christ be with you all. Amen."), books[-1][-80:]


def test_help_names_the_command_and_each_option_with_its_default(capsys):
    lines = training.__doc__.split("\n")  # the first line alone, not the usage below it
    assert_help(training.main, capsys, "pixi run train [-h]", lines[0], lines[2], (
        ("--family {gpt2,llama}", "GPT-2 (Part I) or Llama (Part II) (default: gpt2)"),
        ("--out OUT", "the checkpoint folder to write (default: course/gpt2-book or course/llama-book)"),
        ("--steps STEPS", f"optimizer steps (default: {training.STEPS})"),
        ("--seed SEED", "the seed of the initial weights and the batches (default: 0)"),
        ("--curve CURVE", "where to write the training curve (SVG; default: book/src/training.svg, or training-llama.svg)"),
        ("--import-kjv DUMP", "write course/texts/kjv.txt from this output of Debian's")))


def test_a_family_the_course_does_not_train_is_refused_with_the_two_it_does(monkeypatch, capsys):
    monkeypatch.setattr(training, "train", lambda *args: pytest.fail("nothing is trained"))
    with pytest.raises(SystemExit) as refused:
        training.main(["--family", "gpt3"])
    assert refused.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]  # argparse quotes the choices or not, by Python's version
    assert last.startswith("pixi run train: error: argument --family: invalid choice: 'gpt3' (choose from ") and (
        last.replace("'", "").endswith("gpt2, llama)")), last


def test_each_step_is_the_recipe_adamw_on_the_whole_vocabularys_cross_entropy(small_book, tmp_path, monkeypatch):
    """three steps of train(), redone here from the recipe in its docstring: the seeded model and generator, 8
    windows starting anywhere in the trained text, the cross-entropy over GPT-2's 50,257 tokens (checked against
    Hugging Face's on the folder, below), AdamW with betas 0.9 and 0.95 and weight decay 0.1 at the scheduled rate
    (warm-up of one step here, so that each step moves the weights by the full rate), gradients clipped to norm 1:
    the same weights, bit for bit, and the same losses"""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    trained = keep_saved_model(monkeypatch)
    monkeypatch.setattr(training, "WARMUP", 1)
    steps, seed, length = 3, 5, SHORT["n_positions"]
    record = training.train(tmp_path / "m", steps=steps, seed=seed, curve=None, sizes=SHORT)

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    text = training.corpus()
    used = np.unique(text["ids"])
    index = np.full(training.VOCABULARY, len(used))
    index[used] = np.arange(len(used))
    ids = index[np.asarray(text["ids"])]
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(used) + 1, **SHORT))
    adamw = torch.optim.AdamW(model.parameters(), lr=1.0, betas=(0.9, 0.95), weight_decay=0.1)
    shared = math.log(training.VOCABULARY - len(used))
    losses = []
    for step in range(steps):
        starts = rng.integers(0, len(ids) - length - 1, size=8)
        batch = torch.from_numpy(np.stack([ids[s : s + length] for s in starts]))
        assert max(starts) + length < len(ids)  # a window and its shifted target inside the text
        logits = model(batch).logits[:, :-1]
        whole = torch.cat([logits[..., :-1], logits[..., -1:] + shared], dim=-1)
        loss = (torch.logsumexp(whole, -1) - logits.gather(-1, batch[:, 1:, None])[..., 0]).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for group in adamw.param_groups:
            group["lr"] = training.learning_rate(step, steps)  # 3e-3, 3e-3, then down the cosine
        adamw.step()
        adamw.zero_grad()
        losses.append(round(float(loss.detach()), 4))
    assert record["train_loss"] == losses, (record["train_loss"], losses)
    full = training.full_vocabulary(model, index, SHORT, GPT2LMHeadModel, GPT2Config).state_dict()
    worst = max((float((value - full[name]).abs().max()), name) for name, value in trained["model"].state_dict().items())
    assert worst[0] == 0, f"train()'s weights differ from the recipe's by up to {worst[0]:.3g} in {worst[1]}"
