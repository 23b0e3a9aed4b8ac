"""The programs learners run: ``pixi run main`` / ``pixi run gpt2`` (``python -m course.programs.generate``).

Each check runs the program in its own process, as a learner would, on a small
random GPT-2 saved with ``save_pretrained`` together with a byte-level BPE trained
here (no network, no real weights needed):

* greedy ``--json`` output is token-identical to ``GPT2LMHeadModel.generate`` for
  three prompts and 32 new tokens, with the KV cache and without it; the same for a
  small random Llama (Part II) against ``LlamaForCausalLM.generate``;
* every bad input ends in one line on stderr and a non-zero exit, never a traceback;
* ``gpt2`` on unfinished steps names them and the command that checks each;
* ``--quantize`` generates, and refuses a width its format cannot block;
* ``bench --model DIR --json`` runs every path on a checkpoint folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from course.outline import ROOT, SOLUTIONS
from harness import greedy_agreement, solution
from reference import GEN, GEN_LLAMA, generation_model, hf_greedy, llama_hf_config, rounded_logits, seeded
from trained_bpe import train_byte_bpe

pytestmark = pytest.mark.programs

PROMPTS = ["Hello world", "The quick brown fox jumps", "def f(x):\n    return x * 2, 'done' # 42"]
NEW_TOKENS = 32
QUANTIZED_MARGIN = 0.03  # of the largest logit: q4_0 against its rounded weights, measured 1.1% (test_quantize)
TEXT = (
    "The quick brown fox jumps over the lazy dog. Hello world! def f(x): return x * 2\n"
    "It's a truth universally acknowledged that 1,234 tokens aren't enough. "
) * 20


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A small random GPT-2 and a byte-level BPE, saved as a Hugging Face checkpoint folder."""
    folder = tmp_path_factory.mktemp("tiny-gpt2")
    tokenizer = train_byte_bpe(folder, TEXT, vocab_size=GEN["vocab_size"])
    eos = tokenizer.token_to_id("<|endoftext|>")
    model = generation_model()
    model.config.eos_token_id = model.config.bos_token_id = eos
    model.generation_config.eos_token_id = model.generation_config.bos_token_id = eos
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def llama_checkpoint(tmp_path_factory) -> Path:
    """A small random Llama (4 query heads sharing 2 key/value heads) and a byte-level BPE, saved as a
    Hugging Face checkpoint folder."""
    from transformers import LlamaForCausalLM

    folder = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = train_byte_bpe(folder, TEXT, vocab_size=GEN["vocab_size"])
    eos = tokenizer.token_to_id("<|endoftext|>")
    config = llama_hf_config(**GEN_LLAMA)  # step 24's sizes: the same two compiled graphs as its checks
    config.eos_token_id = config.bos_token_id = eos
    model = seeded(LlamaForCausalLM(config), seed=24).eval()
    model.generation_config.eos_token_id = model.generation_config.bos_token_id = eos
    model.save_pretrained(folder)
    return folder


def program(*args: str, env: dict[str, str] | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "course.programs.generate", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})},
    )


def one_line_error(result: subprocess.CompletedProcess, *words: str) -> str:
    """Asserts a clean failure: non-zero exit, no traceback, nothing on stdout, the words on stderr."""
    err = result.stderr.strip()
    assert result.returncode != 0, f"exit 0 for a bad input; stderr: {err!r}"
    assert "Traceback" not in err, err
    assert result.stdout.strip() == "", result.stdout
    for word in words:
        assert word in err, f"{word!r} not in {err!r}"
    assert "pixi run s" not in err, f"a fault of the input is blamed on a step: {err!r}"
    return err


