"""``pixi run train``: the course's own small GPT-2, trained on English and this book with PyTorch on the CPU.

    pixi run train                          # writes course/gpt2-book/ and book/src/training.svg
    pixi run train --steps 20 --out /tmp/x  # a quick look
    pixi run train --family llama           # Part II's: course/llama-book/ and book/src/training-llama.svg

It is GPT-2 in every way a checkpoint can be: GPT-2's tokenizer (``course/gpt2-tokenizer``),
Hugging Face's ``GPT2LMHeadModel`` and its file layout, so step 14 loads it like GPT-2
small. Only the sizes are small (``SIZES``): 4 blocks of width 256, 16.3M parameters,
of which 12.9M are the token embedding of GPT-2's 50,257 tokens. The width is the
smallest that every quantized format of chapter 15 takes (q4_k and q6_k pack 256
values a block).

What it reads: English, and this book. The English is the King James Bible
(``course/texts/kjv.txt``, public domain, 1.09M tokens): plain sentences a small
model can learn to write in twenty minutes. The book's chapters (``book/src/*.md``)
come as prose (``prose``): code blocks, tables and every sentence with a code
character left out, so that the model writes no Markdown. They are 2% of what it
reads: eight times as much (tried) made it write the book's half-sentences, not the
Bible's whole ones. The last tenth of every
chapter, and of every book of the Bible, is held out and never trained on: the
chapters' tenth is written as ``heldout.txt`` beside the weights (``bench
--quantize`` measures perplexity on it), the Bible's as ``heldout-kjv.txt``.

The text uses about 10,000 of GPT-2's 50,257 tokens. Every other token shares one
embedding row: the model cannot tell them apart, having never seen one, and the
saved ``wte`` repeats that row for each of them, so git compresses them away. It
also makes training faster: the 40,000 equal logits are computed once, and enter
the softmax's sum as the shared logit plus log(40,000), which is
exactly the full model's cross-entropy (the loss a Hugging Face ``GPT2LMHeadModel``
measures on the saved folder is the one printed here). The weights are stored in
float16; the course reads them as float32.

``--family llama`` trains Part II's model the same way: a Hugging Face
``LlamaForCausalLM`` of the same depth and width (``LLAMA_SIZES``: RMSNorm, RoPE,
SwiGLU, 4 query heads sharing 2 key/value heads, the head tied), with the same
tokenizer, batches and steps. Its held-out text is the GPT-2 model's ``heldout.txt``,
word for word, and no paragraph of it is trained on, so that the two models'
perplexities are measured on the same tokens (chapter 24).

A step: a batch of 8 windows of the context's length, each starting anywhere in the
trained text; AdamW (betas 0.9 and 0.95, weight decay 0.1) at a learning rate warmed up
over 50 steps to 3e-3 and then down a cosine to a tenth; gradients clipped to norm 1.
The run is seeded (``--seed``): its batches come from one NumPy generator and its
initial weights from ``torch.manual_seed``. On the same machine it writes the same
weights; elsewhere, the same curve up to float rounding.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from course.outline import COURSE_LLAMA, COURSE_MODEL, GPT2_TOKENIZER, ROOT

BOOK = ROOT / "book" / "src"
CURVE = BOOK / "training.svg"
#: The English the models read besides the book: the King James Bible, one book of it after another
#: (two blank lines apart), each a title line and then one paragraph a chapter (course/texts/README.md).
KJV = ROOT / "course" / "texts" / "kjv.txt"
#: What a sentence of the book must not contain to be read as prose: Markdown's and code's characters.
CODE_CHARACTERS = set("`[]{}_=|#*<>$\\")

#: The model: GPT-2's vocabulary and layout, small sizes.
SIZES = dict(n_layer=4, n_head=4, n_embd=256, n_positions=256)
#: Part II's model: a Llama of the same depth, width and context; SwiGLU's width 3 × 256 (8/3 of the width,
#: rounded up to a multiple of 256), two key/value heads for the four query heads.
LLAMA_SIZES = dict(num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, hidden_size=256,
                   intermediate_size=768, max_position_embeddings=256, rope_theta=10000.0, tie_word_embeddings=True)
#: Each family: (the Hugging Face model class, its config class, its sizes, where it goes, its curve).
FAMILIES = {"gpt2": ("GPT2LMHeadModel", "GPT2Config", SIZES, COURSE_MODEL, CURVE),
            "llama": ("LlamaForCausalLM", "LlamaConfig", LLAMA_SIZES, COURSE_LLAMA, BOOK / "training-llama.svg")}
#: The run: batches of ``BATCH`` windows of ``n_positions`` tokens.
BATCH, STEPS, LEARNING_RATE, WARMUP, WEIGHT_DECAY = 8, 1000, 3e-3, 50, 0.1
#: The held-out loss is measured every ``EVERY`` steps: on the book's held-out tenth, and on the first
#: ``KJV_CURVE_WINDOWS`` windows of the Bible's (all of it once, at the end).
EVERY, KJV_CURVE_WINDOWS = 50, 40
#: GPT-2's vocabulary, and the id of <|endoftext|> in it.
VOCABULARY, END_OF_TEXT_ID = 50257, 50256
#: Of each chapter, this last share is held out.
HELD_OUT = 0.1
END_OF_TEXT = "<|endoftext|>"


def chapters() -> list[tuple[str, str]]:
    """The book's chapters, (name, markdown text), in file order; SUMMARY.md is only a table of contents."""
    return [(path.stem, path.read_text(encoding="utf-8")) for path in sorted(BOOK.glob("*.md")) if path.name != "SUMMARY.md"]


