"""The course's own small GPT-2 (course/gpt2-book, ``--model course``) and Llama (course/llama-book,
``--model course-llama``, Part II): shipped, predictive, and run by the programs exactly as Hugging
Face runs them.

* each folder is a checkpoint its loader reads (step 14's, step 23's), float16, with the unused
  vocabulary in one row; the Llama's held-out text is the GPT-2's, word for word;
* each predicts: its perplexity on the held-out tenth of the book is far below a unigram model's;
* ``main --json`` gives Hugging Face's greedy tokens on each, with and without the KV cache, and
  ``--quantize q4_0`` picks each token as the q4_0-rounded Hugging Face model would;
* offline, with no ``--model``, ``main`` runs it and says so in one line;
* ``bench --model course --quantize …`` prints perplexities, float32's equal to Hugging Face's;
* ``train`` is seeded: two short runs write the same weights, and the loss goes down.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from course.outline import COURSE_LLAMA, COURSE_MODEL, ROOT
from harness import greedy_agreement
from reference import hf_greedy, rounded_logits

pytestmark = pytest.mark.programs

#: Prompts in the book's own words (the model read the book, nothing else).
PROMPTS = ["The attention", "Step 14 loads", "A token"]
NEW_TOKENS = 32
QUANTIZED_MARGIN = 0.03  # of the largest logit, as tests/test_programs.py


#: Each course model: its --model name -> its folder.
MODELS = {"course": COURSE_MODEL, "course-llama": COURSE_LLAMA}


def hf_model(name: str = "course"):
    """The course model ``name`` as Hugging Face loads it, in float32."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(MODELS[name], dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def reference():
    return hf_model("course")


@pytest.fixture(scope="module")
def tokenizer():
    from course.authoring.train import tokenizer

    return tokenizer()


def program(*args: str, env: dict | None = None, module: str = "course.programs.generate"):
    import os

    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=900, env={**os.environ, **(env or {})})


def test_the_folder_is_a_small_gpt2_checkpoint():
    """course/gpt2-book holds config.json, float16 model.safetensors, GPT-2's tokenizer files and heldout.txt;
    the tokens the book never uses share one row"""
    from safetensors import safe_open

    from course.checkpoints import find

    checkpoint = find("course")
    assert checkpoint.folder == COURSE_MODEL
    config = checkpoint.config
    assert (config["n_embd"], config["vocab_size"]) == (256, 50257), config
    with safe_open(checkpoint.weights_file, "np") as f:
        wte = f.get_tensor("transformer.wte.weight")
        dtypes = {f.get_tensor(key).dtype for key in f.keys()}
    assert dtypes == {np.dtype("float16")}, dtypes
    rows, counts = np.unique(wte, axis=0, return_counts=True)
    shared = counts.max()
    assert shared > 40_000, f"the largest group of equal wte rows has {shared} rows; expected the unused tokens"
    size = checkpoint.weights_file.stat().st_size / 2**20
    print(f"model.safetensors: {size:.1f} MiB; {len(rows)} distinct wte rows, one shared by {shared} tokens")
    for name in ("vocab.json", "merges.txt"):
        assert (COURSE_MODEL / name).read_bytes() == (ROOT / "course" / "gpt2-tokenizer" / name).read_bytes()