@pytest.mark.parametrize("cache", ["cache", "no-cache"])
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_main_json_greedy_matches_hugging_face(request, family, cache):
    """`main --json`, greedy, gives Hugging Face's generate tokens for 3 prompts × 32 tokens (GPT-2 and Llama)"""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import AutoModelForCausalLM

    checkpoint = request.getfixturevalue("checkpoint" if family == "gpt2" else "llama_checkpoint")
    reference = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    hf_tokenizer = ByteLevelBPETokenizer(str(checkpoint / "vocab.json"), str(checkpoint / "merges.txt"), add_prefix_space=False)
    hf_tokenizer.add_special_tokens(["<|endoftext|>"])
    eos = reference.config.eos_token_id
    for prompt in PROMPTS:
        flags = ["--no-cache"] if cache == "no-cache" else []
        result = program("--model", str(checkpoint), "--prompt", prompt, "--temperature", "0",
                         "--max-new-tokens", str(NEW_TOKENS), "--json", *flags)
        assert result.returncode == 0, result.stderr
        out = json.loads(result.stdout)  # one object and nothing else
        assert set(out) == {"prompt_ids", "new_ids", "text"}
        assert out["prompt_ids"] == hf_tokenizer.encode(prompt).ids, "the prompt's ids differ from Hugging Face's tokenizer"
        expected, scores = hf_greedy(reference, out["prompt_ids"], NEW_TOKENS, eos_id=eos)
        if note := greedy_agreement(out["new_ids"], expected, scores, f"prompt {prompt!r}"):
            print(note)
        assert out["text"] == hf_tokenizer.decode([t for t in out["new_ids"] if t != eos])
        assert "tok/s" in result.stderr or len(out["new_ids"]) <= 1


def test_streams_text_and_reports_speed(checkpoint):
    """without --json the prompt and its continuation stream to stdout; the speed goes to stderr"""
    result = program("--model", str(checkpoint), "--prompt", "Hello", "--max-new-tokens", "8", "--seed", "3")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Hello")
    assert "tok/s" in result.stderr and "Compiled in" in result.stderr


def _gpu_present() -> bool:
    from max.driver import accelerator_count

    return accelerator_count() > 0