def prose(markdown: str) -> str:
    """A chapter's prose: its paragraphs without code blocks, comments, headings, tables, images or
    includes, links and emphasis reduced to their words, and only the sentences without a code
    character, so that a model that reads them writes no Markdown."""
    markdown = re.sub(r"```.*?```|<!--.*?-->", "", markdown, flags=re.S)
    paragraphs = []
    for paragraph in markdown.split("\n\n"):
        paragraph = paragraph.strip()
        if not paragraph or paragraph.startswith(("#", "|", "!", "{{", "$$", "<")):
            continue
        paragraph = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", paragraph)  # [words](link)
        paragraph = re.sub(r"\*\*?([^*]+)\*\*?", r"\1", paragraph)  # *words*, **words**
        paragraph = " ".join(re.sub(r"^\s*(\d+\.|-)\s+", "", paragraph, flags=re.M).split())  # each list item's mark
        sentences = [s for s in re.split(r"(?<=[.!?:])\s+", paragraph)
                     if not set(s) & CODE_CHARACTERS and len(s.split()) >= 4]
        if sentences:
            paragraphs.append(" ".join(sentences))
    return "\n\n".join(paragraphs)


def bible() -> list[str]:
    """The King James Bible's 66 books, each a title line and its chapters, a paragraph each."""
    return KJV.read_text(encoding="utf-8").strip().split("\n\n\n")


def kjv_from_bible_program(dump: str) -> str:
    """``kjv.txt`` from the output of Debian's ``bible -l10000 Gen1:1-Rev22:21`` (packages bible-kjv and
    bible-kjv-text): chapter headings ("Genesis 1") and numbered verses become a title line a book and one
    paragraph a chapter, the verses joined by spaces."""
    books: list[tuple[str, list[list[str]]]] = []
    for line in dump.splitlines():
        if heading := re.fullmatch(r"(\S.*) (\d+)", line):
            if heading[2] == "1":
                books.append((heading[1], []))
            books[-1][1].append([])
        elif verse := re.fullmatch(r"\s+\d+ (.*)", line):
            books[-1][1][-1].append(verse[1].strip())
    return "\n\n\n".join(name + "\n\n" + "\n\n".join(" ".join(verses) for verses in chapters)
                          for name, chapters in books) + "\n"


def split(text: str, share: float = HELD_OUT) -> tuple[str, str]:
    """(trained, held out): the text cut at the paragraph break nearest to ``1 - share`` of its length
    (at a line break where it has one paragraph)."""
    target = int(len(text) * (1 - share))
    breaks = ([i for i in range(len(text)) if text.startswith("\n\n", i)]
              or [i for i in range(len(text)) if text.startswith("\n", i)] or [target])
    cut = min(breaks, key=lambda i: abs(i - target))
    return text[:cut], text[cut:].lstrip("\n")