def test_the_llama_folder_is_a_small_llama_checkpoint():
    """course/llama-book is a Llama checkpoint step 23 reads (4 query heads sharing 2 key/value heads), float16,
    GPT-2's tokenizer files, and the GPT-2 model's held-out text word for word"""
    from safetensors import safe_open

    from course.checkpoints import find

    checkpoint = find("course-llama")
    assert checkpoint.folder == COURSE_LLAMA and checkpoint.family == "llama"
    config = checkpoint.config_of("llama")
    sizes = (config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"], config["vocab_size"])
    assert sizes == (256, 4, 2, 50257), config
    with safe_open(checkpoint.weights_file, "np") as f:
        table = f.get_tensor("model.embed_tokens.weight")
        dtypes = {f.get_tensor(key).dtype for key in f.keys()}
    assert dtypes == {np.dtype("float16")}, dtypes
    assert np.unique(table, axis=0, return_counts=True)[1].max() > 40_000
    for name in ("vocab.json", "merges.txt", "heldout.txt"):
        assert (COURSE_LLAMA / name).read_bytes() == (COURSE_MODEL / name).read_bytes(), name


@pytest.mark.parametrize("name", list(MODELS))
def test_it_predicts_the_held_out_text(tokenizer, name):
    """its perplexity on the held-out tenth of each chapter is far below a unigram model's fitted to the trained
    text, and is the one training measured (its loss over 3,900 rows and a shared one is the full model's)"""
    import torch

    from course.authoring.train import END_OF_TEXT, chapters, split, windows

    reference, folder = hf_model(name), MODELS[name]
    context = getattr(reference.config, "n_positions", None) or reference.config.max_position_embeddings
    held = np.asarray(tokenizer.encode((folder / "heldout.txt").read_text(encoding="utf-8")).ids)
    nll = []
    with torch.no_grad():
        for window in windows(held, context):
            logits = reference(torch.from_numpy(window[None, :-1])).logits[0, :-1].double()
            nll += (-torch.log_softmax(logits, -1)[torch.arange(len(window) - 2), window[1:-1]]).tolist()
    loss = float(np.mean(nll))
    trained = json.loads((folder / "training.json").read_text())["held_out_loss"][-1][1]
    assert abs(loss - trained) < 0.02, f"held-out loss {loss:.4f} here, {trained:.4f} when it was trained"
    text = tokenizer.encode(END_OF_TEXT.join(split(text)[0] for _, text in chapters())).ids
    counts, vocab = Counter(text), reference.config.vocab_size
    unigram = math.exp(-np.mean([math.log((counts[t] + 1) / (len(text) + vocab)) for t in held[1:]]))
    print(f"held-out perplexity over {len(nll)} tokens: {name} {math.exp(loss):.1f} (training measured "
          f"{math.exp(trained):.1f}), a unigram model {unigram:.1f}")
    assert math.exp(loss) < unigram / 3, f"perplexity {math.exp(loss):.1f} is not far below a unigram model's {unigram:.1f}"


@pytest.mark.parametrize("cache", ["cache", "no-cache"])
@pytest.mark.parametrize("name", list(MODELS))
def test_main_greedy_matches_hugging_face(tokenizer, name, cache):
    """`main --model course (or course-llama) --json`, greedy: Hugging Face's generate tokens, with and without
    the KV cache, offline"""
    reference = hf_model(name)
    eos = reference.config.eos_token_id
    flags = ["--no-cache"] if cache == "no-cache" else []
    for prompt in PROMPTS:
        result = program("--model", name, "--prompt", prompt, "--temperature", "0",
                         "--max-new-tokens", str(NEW_TOKENS), "--json", *flags)
        assert result.returncode == 0, result.stderr
        out = json.loads(result.stdout)
        assert out["prompt_ids"] == tokenizer.encode(prompt).ids
        expected, scores = hf_greedy(reference, out["prompt_ids"], NEW_TOKENS, eos_id=eos)
        if note := greedy_agreement(out["new_ids"], expected, scores, f"prompt {prompt!r}"):
            print(note)
        print(f"{prompt!r} → {out['text']!r}")


def test_main_quantized_picks_the_rounded_models_tokens(reference):
    """`main --model course --quantize q4_0`: every token is the q4_0-rounded Hugging Face model's choice"""
    result = program("--model", "course", "--prompt", PROMPTS[0], "--temperature", "0",
                     "--max-new-tokens", str(NEW_TOKENS), "--quantize", "q4_0", "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    ids, start = out["prompt_ids"] + out["new_ids"], len(out["prompt_ids"]) - 1
    rounded, _ = rounded_logits(reference, "q4_0", ids)
    rounded, chosen = rounded[start:-1], np.array(out["new_ids"])
    behind = rounded.max(-1) - rounded[np.arange(len(chosen)), chosen]
    margin = QUANTIZED_MARGIN * np.abs(rounded).max()
    assert behind.max() <= margin, f"token {int(behind.argmax())} is {behind.max():.3f} behind the rounded model's best"


def test_offline_main_runs_the_course_model_and_says_so(tmp_path):
    """no --model, an empty Hugging Face cache and no Hub: the course's model, named in one line, writing words
    of the book"""
    offline = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    result = program("--prompt", "The attention", "--max-new-tokens", "40", "--seed", "1", env=offline)
    assert result.returncode == 0, result.stderr
    notices = [line for line in result.stderr.splitlines() if "course's own small GPT-2" in line]
    assert len(notices) == 1 and "HF_HUB_OFFLINE" in notices[0], result.stderr
    text = result.stdout.removeprefix("The attention")
    from course.authoring.train import chapters

    book = set(re.findall(r"[A-Za-z]+", " ".join(text for _, text in chapters()).lower()))
    words = re.findall(r"[A-Za-z]+", text.lower())
    known = sum(word in book for word in words)
    print(f"{result.stdout!r}: {known} of {len(words)} words are the book's")
    assert len(words) >= 10 and known >= 0.9 * len(words), f"not the book's words: {result.stdout!r}"


def test_bench_reports_perplexities(reference):
    """`bench --model course --quantize q4_0 q4_k q6_k --json`: float32's perplexity equals Hugging Face's on the same
    tokens; each format's is close to float32's, not a broken model's"""
    result = program("--model", "course", "--rounds", "1", "--new-tokens", "4", "--eval-tokens", "192",
                     "--quantize", "q4_0", "q4_k", "q6_k", "--json", module="course.programs.bench")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    hf, fp32 = out["hf"]["perplexity"], out["cache"]["perplexity"]
    assert abs(fp32 - hf) <= 1e-3 * hf, f"float32 perplexity {fp32} vs Hugging Face's {hf} on the same tokens"
    for name in ("q4_0", "q4_k", "q6_k"):
        q = out[f"cache_{name}"]["perplexity"]
        print(f"{name}: perplexity {q:.3f} (float32 {fp32:.3f}), top-1 agreement {out[f'cache_{name}']['top1_vs_fp32']}")
        assert fp32 * 0.9 < q < fp32 * 1.5, f"{name}'s perplexity {q:.2f} is far from float32's {fp32:.2f}"


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_training_is_seeded_and_learns(tmp_path, family):
    """two short runs of `train` with one seed write the same weights; the held-out loss goes down"""
    from course.authoring.train import train

    tiny = dict(n_layer=1, n_head=2, n_embd=32, n_positions=64) if family == "gpt2" else dict(
        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, hidden_size=32, intermediate_size=96,
        max_position_embeddings=64, tie_word_embeddings=True)
    first = train(tmp_path / "a", steps=20, seed=3, curve=None, sizes=tiny, family=family)
    second = train(tmp_path / "b", steps=20, seed=3, curve=None, sizes=tiny, family=family)
    same = (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    assert same, "two runs with the same seed wrote different weights"
    start, end = first["held_out_loss"][0][1], first["held_out_loss"][-1][1]
    assert end < start - 0.5, f"held-out loss {start:.2f} -> {end:.2f} in 20 steps"
    assert second["train_loss"] == first["train_loss"]