BAD = {
    "empty prompt": (["--prompt", ""], ["prompt is empty"]),
    "prompt longer than the context": (["--prompt", "word " * 80], ["positions"]),
    "too many new tokens": (["--prompt", "Hello", "--max-new-tokens", "200"], ["positions", "at most"]),
    "negative temperature": (["--prompt", "Hello", "--temperature", "-1"], ["temperature"]),
    "negative top-k": (["--prompt", "Hello", "--top-k", "-3"], ["top-k"]),
    "top-p above 1": (["--prompt", "Hello", "--top-p", "1.5"], ["top-p"]),
    "k-quant on a 64-wide model": (["--prompt", "Hello", "--quantize", "q4_k"], ["multiples of 256", "n_embd is 64"]),
    # A broken terminal's bytes: Python turns them into lone surrogates, which no tokenizer can encode.
    "a prompt that is not valid text": (["--prompt", b"Hello \xff world"], ["not valid text", "character 7"]),
    # Refused from its size alone, before the tokenizer spends time on it.
    "a pasted blob far too long": (["--prompt", "x" * 100_000], ["100,000 bytes", "positions"]),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_is_one_clear_line(checkpoint, name):
    """a bad prompt or sampling setting: one line on stderr, non-zero exit, no traceback"""
    args, words = BAD[name]
    one_line_error(program("--model", str(checkpoint), *args), *words)


@pytest.fixture(scope="module")
def padded(checkpoint, tmp_path_factory) -> tuple[Path, int]:
    """The checkpoint with a smaller tokenizer, so that its last rows are padding (as nanoGPT pads 50257 to
    50304), and those rows made long enough to win the argmax; returns (folder, the tokenizer's size)."""
    from safetensors.numpy import load_file, save_file

    folder = tmp_path_factory.mktemp("padded-gpt2")
    shutil.copytree(checkpoint, folder, dirs_exist_ok=True)
    tokenizer = train_byte_bpe(folder, TEXT, vocab_size=GEN["vocab_size"] - 24)
    vocabulary = tokenizer.get_vocab_size()
    weights = load_file(folder / "model.safetensors")
    weights["transformer.wte.weight"][vocabulary:] *= 40.0
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((folder / "config.json").read_text())
    config["eos_token_id"] = config["bos_token_id"] = tokenizer.token_to_id("<|endoftext|>")
    (folder / "config.json").write_text(json.dumps(config))
    return folder, vocabulary


def test_a_padded_vocabulary_is_never_generated(padded):
    """a checkpoint whose vocabulary is padded past its tokenizer's: main never generates a padded id, says so
    once, and gives Hugging Face's greedy tokens with those ids suppressed"""
    import torch
    from transformers import GPT2LMHeadModel

    folder, vocabulary = padded
    result = program("--model", str(folder), "--prompt", "Hello world", "--temperature", "0",
                     "--max-new-tokens", "16", "--json")
    assert result.returncode == 0, result.stderr
    assert "padded rows are never generated" in result.stderr, result.stderr
    out = json.loads(result.stdout)
    reference = GPT2LMHeadModel.from_pretrained(folder).eval()
    eos = reference.config.eos_token_id
    free, _ = hf_greedy(reference, out["prompt_ids"], 16, eos_id=eos)
    assert any(t >= vocabulary for t in free), f"the padded rows never win here, a weak test: {free}"
    with torch.no_grad():
        suppressed = reference.generate(
            torch.tensor([out["prompt_ids"]]), attention_mask=torch.ones(1, len(out["prompt_ids"]), dtype=torch.long),
            max_new_tokens=16, do_sample=False, pad_token_id=eos, eos_token_id=eos,
            suppress_tokens=list(range(vocabulary, GEN["vocab_size"])),
        )[0, len(out["prompt_ids"]):].tolist()
    assert all(t < vocabulary for t in out["new_ids"]), f"main generated a padded id: {out['new_ids']}"
    assert out["new_ids"] == suppressed, f"main: {out['new_ids']}; Hugging Face, padded ids suppressed: {suppressed}"


def test_bad_checkpoints_are_one_clear_line(checkpoint, tmp_path):
    """a missing folder, a truncated safetensors file and an unknown or uncached Hub id: one clear line each"""
    one_line_error(program("--model", str(tmp_path / "nowhere"), "--prompt", "Hi"), "nowhere")
    broken = tmp_path / "broken"
    shutil.copytree(checkpoint, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    one_line_error(program("--model", str(broken), "--prompt", "Hi"), "model.safetensors")
    offline = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    one_line_error(program("--model", "gpt2", "--prompt", "Hi", env=offline), "gpt2")
    one_line_error(program("--model", "no-such-user/no-such-model", "--prompt", "Hi", env=offline), "no-such-user/no-such-model")


def test_main_quantized(checkpoint):
    """`main --quantize q4_0` generates from q4_0 weights: each token is the rounded model's choice, not float32's"""
    from transformers import GPT2LMHeadModel

    result = program("--model", str(checkpoint), "--prompt", "Hello world", "--temperature", "0",
                     "--max-new-tokens", "40", "--quantize", "q4_0", "--json")
    assert result.returncode == 0, result.stderr
    assert "weights in q4_0" in result.stderr, result.stderr
    out = json.loads(result.stdout)
    ids, start = out["prompt_ids"] + out["new_ids"], len(out["prompt_ids"]) - 1
    rounded, exact = rounded_logits(GPT2LMHeadModel.from_pretrained(checkpoint).eval(), "q4_0", ids)
    rounded, exact, chosen = rounded[start:-1], exact[start:-1], np.array(out["new_ids"])
    steps = np.arange(len(chosen))
    margin = QUANTIZED_MARGIN * np.abs(rounded).max()
    behind = rounded.max(-1) - rounded[steps, chosen]  # how far each token is behind the rounded model's best
    assert behind.max() <= margin, (
        f"token {int(behind.argmax())} of main --quantize q4_0 is {behind.max():.3f} behind the q4_0-rounded "
        f"model's best logit (tolerance {margin:.3f}): the weights are not the rounded ones")
    unlike_fp32 = exact.max(-1) - exact[steps, chosen] > margin  # tokens float32 would clearly not pick
    assert unlike_fp32.any(), ("every token of main --quantize q4_0 is float32's greedy choice: "
                               "the weights were not quantized")
    print(f"{len(chosen)} tokens: each within {behind.max():.3f} of the rounded model's best; "
          f"{int(unlike_fp32.sum())} of them float32 would not pick")


@pytest.fixture(scope="module")
def bench_run(checkpoint, tmp_path_factory) -> tuple[dict, Path]:
    """`bench --model DIR --rounds 1 --new-tokens 8 --quantize q4_0 --json --roofline FILE`, run once for the checks
    below: its JSON and the roofline's SVG."""
    svg = tmp_path_factory.mktemp("bench") / "roofline.svg"
    result = subprocess.run(
        [sys.executable, "-m", "course.programs.bench", "--model", str(checkpoint), "--rounds", "1",
         "--new-tokens", "8", "--quantize", "q4_0", "--json", "--roofline", str(svg)], cwd=ROOT, capture_output=True,
        text=True, timeout=900,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), svg


@pytest.fixture(scope="module")
def bench_json(bench_run) -> dict:
    return bench_run[0]


def test_bench_draws_the_roofline(checkpoint, bench_run):
    """`bench --roofline FILE`: one point per path at the bytes it reads a token, and the memory limit as a line"""
    import re

    from course.programs.bench import bytes_read, import_steps_config

    out, svg = bench_run
    text = svg.read_text()
    assert text.count("<circle") == len(out), text
    for path, r in out.items():
        assert f": {r['decode_tok_s']:.0f} tok/s</text>" in text, (path, text)
    bandwidth = float(re.search(r"memory limit: ([\d.]+) GB/s", text)[1])
    assert bandwidth > 0.5, text
    config = import_steps_config(str(checkpoint))
    assert bytes_read("cache_q4_0", config) / bytes_read("cache", config) == pytest.approx(4.5 / 32)


def test_roofline_labels_cover_no_point(tmp_path):
    """the roofline's labels cover neither another label nor any point, with the paths bunched as on 2026-11-26
    (the q4 formats of both engines within a few MB and tok/s of each other, q6_k beside them)"""
    import re

    from course.programs.bench import PATHS, roofline

    speeds = {"hf": 26.3, "no_cache": 15.1, "cache": 36.7, "decode": 46.0, "cache_q4_0": 189.8, "cache_q4_k": 175.2,
              "cache_q6_k": 116.2, "llama_f32": 58.3, "llama_q4_0": 231.5, "llama_q4_k": 236.9, "llama_q6_k": 171.8}
    svg = tmp_path / "roofline.svg"
    roofline({path: {"decode_tok_s": v} for path, v in speeds.items()}, svg, PATHS,
             solution(1).GPT2Config(), 25.9, 2)
    text = svg.read_text()
    points = [(float(x), float(y)) for x, y in re.findall(r'<circle cx="([\d.]+)" cy="([\d.]+)"', text)]
    labels_at = [(float(x), float(y), len(t)) for x, y, t in re.findall(r'<text x="([\d.]+)" y="([\d.]+)" font-size="10">([^<]+)<', text)]
    assert len(points) == len(labels_at) == len(speeds), text
    boxes = [(x, x + 5.2 * n, y - 10, y + 3) for x, y, n in labels_at]
    covered = [(box, point) for box in boxes for point in points
               if box[0] - 4 < point[0] < box[1] + 4 and box[2] - 4 < point[1] < box[3] + 4]
    assert not covered, f"labels over points: {covered}"
    crossing = [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:]
                if a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]]
    assert not crossing, f"labels over labels: {crossing}"