def tokenizer():
    """GPT-2's tokenizer, from the course's vocab.json and merges.txt (Hugging Face ``tokenizers``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.BPE.from_file(str(GPT2_TOKENIZER / "vocab.json"), str(GPT2_TOKENIZER / "merges.txt")))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([END_OF_TEXT])
    return tok


def corpus(held_out_text: str | None = None) -> dict:
    """The training text's ids and the two held-out texts, with their ids: the book's chapters as prose
    and the Bible's books, each document's last tenth held out, the trained
    parts joined by <|endoftext|>. With ``held_out_text`` (another model's ``heldout.txt``), that text is the book's
    held-out part instead of the chapters' tails, and every paragraph of it is left out of training.
    Also the sha256 of the book's and the Bible's text."""
    tok = tokenizer()
    trained, held_out, bible_held_out, digest = [], [], [], hashlib.sha256()
    kept_out = set(held_out_text.split("\n\n")) if held_out_text else set()
    for _, text in chapters():
        text = prose(text)
        digest.update(text.encode("utf-8"))
        head, tail = split(text)
        trained.append("\n\n".join(p for p in head.split("\n\n") if p not in kept_out))
        held_out.append(tail)
    for book in bible():
        digest.update(book.encode("utf-8"))
        head, tail = split(book)
        trained.append(head)
        bible_held_out.append(tail)
    held_out_text = held_out_text or END_OF_TEXT.join(held_out)
    bible_text = END_OF_TEXT.join(bible_held_out)
    return {"ids": tok.encode(END_OF_TEXT.join(trained) + END_OF_TEXT).ids,
            "held_out": tok.encode(held_out_text).ids, "held_out_text": held_out_text,
            "kjv_held_out": tok.encode(bible_text).ids, "kjv_held_out_text": bible_text, "sha256": digest.hexdigest()}


def windows(ids: np.ndarray, length: int) -> np.ndarray:
    """``ids`` cut into consecutive windows of ``length + 1`` (input and shifted target); the rest dropped."""
    count = (len(ids) - 1) // length
    return np.stack([ids[i * length : i * length + length + 1] for i in range(count)])


def learning_rate(step: int, steps: int) -> float:
    """Linear warm-up, then a cosine down to a tenth."""
    if step < WARMUP:
        return LEARNING_RATE * (step + 1) / WARMUP
    done = (step - WARMUP) / max(1, steps - WARMUP)
    return LEARNING_RATE * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * done)))


def train(out: Path, steps: int = STEPS, seed: int = 0, curve: Path | None = CURVE, sizes: dict = SIZES,
          family: str = "gpt2") -> dict:
    """Trains the model and writes the checkpoint folder ``out``; returns the run's record (also training.json)."""
    import torch
    import transformers
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()  # not its note on the config's loss_type
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    same_text = (COURSE_MODEL / "heldout.txt").read_text(encoding="utf-8") if family == "llama" else None
    text = corpus(same_text)
    ids = text["ids"]
    used = np.unique(ids)  # the text's tokens; every other token is the one shared row, index len(used)
    index = np.full(VOCABULARY, len(used), dtype=np.int64)
    index[used] = np.arange(len(used))
    ids = index[np.asarray(ids, dtype=np.int64)]
    model_class, config_class = (getattr(transformers, name) for name in FAMILIES[family][:2])
    length = sizes.get("n_positions") or sizes["max_position_embeddings"]
    held_out = windows(index[np.asarray(text["held_out"], dtype=np.int64)], length)
    kjv_held_out = windows(index[np.asarray(text["kjv_held_out"], dtype=np.int64)], length)
    shared = math.log(VOCABULARY - len(used))  # the shared row's logit stands for this many equal logits
    model = model_class(config_class(vocab_size=len(used) + 1, **sizes))
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, betas=(0.9, 0.95), weight_decay=WEIGHT_DECAY)

    def loss_of(batch: torch.Tensor) -> torch.Tensor:
        """Cross-entropy over all 50,257 tokens: the unused ones' equal logits enter the sum once, as
        the shared logit plus log(how many)."""
        logits = model(batch).logits[:, :-1]
        total = torch.cat([logits[..., :-1], logits[..., -1:] + shared], dim=-1)
        return (torch.logsumexp(total, -1) - logits.gather(-1, batch[:, 1:, None])[..., 0]).mean()

    def held_out_loss(held: np.ndarray = held_out) -> float:
        model.eval()
        with torch.no_grad():
            losses = [float(loss_of(torch.from_numpy(held[i : i + BATCH, :-1]))) * len(held[i : i + BATCH])
                      for i in range(0, len(held), BATCH)]
        model.train()
        return sum(losses) / len(held)

    def measure(step: int) -> None:
        record["held_out_loss"].append((step, round(held_out_loss(), 4)))
        record["kjv_held_out_loss"].append((step, round(held_out_loss(kjv_held_out[:KJV_CURVE_WINDOWS]), 4)))

    record = {"family": family, "sizes": sizes, "steps": steps, "batch": BATCH, "seed": seed, "learning_rate": LEARNING_RATE,
              "trained_tokens": int(len(ids)), "held_out_tokens": int(held_out.size - len(held_out)),
              "kjv_held_out_tokens": int(kjv_held_out.size - len(kjv_held_out)), "tokens_used": int(len(used)),
              "text_sha256": text["sha256"], "torch": torch.__version__, "threads": torch.get_num_threads(),
              "train_loss": [], "held_out_loss": [], "kjv_held_out_loss": []}
    started = time.perf_counter()
    columns = (TextColumn("training"), BarColumn(), MofNCompleteColumn(), TextColumn("loss {task.fields[loss]}"),
               TextColumn("held out {task.fields[held]}"), TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=False) as bar:
        task = bar.add_task("train", total=steps, loss="…", held="…")
        measure(0)
        for step in range(steps):
            starts = rng.integers(0, len(ids) - length - 1, size=BATCH)
            batch = torch.from_numpy(np.stack([ids[s : s + length] for s in starts]))
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, steps)
            loss = loss_of(batch)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            record["train_loss"].append(round(float(loss.detach()), 4))
            if (step + 1) % EVERY == 0 or step + 1 == steps:
                measure(step + 1)
                if not bar.console.is_terminal:  # no live bar in a log: a plain line instead
                    bar.console.print(f"step {step + 1}/{steps}: loss {record['train_loss'][-1]:.2f}, held out "
                                      f"{record['held_out_loss'][-1][1]:.2f} ({time.perf_counter() - started:.0f} s)")
            bar.update(task, advance=1, loss=f"{record['train_loss'][-1]:.2f}", held=f"{record['held_out_loss'][-1][1]:.2f}")
    record["seconds"] = round(time.perf_counter() - started, 1)
    record["held_out_perplexity"] = round(math.exp(record["held_out_loss"][-1][1]), 2)
    record["kjv_held_out_perplexity"] = round(math.exp(held_out_loss(kjv_held_out)), 2)  # all of it
    save(full_vocabulary(model, index, sizes, model_class, config_class), out, text, record)
    if curve:
        curve.write_text(plot(record))
    return record