def test_bench_json_on_a_checkpoint(checkpoint, bench_json):
    """`bench --model DIR --quantize q4_0 --json`: every path timed; the float32 paths give Hugging Face's tokens"""
    out = bench_json
    paths = [path for path in out if not path.startswith("llama_")]  # llama.cpp's rows: the check below
    assert paths == ["hf", "no_cache", "cache", "decode", "kernel", "cache_q4_0", "kernel_q4_0"], out
    assert all(r["decode_tok_s"] > 0 and r["prefill_ms"] > 0 and len(r["tokens"]) == 8 for r in out.values()), out
    for path in ("no_cache", "cache", "decode", "kernel"):
        _same_tokens_as_hugging_face(out, path, checkpoint)
    quantized = out["cache_q4_0"]
    assert quantized["max_logit_err"] > 0, f"q4_0's logits equal float32's: nothing was quantized ({quantized})"
    caches = {path: r["kv_cache"] for path, r in out.items() if not path.startswith("llama_")}
    assert caches == {"hf": "float32", "no_cache": "none", "cache": "float32", "decode": "float32", "kernel": "float32",
                      "cache_q4_0": "float32", "kernel_q4_0": "float16"}, caches  # as each runner allocated it


def test_bench_on_a_llama_checkpoint(llama_checkpoint):
    """`bench --model <a Llama folder> --json`: Hugging Face and Part II's two paths timed, on Hugging Face's tokens;
    --quantize refused in one line"""
    command = [sys.executable, "-m", "course.programs.bench", "--model", str(llama_checkpoint), "--rounds", "1",
               "--new-tokens", "8"]
    result = subprocess.run([*command, "--json"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert list(out) == ["hf", "no_cache", "cache"], out
    assert all(r["decode_tok_s"] > 0 and r["prefill_ms"] > 0 and len(r["tokens"]) == 8 for r in out.values()), out
    for path in ("no_cache", "cache"):
        _same_tokens_as_hugging_face(out, path, llama_checkpoint)
    refused = subprocess.run([*command, "--quantize", "q4_0"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr, refused.stderr
    assert "--quantize runs Part I's GPT-2" in refused.stderr and "is a Llama" in refused.stderr, refused.stderr


def _same_tokens_as_hugging_face(out: dict, path: str, checkpoint: Path) -> None:
    """bench's ``path`` generated Hugging Face's greedy tokens, up to <|endoftext|> (which Hugging Face's
    generate holds back: bench sets min_new_tokens)."""
    eos = json.loads((checkpoint / "config.json").read_text())["eos_token_id"]
    ours, hf = out[path]["tokens"], out["hf"]["tokens"]
    shared = ours.index(eos) if eos in ours else len(ours)
    assert ours[:shared] == hf[:shared], f"bench's {path} path generated {ours}, Hugging Face {hf}"


def test_bench_refuses_an_unfair_gpu_race():
    """`bench --device gpu` with a PyTorch that has no CUDA: one line saying Hugging Face would run on the CPU"""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this PyTorch has CUDA, so bench --device gpu times both sides on the GPU")
    result = subprocess.run([sys.executable, "-m", "course.programs.bench", "--device", "gpu", "--rounds", "1"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    err = result.stderr.strip()
    assert result.returncode != 0 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "Hugging Face would run on the CPU" in err and "--device cpu" in err, err


def test_device_gpu_without_one(checkpoint):
    """--device gpu on a machine without a GPU: one clear line"""
    if _gpu_present():
        pytest.skip("this machine has a GPU, so --device gpu is valid here")
    one_line_error(program("--model", str(checkpoint), "--prompt", "Hi", "--device", "gpu"), "GPU")


def test_gpt2_on_unfinished_steps_names_them(tmp_path):
    """`gpt2` on the stubs names each unfinished step and its check command, with no traceback"""
    from course.authoring.render import render_all

    render_all(tmp_path)
    result = program("--target", "steps", "--steps-dir", str(tmp_path), "--prompt", "Hi")
    err = result.stderr
    assert result.returncode == 1 and "Traceback" not in err, err
    assert "step 07 (multi-head attention): TODO 1, 2, 3, 4, 5 — check it with `pixi run s07` (or `python -m course.check 7`)" in err, err


def test_a_llama_on_unfinished_steps_names_part_ii(llama_checkpoint, tmp_path):
    """`gpt2 --model <a Llama>` on the stubs names Part II's unfinished steps too; --quantize on a Llama is one line"""
    from course.authoring.render import render_all

    render_all(tmp_path)
    result = program("--target", "steps", "--steps-dir", str(tmp_path), "--model", str(llama_checkpoint), "--prompt", "Hi")
    err = result.stderr
    assert result.returncode == 1 and "Traceback" not in err and "Your Llama is not finished" in err, err
    assert "step 21 (grouped-query attention): TODO 1, 2, 3 — check it with `pixi run s21`" in err, err
    assert "step 24 (Llama generation and its KV cache): TODO 1, 2, 3, 4" in err, err
    one_line_error(program("--model", str(llama_checkpoint), "--prompt", "Hi", "--quantize", "q4_0"),
                   "--quantize runs Part I's GPT-2", "Part II runs in float32")


def test_gpt2_runs_finished_steps_only_from_steps(checkpoint, tmp_path):
    """`gpt2` on finished steps runs them from that folder alone"""
    for file in SOLUTIONS.glob("step_*.py"):
        shutil.copy(file, tmp_path / file.name)
    result = program("--target", "steps", "--steps-dir", str(tmp_path), "--model", str(checkpoint),
                     "--prompt", "Hello", "--max-new-tokens", "4", "--temperature", "0", "--json")
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)["new_ids"]) == 4
    (tmp_path / "step_13_generation.py").write_text(
        (SOLUTIONS / "step_13_generation.py").read_text().replace("return int(np.argmax(logits))", "return int(np.argmax(logits)) + undefined_name")
    )
    result = program("--target", "steps", "--steps-dir", str(tmp_path), "--model", str(checkpoint),
                     "--prompt", "Hello", "--max-new-tokens", "4", "--temperature", "0")
    err = result.stderr
    assert result.returncode != 0 and "Traceback" not in err, err
    assert "step_13_generation.py" in err and "pixi run s13" in err, err


def test_a_fault_blames_whose_code_it_is(tmp_path):
    """an error raised in solutions/ (what main runs) is the course's, never "check step 12"; the same error
    in a learner's copy of the step names the step and its check"""
    import importlib.util

    from course.programs.generate import learner_fault

    def error_from(path: Path) -> Exception:
        spec = importlib.util.spec_from_file_location(f"probe_{path.parent.name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        try:
            module.Tokenizer({}, [])  # no <|endoftext|> in the vocabulary: a KeyError inside the step's file
        except KeyError as error:
            return error
        raise AssertionError("Tokenizer({}, []) raised nothing")

    ours = learner_fault(error_from(SOLUTIONS / "step_12_tokenizer.py"), SOLUTIONS)
    assert "the course's solutions failed" in ours and "pixi run s" not in ours, ours
    shutil.copy(SOLUTIONS / "step_12_tokenizer.py", tmp_path / "step_12_tokenizer.py")
    theirs = learner_fault(error_from(tmp_path / "step_12_tokenizer.py"), tmp_path)
    assert "check step 12 with `pixi run s12` (or `python -m course.check 12`)" in theirs and "solutions failed" not in theirs, theirs


# --- llama.cpp, bench's peer (the `llama` extra) -----------------------------------------------


@pytest.mark.llama
def test_llama_cpp_on_the_same_checkpoint_gives_hugging_faces_tokens(checkpoint, tmp_path):
    """the checkpoint written as GGUF (f32) gives Hugging Face's greedy tokens in llama.cpp"""
    from course.programs import llama

    assert llama.version(), f"llama-cpp-python is not installed: {llama.INSTALL}"
    from transformers import GPT2LMHeadModel

    reference = GPT2LMHeadModel.from_pretrained(checkpoint).eval()
    eos = reference.config.eos_token_id
    gguf = llama.write_f32(checkpoint, tmp_path / "model-f32.gguf")
    for prompt in ([7, 1, 30], [11, 52, 3, 90, 17, 4, 60]):
        _, got = llama.time_generation(gguf, prompt, 24, GEN["n_positions"])
        expected, scores = hf_greedy(reference, prompt, 24, eos_id=eos)
        got = got[: got.index(eos) + 1] if eos in got else got  # llama.cpp's generate does not stop at the end token
        if note := greedy_agreement(got, expected, scores, f"llama.cpp, prompt {prompt}"):
            print(note)


@pytest.mark.llama
def test_bench_times_llama_cpp_beside_ours(checkpoint, bench_json):
    """`bench --model DIR --quantize q4_0 --json` with llama.cpp: its rows, and ours against its same format"""
    from course.programs import llama

    assert llama.version(), f"llama-cpp-python is not installed: {llama.INSTALL}"
    out = bench_json
    assert list(out) == ["hf", "no_cache", "cache", "decode", "kernel", "cache_q4_0", "kernel_q4_0", "llama_f32",
                         "llama_q4_0"], out
    for ours, peer in (("cache", "llama_f32"), ("decode", "llama_f32"), ("kernel", "llama_f32"),
                       ("cache_q4_0", "llama_q4_0"), ("kernel_q4_0", "llama_q4_0")):
        ratio = out[ours]["decode_tok_s"] / out[peer]["decode_tok_s"]
        assert abs(out[ours]["vs_llama_cpp"] - ratio) < 1e-2, (ours, out[ours], out[peer])
    for ours, peer in (("kernel", "llama_f32"), ("kernel_q4_0", "llama_q4_0")):  # like with like: the cache's type too
        assert out[ours]["kv_cache"] == out[peer]["kv_cache"], (ours, out[ours]["kv_cache"], peer, out[peer]["kv_cache"])
    _same_tokens_as_hugging_face(out, "llama_f32", checkpoint)


@pytest.mark.llama
def test_llama_cpp_quantizes_without_its_log(checkpoint, tmp_path, capfd):
    """llama.cpp's quantizer writes a line a tensor to stderr; bench keeps them out of its output, and the file
    is the format asked for"""
    import gguf

    from course.programs import llama

    f32 = llama.write_f32(checkpoint, tmp_path / "model-f32.gguf")
    capfd.readouterr()
    out = llama.quantize(f32, tmp_path / "model-q4_0.gguf", "q4_0")
    printed = capfd.readouterr()
    assert "llama_model_loader" not in printed.err + printed.out, printed.err[:300]
    types = {tensor.tensor_type.name for tensor in gguf.GGUFReader(out).tensors
             if len(tensor.shape) == 2 and tensor.name != "position_embd.weight"}  # wpe stays float32, as ours
    assert types == {"Q4_0"}, f"the quantized file's matrices are {types}"


@pytest.mark.llama
def test_llama_cpp_keeps_its_cache_in_the_type_asked(checkpoint, tmp_path):
    """llama.cpp's context keeps its keys and values in the type bench asks for: float32 beside our float32 paths"""
    import llama_cpp

    from course.programs import llama

    gguf = llama.write_f32(checkpoint, tmp_path / "model-f32.gguf")
    for cache, ggml in (("float32", llama_cpp.GGML_TYPE_F32), ("float16", llama_cpp.GGML_TYPE_F16)):
        params = llama.open_model(gguf, GEN["n_positions"], 8, cache).context_params
        assert (params.type_k, params.type_v) == (ggml, ggml), (cache, params.type_k, params.type_v)


def test_bench_without_llama_cpp_says_how_to_add_it():
    """without llama-cpp-python, bench names the extra that adds it, in one line, and runs on"""
    code = ("import sys; sys.modules['llama_cpp'] = None\n"
            "from course.programs import llama; print(llama.version()); print(llama.INSTALL)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    version, install = result.stdout.splitlines()
    assert version == "None" and 'pip install -e ".[llama]"' in install and "pixi run -e llama bench" in install, result.stdout


def test_bench_says_which_signal_killed_a_path():
    """a path's process that dies of a signal gets its name in bench's line, and llama.cpp's SIGILL (AMX
    that a virtual machine reports but faults on) the flags that rebuild it without"""
    from course.programs.bench import NO_AMX, worker_failed

    died = subprocess.run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGILL)"],
                          capture_output=True, text=True, timeout=60)
    assert died.returncode == -4, died
    llama = worker_failed("llama_q4_0", died.returncode, died.stderr)
    assert llama.startswith("bench: the llama_q4_0 process failed: it was killed by SIGILL, "), llama
    assert f'CFLAGS="{NO_AMX}" CXXFLAGS="{NO_AMX}" pip install --force-reinstall' in llama, llama
    ours = worker_failed("kernel_q6_k", died.returncode, died.stderr)
    assert ours == "bench: the kernel_q6_k process failed: it was killed by SIGILL", ours
    failed = subprocess.run([sys.executable, "-c", "import sys; sys.exit('no weights in /nowhere')"],
                            capture_output=True, text=True, timeout=60)
    said = worker_failed("cache", failed.returncode, failed.stderr)
    assert said == "bench: the cache process failed: no weights in /nowhere", said


def test_no_amx_flags_turn_off_what_march_native_turns_on():
    """bench's NO_AMX, which CI builds llama.cpp with, turns AMX off in GCC however -march=native comes after it,
    and nothing else: the macros C code tests are -march=native's less the AMX ones"""
    from course.programs.bench import NO_AMX

    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("no gcc here: llama.cpp's build needs one, and this check reads its macros")

    def macros(*flags: str) -> set[str]:
        out = subprocess.run([gcc, *flags, "-dM", "-E", "-"], input="", capture_output=True, text=True, check=True)
        return {line.split()[1] for line in out.stdout.splitlines()}

    native = macros("-march=native")
    for flags in ([*NO_AMX.split(), "-march=native"], ["-march=native", *NO_AMX.split()]):
        without = macros(*flags)
        assert not {m for m in without if "AMX" in m}, (flags, sorted(m for m in without if "AMX" in m))
        assert without == {m for m in native if "AMX" not in m}, (flags, sorted(without ^ native))


def test_kernels_without_a_mojo_compiler_say_so(monkeypatch, tmp_path):
    """course.runtime.kernels() with no `mojo` to be found: one line that names the package that brings it"""
    from course import runtime

    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no mojo
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))  # nor beside the interpreter
    runtime.kernels.cache_clear()
    try:
        with pytest.raises(runtime.NoMojoError, match=r"^no `mojo` compiler on PATH \(it comes with `pip install max`, "
                                                      r"as the package mojo-compiler\)$"):
            runtime.kernels()
    finally:
        runtime.kernels.cache_clear()