def full_vocabulary(model, index: np.ndarray, sizes: dict, model_class, config_class):
    """The trained model with GPT-2's 50,257 rows: token t gets row ``index[t]``, so every unused
    token gets the shared row. Its logits are the trained model's, the shared one repeated."""
    import torch

    config = config_class(vocab_size=VOCABULARY, bos_token_id=END_OF_TEXT_ID, eos_token_id=END_OF_TEXT_ID, **sizes)
    full = model_class(config)
    state = model.state_dict()
    embedding = model.get_input_embeddings().weight
    table = embedding.detach()[torch.from_numpy(index)]
    state = {key: table if value.data_ptr() == embedding.data_ptr() else value
             for key, value in state.items()}  # the embedding, and the tied head that shares its storage
    full.load_state_dict(state)
    full.tie_weights()
    return full


def save(model, out: Path, text: dict, record: dict) -> None:
    """The checkpoint folder: config.json and model.safetensors in float16, GPT-2's tokenizer files,
    heldout.txt (the book's), heldout-kjv.txt (the Bible's) and training.json."""
    out.mkdir(parents=True, exist_ok=True)
    import torch

    model.to(torch.float16).save_pretrained(out)
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(GPT2_TOKENIZER / name, out / name)
    (out / "heldout.txt").write_text(text["held_out_text"], encoding="utf-8")
    (out / "heldout-kjv.txt").write_text(text["kjv_held_out_text"], encoding="utf-8")
    (out / "training.json").write_text(json.dumps(record, indent=1) + "\n")


def plot(record: dict) -> str:
    """The training curve as an SVG: the loss of every step, and the held-out loss."""
    width, height, pad = 640, 320, 48
    train, held, kjv = record["train_loss"], record["held_out_loss"], record["kjv_held_out_loss"]
    top = math.ceil(max(max(train), max(loss for _, loss in held + kjv)))
    sx = lambda step: pad + (width - 2 * pad) * step / len(train)  # noqa: E731
    sy = lambda loss: height - pad - (height - 2 * pad) * loss / top  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" role="img" '
           f'aria-label="Training loss of the course model" style="max-width: 100%; height: auto" '
           f'font-family="sans-serif" font-size="12" fill="currentColor">',
           f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="currentColor"/>',
           f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="currentColor"/>',
           f'<text x="{width / 2}" y="{height - 10}" text-anchor="middle">training step (batches of {record["batch"]} × '
           f'{record["sizes"].get("n_positions") or record["sizes"]["max_position_embeddings"]} tokens)</text>',
           f'<text x="14" y="{height / 2}" transform="rotate(-90 14 {height / 2})" text-anchor="middle">'
           f'cross-entropy (nats per token)</text>']
    for k in range(0, top + 1, max(1, top // 5)):
        out.append(f'<text x="{pad - 6}" y="{sy(k) + 4:.0f}" text-anchor="end">{k}</text>')
    for k in range(5):
        step = round(len(train) * k / 4)
        out.append(f'<text x="{sx(step):.0f}" y="{height - pad + 16}" text-anchor="middle">{step}</text>')
    line = " ".join(f"{sx(i + 1):.1f},{sy(loss):.1f}" for i, loss in enumerate(train))
    out.append(f'<polyline points="{line}" fill="none" stroke="#1a73e8" stroke-width="1.5"/>')
    line = " ".join(f"{sx(step):.1f},{sy(loss):.1f}" for step, loss in held)
    out.append(f'<polyline points="{line}" fill="none" stroke="#e8710a" stroke-width="2"/>')
    line = " ".join(f"{sx(step):.1f},{sy(loss):.1f}" for step, loss in kjv)
    out.append(f'<polyline points="{line}" fill="none" stroke="#188038" stroke-width="2"/>')
    out.append(f'<text x="{width - pad - 250}" y="{pad}" fill="#1a73e8">— training batches</text>')
    out.append(f'<text x="{width - pad - 250}" y="{pad + 16}" fill="#e8710a">— held-out tenth of each chapter</text>')
    out.append(f'<text x="{width - pad - 250}" y="{pad + 32}" fill="#188038">— held-out tenth of each book of the Bible</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="pixi run train", description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--family", choices=sorted(FAMILIES), default="gpt2", help="GPT-2 (Part I) or Llama (Part II)")
    p.add_argument("--out", type=Path, help="the checkpoint folder to write (default: course/gpt2-book or course/llama-book)")
    p.add_argument("--steps", type=int, default=STEPS, help="optimizer steps")
    p.add_argument("--seed", type=int, default=0, help="the seed of the initial weights and the batches")
    p.add_argument("--curve", type=Path, help="where to write the training curve (SVG; default: book/src/training.svg, "
                   "or training-llama.svg)")
    p.add_argument("--import-kjv", type=Path, metavar="DUMP", help="write course/texts/kjv.txt from this output of "
                   "Debian's `bible -l10000 Gen1:1-Rev22:21`, and train nothing")
    args = p.parse_args(argv)
    if args.import_kjv:
        KJV.write_text(kjv_from_bible_program(args.import_kjv.read_text(encoding="utf-8")), encoding="utf-8")
        print(f"wrote {KJV}")
        return 0
    _, _, sizes, out, curve = FAMILIES[args.family]
    args.out, args.curve = args.out or out, args.curve or curve
    record = train(args.out, args.steps, args.seed, args.curve, sizes, args.family)
    print(f"trained {args.steps} steps in {record['seconds']:.0f} s; held-out loss {record['held_out_loss'][-1][1]:.3f} "
          f"(perplexity {record['held_out_perplexity']:.1f}) on the book, perplexity {record['kjv_held_out_perplexity']:.1f} "
          f"on the Bible; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
