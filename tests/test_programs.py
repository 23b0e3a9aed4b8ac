"""The programs learners run: ``pixi run main`` / ``pixi run gpt2`` (``python -m course.programs.generate``).

The checks run the program on a small random GPT-2 saved with ``save_pretrained``
together with a byte-level BPE trained here (no network, no real weights needed). Most
call its ``main`` in the test process (``program_here``: faster, and seen by mutation
testing, which follows no child process); a few start it in its own process, as a
learner would (``program``):

* greedy ``--json`` output is token-identical to ``GPT2LMHeadModel.generate`` for
  three prompts and 32 new tokens, with the KV cache and without it; the same for a
  small random Llama (Part II) against ``LlamaForCausalLM.generate``;
* every bad input ends in one line on stderr and a non-zero exit, never a traceback;
* ``gpt2`` on unfinished steps names them and the command that checks each;
* ``--quantize`` generates, and refuses a width its format cannot block;
* ``bench --model DIR --json`` runs every path on a checkpoint folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from course.outline import ROOT, SOLUTIONS
from harness import c_locale, greedy_agreement, no_mojo, solution
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


def program_here(capsys, *args: str | bytes) -> subprocess.CompletedProcess:
    """The program's ``main`` in this process, as ``program`` runs it in a new one (less the start of a new
    Python and the import of MAX): its exit status, stdout and stderr. A bytes argument reaches ``main`` as
    Python's own start makes it of bytes that are not UTF-8 (os.fsdecode: lone surrogates)."""
    from course.programs import generate

    argv = [os.fsdecode(arg) for arg in args]
    path = list(sys.path)  # main puts the folder whose steps it runs first on sys.path
    capsys.readouterr()
    try:
        code = generate.main(argv)
    finally:
        sys.path[:] = path
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(argv, code, out, err)


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
def test_main_json_greedy_matches_hugging_face(request, family, cache, capsys):
    """`main --json`, greedy, gives Hugging Face's generate tokens for 3 prompts × 32 tokens (GPT-2 and Llama)

    main runs in this process (the other checks start it anew). What it reports on stderr is checked too:
    the model it compiles, with or without the cache, and a Llama's KV cache in bytes."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import AutoModelForCausalLM

    checkpoint = request.getfixturevalue("checkpoint" if family == "gpt2" else "llama_checkpoint")
    reference = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    hf_tokenizer = ByteLevelBPETokenizer(str(checkpoint / "vocab.json"), str(checkpoint / "merges.txt"), add_prefix_space=False)
    hf_tokenizer.add_special_tokens(["<|endoftext|>"])
    eos = reference.config.eos_token_id
    for prompt in PROMPTS:
        flags = ["--no-cache"] if cache == "no-cache" else []
        result = program_here(capsys, "--model", str(checkpoint), "--prompt", prompt, "--temperature", "0",
                              "--max-new-tokens", str(NEW_TOKENS), "--json", *flags)
        assert result.returncode == 0, result.stderr
        for line in reported(reference.config, checkpoint, cache == "cache"):
            assert line in result.stderr, f"{line!r} not in {result.stderr!r}"
        out = json.loads(result.stdout)  # one object and nothing else
        assert set(out) == {"prompt_ids", "new_ids", "text"}
        assert out["prompt_ids"] == hf_tokenizer.encode(prompt).ids, "the prompt's ids differ from Hugging Face's tokenizer"
        expected, scores = hf_greedy(reference, out["prompt_ids"], NEW_TOKENS, eos_id=eos)
        if note := greedy_agreement(out["new_ids"], expected, scores, f"prompt {prompt!r}"):
            print(note)
        assert out["text"] == hf_tokenizer.decode([t for t in out["new_ids"] if t != eos])
        assert "tok/s" in result.stderr or len(out["new_ids"]) <= 1


def reported(hf_config, checkpoint: Path, cached: bool, kind: str = "") -> list[str]:
    """The lines main writes to stderr before it generates: what it loads and compiles, and a Llama's cache."""
    from safetensors.numpy import load_file

    llama = hf_config.model_type == "llama"
    layers = hf_config.num_hidden_layers if llama else hf_config.n_layer
    millions = sum(value.size for value in load_file(checkpoint / "model.safetensors").values()) / 1e6
    if cached and not llama and not kind and not no_mojo():  # GPT-2 in float32: step 16's kernels
        from course.runtime import usable_cpus

        cpus = usable_cpus()
        kind = f", step 16's decode graph and Mojo kernels on {cpus} CPU{'s' if cpus > 1 else ''}"
    kind = ("with a KV cache" if cached else "without a cache") + kind
    lines = [f"Loading {checkpoint} …", f"Compiling {'Llama' if llama else 'GPT-2'} ({layers} layers, {millions:.0f}M "
             "parameters, " f"{kind}) with MAX: the first run on a machine takes a few minutes (MAX compiles and "
             "caches it); later runs take seconds …", f"s ({kind})."]
    if llama and cached:
        heads, groups = hf_config.num_attention_heads, hf_config.num_key_value_heads
        per_token = 2 * layers * groups * (hf_config.hidden_size // heads) * 4  # a key and a value, float32
        context = hf_config.max_position_embeddings
        lines.append(f"KV cache: {per_token / 1024:.1f} KiB a token, {per_token * context / 2**20:.1f} MiB at {context} "
                     f"tokens ({groups} key/value heads for {heads} query heads; one per query head would take "
                     f"{per_token * heads / groups / 1024:.1f} KiB a token).")
    return lines


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
    "negative new tokens": (["--prompt", "Hello", "--max-new-tokens", "-1"], ["--max-new-tokens must be 0 or more, got -1"]),
    "negative top-k": (["--prompt", "Hello", "--top-k", "-3"], ["top-k"]),
    "top-p above 1": (["--prompt", "Hello", "--top-p", "1.5"], ["top-p"]),
    "k-quant on a 64-wide model": (["--prompt", "Hello", "--quantize", "q4_k"], ["multiples of 256", "n_embd is 64"]),
    # A broken terminal's bytes: Python turns them into lone surrogates, which no tokenizer can encode.
    "a prompt that is not valid text": (["--prompt", b"Hello \xff world"], ["not valid text", "character 7 is '\\udcff'"]),
    # Refused from its size alone, before the tokenizer spends time on it.
    "a pasted blob far too long": (["--prompt", "x" * 100_000], ["100,000 bytes", "positions"]),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_is_one_clear_line(checkpoint, name, capsys):
    """a bad prompt or sampling setting: one line on stderr, non-zero exit, no traceback

    main runs in this process: each input is refused before anything compiles. The other checks of the
    program's messages run it in a process of its own."""
    args, words = BAD[name]
    result = program_here(capsys, "--model", str(checkpoint), *args)
    one_line_error(result, *words)
    assert result.returncode == 2, f"exit status {result.returncode}, not 2 (a fault of the input)"
    assert "Compiling" not in result.stderr, f"a bad input was refused only after compiling: {result.stderr!r}"


@pytest.mark.parametrize("family, cache", [("gpt2", "cache"), ("gpt2", "no-cache"), ("llama", "cache")])
def test_the_streamed_text_is_the_whole_text(request, family, cache, capsys):
    """without --json, stdout is the prompt, the text --json gives for the same tokens, and a newline

    stderr reports what main loads and compiles, a Llama's KV cache in bytes, and the speed of the tokens."""
    from transformers import AutoConfig

    checkpoint = request.getfixturevalue("checkpoint" if family == "gpt2" else "llama_checkpoint")
    asked = ["--model", str(checkpoint), "--prompt", "Hello", "--max-new-tokens", "12", "--temperature", "0",
             *(["--no-cache"] if cache == "no-cache" else [])]
    streamed = program_here(capsys, *asked)
    assert streamed.returncode == 0, streamed.stderr
    result = program_here(capsys, *asked, "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert result.stdout == json.dumps(out, ensure_ascii=False) + "\n", result.stdout  # one line, the text as it is
    assert streamed.stdout == "Hello" + out["text"] + "\n", (streamed.stdout, out["text"])
    count = len(out["new_ids"])
    assert 1 < count <= 12, f"{count} tokens: too few to report a speed (an <|endoftext|> early?), a weak test"
    lines = [*reported(AutoConfig.from_pretrained(checkpoint), checkpoint, cache == "cache"),
             f"{count} tokens; first token (prefill) ", " tok/s"]
    for line in lines:
        assert line in streamed.stderr, f"{line!r} not in {streamed.stderr!r}"
    assert "padded rows" not in streamed.stderr, streamed.stderr


#: Characters of two to four UTF-8 bytes, which GPT-2's byte-level tokens split.
UNICODE = "Café au lait ☕, naïve 😀 über-straße — done"


def test_a_character_split_across_tokens_waits_for_its_last_byte():
    """a character split across tokens is written when its last byte comes, never as U+FFFD

    Each token's text is written as it comes, except that a character whose UTF-8 bytes are split
    across tokens waits for its last one: what is written adds up to the text."""
    from course.outline import GPT2_TOKENIZER
    from course.programs.generate import stream

    tokenizer = solution(12).Tokenizer.from_dir(GPT2_TOKENIZER)
    ids = tokenizer.encode(UNICODE)
    inside = [n for n in range(1, len(ids)) if tokenizer.decode(ids[:n]).endswith("\ufffd")]
    assert inside, f"no token of {UNICODE!r} ends inside a character: a weak test"
    pieces, new, times = [], [], []
    stream(iter(ids), tokenizer.decode, pieces.append, new, times)
    assert "".join(pieces) == UNICODE, pieces
    assert not [piece for piece in pieces if "\ufffd" in piece], f"a piece shows U+FFFD: {pieces}"
    # a piece for each token that ends a character, then the last (empty) one
    assert len(pieces) == len(ids) - len(inside) + 1 and pieces[-1] == "", (len(ids), len(inside), pieces)
    assert new == ids and len(times) == len(ids) and times == sorted(times), (new, times)
    cut, pieces = ids[: inside[-1]], []
    stream(iter(cut), tokenizer.decode, pieces.append, [], [])
    assert "".join(pieces) == tokenizer.decode(cut) and pieces[-1].endswith("\ufffd"), \
        f"the tokens end inside a character, and what is written must end as their text does: {pieces}"


def test_kib_keeps_a_small_caches_fraction():
    """kib: one decimal below 10 KiB, whole KiB from there on"""
    from course.programs.generate import kib

    cases = {512: "0.5", 1076: "1.1", 10 * 1024 - 1: "10.0", 10 * 1024: "10", 46_080: "45", 46_592: "46"}
    got = {size: kib(size) for size in cases}
    assert got == cases, got


def test_main_compiles_what_was_asked(request, capsys, tmp_path):
    """the Generator compiles the road asked for, on the device picked: GPT-2 on step 16's decode graph with the Mojo
    kernels (the prefill graph left for a long prompt), step 15's cache where a learner's step 16 is unfinished,
    step 13's graph with --no-cache (a Llama: step 24's cache); and reports a compile time no longer than it took"""
    import time

    from course.authoring.render import render_all
    from course.programs import generate

    render_all(tmp_path)  # a learner's folder: every step finished but step 16
    for file in SOLUTIONS.glob("step_*.py"):
        if file.name != "step_16_memory_limit.py":
            shutil.copy(file, tmp_path / file.name)
    kernel = None if no_mojo() else (16, "DecodeNextLogits")
    for family, flags, road in (("gpt2", [], kernel or (15, "CachedNextLogits")),
                                ("llama", [], (24, "CachedLlamaNextLogits")), ("gpt2", ["--no-cache"], None),
                                ("gpt2", ["--target", "steps", "--steps-dir", str(tmp_path)], (15, "CachedNextLogits"))):
        checkpoint = request.getfixturevalue("checkpoint" if family == "gpt2" else "llama_checkpoint")
        args = generate.parser("main").parse_args(["--model", str(checkpoint), *flags])
        with no_step_modules():  # each road's steps from its own folder
            steps = generate.import_steps(args.target, args.steps_dir, generate.steps_to_run(args, family), family)
        generator = generate.Generator(args, steps, *([family] if family != "gpt2" else []))  # GPT-2: the default
        device = generator.device
        started = time.perf_counter()
        generator.compile()
        took = time.perf_counter() - started
        runner = generator.next_logits
        named = f"{family} {' '.join(flags)} compiled {type(runner).__name__}"
        if road is None:
            assert 15 not in steps and not hasattr(runner, "reset"), named  # no cache to reset: step 13's graph
        else:
            assert type(runner) is getattr(steps[road[0]], road[1]), named
            assert runner.device is device, f"compiled for {runner.device}, not the device picked ({device})"
        if road == kernel:
            assert type(runner.model) is steps[16].KernelGPT2LMHeadModel, f"{named} of {type(runner.model).__name__}"
            assert runner.prefill_from == generate.PREFILL_FROM, f"{named}: prefill_from {runner.prefill_from}"
            assert runner.decode is not None and runner.run is None, (
                f"{named}: the decode graph {'not ' * (runner.decode is None)}compiled, the prefill graph "
                f"{'not ' * (runner.run is None)}compiled (expected the first only)")
        said = capsys.readouterr().err.split("Compiled in ")[1]
        assert float(said.split(" s ")[0]) <= took + 0.05, f"{said!r}: it took {took:.2f} s"


def test_a_long_prompt_compiles_the_prefill_graph_once(checkpoint, capsys, monkeypatch):
    """main on step 16's kernels: a prompt of PREFILL_FROM tokens or more compiles step 15's prefill graph, saying so,
    and generates the tokens that the decode graph alone gives the same prompt (main in this process)"""
    from course.programs import generate

    if why := no_mojo():
        pytest.skip(f"{why}: main runs step 15's graph, and no prefill graph of step 16's")
    asked = ["--model", str(checkpoint), "--prompt", PROMPTS[1], "--temperature", "0", "--max-new-tokens", "8", "--json"]
    alone = program_here(capsys, *asked)
    assert alone.returncode == 0, alone.stderr
    size = len(json.loads(alone.stdout)["prompt_ids"])
    monkeypatch.setattr(generate, "PREFILL_FROM", size)  # the prompt is exactly that long
    prefilled = program_here(capsys, *asked)
    line = f"Compiling step 15's prefill graph, for prompts of {size} tokens or more (once) …"
    assert prefilled.returncode == 0, prefilled.stderr
    assert "prefill graph" not in alone.stderr and line in prefilled.stderr, (alone.stderr, prefilled.stderr)
    assert json.loads(prefilled.stdout) == json.loads(alone.stdout), (prefilled.stdout, alone.stdout)


def test_the_kernels_road_falls_back_to_step_15_saying_why(checkpoint, tmp_path, capsys, monkeypatch):
    """GPT-2 takes step 16's kernels only on the CPU, in float32, with the cache, and step 16 finished; where the
    kernels cannot compile, one dim line says so and step 15's graph runs"""
    from course import runtime
    from course.authoring.render import render_all
    from course.programs import generate

    render_all(tmp_path)
    on = ["--model", str(checkpoint)]
    mojo = no_mojo() is None
    for flags, family, expected in (([], "gpt2", mojo), ([], "llama", False), (["--no-cache"], "gpt2", False),
                                    (["--quantize", "q4_0"], "gpt2", False), (["--device", "gpu"], "gpt2", False),
                                    (["--target", "steps", "--steps-dir", str(tmp_path)], "gpt2", False)):
        args = generate.parser("main").parse_args([*on, *flags])
        assert generate.kernel_road(args, family) is expected, f"{family} {flags}: expected {expected}"
    shutil.copy(SOLUTIONS / "step_16_memory_limit.py", tmp_path)  # a learner's finished step 16
    args = generate.parser("gpt2").parse_args([*on, "--target", "steps", "--steps-dir", str(tmp_path)])
    assert generate.kernel_road(args, "gpt2") is mojo, "a finished step 16 in steps/ (the rest stubs) is not taken"

    def broken():
        raise runtime.KernelError("mojo: kernels.mojo:3: error: boom")

    monkeypatch.setattr(runtime, "kernels", broken)
    capsys.readouterr()
    assert generate.kernel_road(generate.parser("main").parse_args(on), "gpt2") is False
    assert capsys.readouterr().err.strip() == ("mojo: kernels.mojo:3: error: boom: step 15's graph runs instead of "
                                              "step 16's kernels.")


#: A compile error as MAX writes one: the op, then the reason after "Diagnostics:".
NOT_COMPILED = "Failed to compile the custom op 'course_attention':\nDiagnostics:\nunsupported target"


def test_a_decode_graph_that_does_not_compile_falls_back_to_step_15(checkpoint, tmp_path, capsys, fresh_steps,
                                                                   monkeypatch):
    """on step 16's kernels, a decode graph that does not compile (the kernels on a system the course has not run
    on) is one dim line with MAX's reason, and step 15's cached graph generates the same tokens; main asks for a
    report, a learner's finished step 16 for its check"""
    from course.programs import generate

    if why := no_mojo():
        pytest.skip(f"{why}: main runs step 15's graph, and no decode graph of step 16's")
    asked = ["--prompt", "Hello", "--temperature", "0", "--max-new-tokens", "6", "--json"]
    kernels = program_here(capsys, "--model", str(checkpoint), *asked)
    assert kernels.returncode == 0 and "decode graph did not compile" not in kernels.stderr, kernels.stderr
    for file in SOLUTIONS.glob("step_*.py"):
        shutil.copy(file, tmp_path / file.name)
    step_16 = tmp_path / "step_16_memory_limit.py"  # a learner's finished step 16, whose decode graph does not compile
    step_16.write_text(step_16.read_text() + f"\n\ndef _broken(self):\n    raise ValueError({NOT_COMPILED!r})\n\n\n"
                       "DecodeNextLogits.decode_graph = _broken\n")
    reason = "ValueError: Failed to compile the custom op 'course_attention': unsupported target"

    def broken(self):
        raise ValueError(NOT_COMPILED)

    for target, who in (([], "please report it to the course's maintainers"),
                        (["--target", "steps", "--steps-dir", str(tmp_path)],
                         "check step 16 with `pixi run s16` (or `python -m course.check 16`)")):
        with no_step_modules():
            if not target:  # main's own step 16 (the solution's, which main's import finds in sys.modules), broken
                import step_16_memory_limit

                monkeypatch.setattr(step_16_memory_limit.DecodeNextLogits, "decode_graph", broken)
            fell = program_here(capsys, "--model", str(checkpoint), *target, *asked)
        assert fell.returncode == 0, fell.stderr
        lines = fell.stderr.splitlines()
        line = f"step 16's decode graph did not compile ({reason}): step 15's graph runs instead; {who}."
        after = lines[lines.index(line) + 1] if line in lines else ""
        assert re.fullmatch(r"Compiled in \d+\.\d s \(with a KV cache\)\.", after), (
            f"{line!r} then 'Compiled in … (with a KV cache).' not in:\n{fell.stderr}")
        assert json.loads(fell.stdout) == json.loads(kernels.stdout), (fell.stdout, kernels.stdout)
    with no_step_modules():  # what runs instead: step 15's cached graph, not step 13's uncached one
        import step_16_memory_limit

        monkeypatch.setattr(step_16_memory_limit.DecodeNextLogits, "decode_graph", broken)
        args = generate.parser("main").parse_args(["--model", str(checkpoint)])
        generator = generate.Generator(args, generate.import_steps(args.target, args.steps_dir,
                                                                   generate.steps_to_run(args, "gpt2")))
        generator.compile()
    assert type(generator.runner).__name__ == "CachedNextLogits" and 16 not in generator.steps, generator.runner


def test_interactive_prompts(checkpoint, capsys, monkeypatch):
    """without --prompt, main reads prompts until an empty line: each one's text streams (one JSON object a
    prompt with --json), and a bad one is one line, after which the next is read"""
    answers, asked = iter(["Hello", "x" * 100_000, "world", ""]), []
    monkeypatch.setattr("builtins.input", lambda prompt: asked.append(prompt) or next(answers))
    result = program_here(capsys, "--model", str(checkpoint), "--max-new-tokens", "4", "--temperature", "0", "--json")
    assert result.returncode == 0, result.stderr
    assert asked == ["prompt> "] * 4, asked
    assert "Type a prompt and press Enter (an empty line or Ctrl-D quits)." in result.stderr.splitlines(), result.stderr
    assert "the prompt is 100,000 bytes" in result.stderr, result.stderr
    outs = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(outs) == 2 and all(len(out["new_ids"]) <= 4 for out in outs), result.stdout
    assert result.stdout == "".join(json.dumps(out, ensure_ascii=False) + "\n" for out in outs), result.stdout
    assert any(not out["text"].isascii() for out in outs), f"no text beyond ASCII to print as it is, a weak test: {outs}"
    answers = iter(["Hello"])  # then Ctrl-D: input raises EOFError

    def typed(prompt):
        try:
            return next(answers)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr("builtins.input", typed)
    streamed = program_here(capsys, "--model", str(checkpoint), "--max-new-tokens", "4", "--temperature", "0")
    assert streamed.returncode == 0 and streamed.stdout.startswith("Hello"), streamed
    assert streamed.stdout == "Hello" + outs[0]["text"] + "\n", (streamed.stdout, outs[0])


def test_no_new_tokens_and_the_default_model(checkpoint, capsys, monkeypatch):
    """--max-new-tokens 0 prints the prompt alone; without --model, main runs the model default_model gives
    and prints its notice"""
    from course.programs import generate

    result = program_here(capsys, "--model", str(checkpoint), "--prompt", "Hello", "--max-new-tokens", "0")
    assert result.returncode == 0 and result.stdout == "Hello\n", result
    monkeypatch.setattr(generate, "default_model", lambda: (str(checkpoint), "the Hub does not answer: a notice"))
    result = program_here(capsys, "--prompt", "Hello", "--max-new-tokens", "2", "--temperature", "0", "--json")
    assert result.returncode == 0 and f"Loading {checkpoint} …" in result.stderr, result.stderr
    assert "the Hub does not answer: a notice" in result.stderr, result.stderr


def test_help_names_every_flag(capsys):
    """--help: the program's name and purpose, and each flag with its help (and --target's two choices)"""
    from course.programs import generate

    with pytest.raises(SystemExit) as stopped:
        generate.main(["--help"], prog="gpt2")
    assert stopped.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the help to the terminal's width
    for words in ("usage: gpt2 ", "Generate text with the course's GPT-2.", "--target {solutions,steps}",
                  "whose code runs (main: solutions, gpt2: steps)", "the learner's folder for --target steps",
                  "a Hugging Face Hub id (gpt2,", "the text to continue", "how many tokens to add at most (default 50)",
                  "0 is greedy; higher is more random (default 0.8)", "sample among the k most likely tokens",
                  "sample among the most likely tokens that make up p", "the random seed", "where MAX runs the model",
                  "rerun the whole sequence for every token", "store the weights in a GGUF block format",
                  'print one object: {"prompt_ids", "new_ids", "text"}', "--device {cpu,gpu}",
                  "--quantize {q4_0,q4_k,q6_k}"):
        assert words in out, f"{words!r} not in --help: {out!r}"
    # what a run without the flags does is what --help says, and each choice --help shows is taken
    args = generate.parser("gpt2").parse_args(["--target", "solutions", "--device", "cpu"])
    for flag, value in (("--max-new-tokens", args.max_new_tokens), ("--temperature", args.temperature),
                        ("--top-k", args.top_k)):
        help_text = out.split(flag, 2)[-1]  # after the usage line, the flag's own entry
        assert f"(default {value})" in help_text.split(" --")[0], f"{flag}: the default is {value}: {help_text[:120]!r}"
    assert args.top_p == 1 and args.seed is None and args.device == "cpu", args
    generate.parser("gpt2").parse_args(["--target", "steps", "--device", "gpu"])


def test_quantize_on_a_gpu_is_refused(checkpoint, capsys, monkeypatch):
    """--quantize with a GPU picked: one line saying MAX's quantized kernels run on the CPU only, before any
    compile (the GPU is played by a stand-in: this machine may have none)"""
    from types import SimpleNamespace

    from course.programs import generate

    monkeypatch.setattr(generate, "pick_device", lambda name: SimpleNamespace(label="gpu"))
    result = program_here(capsys, "--model", str(checkpoint), "--prompt", "Hi", "--quantize", "q4_0")
    one_line_error(result, "--quantize q4_0: MAX 26.7's q4_0 / q4_k / q6_k matmul kernels run on the CPU only")
    assert "Compiling" not in result.stderr, result.stderr


def test_report_speed():
    """the speed line: the first token's wait in ms, then the rest's rate; nothing without tokens"""
    from course.programs import generate

    from rich.console import Console

    console = Console(width=200)
    with console.capture() as captured:
        for times in ([11.0, 11.25, 11.5], [11.0, 11.5], [11.0], []):  # each token's time; started at 10 s
            generate.err, kept = console, generate.err
            try:
                generate.report_speed(10.0, times)
            finally:
                generate.err = kept
    lines = captured.get().splitlines()
    assert lines == ["3 tokens; first token (prefill) 1000 ms, then 4.0 tok/s",
                     "2 tokens; first token (prefill) 1000 ms, then 2.0 tok/s",
                     "1 tokens; first token (prefill) 1000 ms"], lines


@pytest.fixture(scope="module")
def ends_at_once(checkpoint, tmp_path_factory) -> tuple[Path, int]:
    """The checkpoint made to pick <|endoftext|> every time: the final layer norm gives its bias alone, which is
    that token's row of the (tied) head, made long: (folder, its id)."""
    from safetensors.numpy import load_file, save_file

    folder = tmp_path_factory.mktemp("eos-gpt2")
    shutil.copytree(checkpoint, folder, dirs_exist_ok=True)
    eos = json.loads((folder / "config.json").read_text())["eos_token_id"]
    weights = load_file(folder / "model.safetensors")
    weights["transformer.ln_f.weight"][:] = 0.0
    weights["transformer.ln_f.bias"][:] = weights["transformer.wte.weight"][eos]
    weights["transformer.wte.weight"][eos] *= 40.0
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder, eos


def test_an_end_of_text_ends_the_text(ends_at_once, capsys):
    """a model that picks <|endoftext|> stops there, and the token is not in the text, streamed or --json"""
    folder, eos = ends_at_once
    asked = ["--model", str(folder), "--prompt", "Hello", "--max-new-tokens", "8"]
    out = json.loads(program_here(capsys, *asked, "--temperature", "0", "--json").stdout)
    assert out["new_ids"] == [eos] and out["text"] == "", out
    streamed = program_here(capsys, *asked, "--seed", "1")
    assert streamed.returncode == 0 and streamed.stdout == "Hello\n", streamed


def test_the_sampling_settings_reach_the_sampler(checkpoint, capsys):
    """--top-k 1 and a tiny --top-p leave only the likeliest token, whatever the temperature (greedy's tokens);
    a --seed gives the same tokens again, and another seed others"""
    def ids(*flags):
        result = program_here(capsys, "--model", str(checkpoint), "--prompt", "Hello", "--max-new-tokens", "12",
                              "--json", *flags)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)["new_ids"]

    greedy = ids("--temperature", "0")
    for flags in (["--top-k", "1"], ["--top-k", "0", "--top-p", "1e-6"]):
        assert ids("--temperature", "1.5", "--seed", "3", *flags) == greedy, f"{flags} did not give greedy's tokens"
    seeded_ids = ids("--temperature", "1.5", "--top-k", "0", "--seed", "7")
    assert ids("--temperature", "1.5", "--top-k", "0", "--seed", "7") == seeded_ids, "--seed 7 twice: other tokens"
    assert ids("--temperature", "1.5", "--top-k", "0", "--seed", "8") != seeded_ids, "--seed 8 gave --seed 7's tokens"


def test_padded_rows_are_never_drawn():
    """only_tokens_below: the logits from the vocabulary's size on are -inf, the others the model's

    The model's own array is left as it was (it may be read-only)."""
    from course.programs.generate import only_tokens_below

    logits, seen = np.linspace(-1, 1, 8, dtype=np.float32), []
    logits.flags.writeable = False

    def model(ids):
        seen.append(ids)
        return logits

    got = only_tokens_below(5, model)([3, 1])
    assert seen == [[3, 1]], seen
    np.testing.assert_array_equal(got[:5], logits[:5])
    assert np.all(got[5:] == -np.inf), got


def test_a_prompts_size_is_refused_from_its_bytes():
    """check_text refuses a prompt longer in bytes than the longest token times the positions

    The refusal names the size; a prompt that just fits passes; without a longest token, only the
    prompt's encoding is checked."""
    from course.programs.generate import Stop, check_text

    check_text("é" * 16, 4, 8)  # 32 bytes: 8 tokens of 4 bytes could hold it
    with pytest.raises(Stop) as refused:
        check_text("é" * 16 + "x", 4, 8)
    assert "the prompt is 33 bytes: even in tokens of 4 bytes" in str(refused.value), refused.value
    assert "more than the 8 positions" in str(refused.value), refused.value
    check_text("x" * 100_000, None, 8)


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


def test_a_padded_vocabulary_is_never_generated(padded, capsys):
    """a checkpoint whose vocabulary is padded past its tokenizer's: main never generates a padded id, says so
    once, and gives Hugging Face's greedy tokens with those ids suppressed"""
    import torch
    from transformers import GPT2LMHeadModel

    folder, vocabulary = padded
    result = program_here(capsys, "--model", str(folder), "--prompt", "Hello world", "--temperature", "0",
                          "--max-new-tokens", "16", "--json")
    assert result.returncode == 0, result.stderr
    says = (f"The model scores {GEN['vocab_size']} tokens and its tokenizer has {vocabulary}: the "
            f"{GEN['vocab_size'] - vocabulary} padded rows are never generated.")
    assert says in result.stderr, result.stderr
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


def test_bad_checkpoints_are_one_clear_line(checkpoint, tmp_path, capsys):
    """a missing folder, a truncated safetensors file and an unknown or uncached Hub id: one clear line each

    The first two in this process, the Hub's in a process of their own (huggingface_hub reads
    HF_HUB_OFFLINE when it is imported)."""
    one_line_error(program_here(capsys, "--model", str(tmp_path / "nowhere"), "--prompt", "Hi"),
                   f"there is no folder {tmp_path / 'nowhere'}; pass a folder that holds config.json")
    broken = tmp_path / "broken"
    shutil.copytree(checkpoint, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    one_line_error(program_here(capsys, "--model", str(broken), "--prompt", "Hi"), f"{weights}")
    offline = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    one_line_error(program("--model", "gpt2", "--prompt", "Hi", env=offline), "gpt2")
    one_line_error(program("--model", "no-such-user/no-such-model", "--prompt", "Hi", env=offline), "no-such-user/no-such-model")


def test_main_quantized(checkpoint, capsys):
    """`main --quantize q4_0` generates from q4_0 weights: each token is the rounded model's choice, not float32's"""
    from transformers import GPT2LMHeadModel

    result = program_here(capsys, "--model", str(checkpoint), "--prompt", "Hello world", "--temperature", "0",
                          "--max-new-tokens", "40", "--quantize", "q4_0", "--json")
    assert result.returncode == 0, result.stderr
    reference = GPT2LMHeadModel.from_pretrained(checkpoint).eval()
    for line in reported(reference.config, checkpoint, True, ", weights in q4_0"):
        assert line in result.stderr, f"{line!r} not in {result.stderr!r}"
    out = json.loads(result.stdout)
    ids, start = out["prompt_ids"] + out["new_ids"], len(out["prompt_ids"]) - 1
    rounded, exact = rounded_logits(reference, "q4_0", ids)
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

    from course.programs.bench import PATHS, bytes_read, import_steps_config

    out, svg = bench_run
    text = svg.read_text()
    assert text.count("<circle") == len(out), text
    # each label is its path's speed to a whole tok/s, and the JSON's is rounded to 0.01: 1871.497 is drawn "1871"
    # and printed 1871.5, which rounds to 1872 (a CI run failed on an exact match there). Allowed: the two roundings.
    drawn = {label: float(v) for label, v in re.findall(r">([^<>]+): ([\d.]+) tok/s</text>", text)}
    assert set(drawn) == {PATHS[path] for path in out}, (sorted(drawn), text)  # GPT-2's paths: the roofline's only
    gaps = {path: abs(drawn[PATHS[path]] - r["decode_tok_s"]) for path, r in out.items()}
    worst = max(gaps, key=gaps.get)
    assert gaps[worst] <= 0.5 + 0.005, \
        f"{worst}: drawn at {drawn[PATHS[worst]]:.0f} tok/s, measured {out[worst]['decode_tok_s']}"
    bandwidth = float(re.search(r"memory limit: ([\d.]+) GB/s", text)[1])
    assert bandwidth > 0.5, text
    config = import_steps_config(str(checkpoint))
    assert bytes_read("cache_q4_0", config) / bytes_read("cache", config) == pytest.approx(4.5 / 32)


def test_roofline_labels_cover_no_point(tmp_path):
    """the roofline's labels cover neither another label nor any point, with the paths bunched as on 2026-11-26
    (the q4 formats of both engines within a few MB and tok/s of each other, q6_k beside them)"""
    import re

    from course.programs.bench import CHAR_WIDTH, PATHS, roofline

    speeds = {"hf": 26.3, "no_cache": 15.1, "cache": 36.7, "decode": 46.0, "cache_q4_0": 189.8, "cache_q4_k": 175.2,
              "cache_q6_k": 116.2, "llama_f32": 58.3, "llama_q4_0": 231.5, "llama_q4_k": 236.9, "llama_q6_k": 171.8}
    svg = tmp_path / "roofline.svg"
    roofline({path: {"decode_tok_s": v} for path, v in speeds.items()}, svg, PATHS,
             solution(1).GPT2Config(), 25.9, 2)
    text = svg.read_text()
    points = [(float(x), float(y)) for x, y in re.findall(r'<circle cx="([\d.]+)" cy="([\d.]+)"', text)]
    labels_at = [(float(x), float(y), len(t)) for x, y, t in re.findall(r'<text x="([\d.]+)" y="([\d.]+)" font-size="10">([^<]+)<', text)]
    assert len(points) == len(labels_at) == len(speeds), text
    boxes = [(x, x + CHAR_WIDTH * 10 * n, y - 10, y + 3) for x, y, n in labels_at]  # font-size 10
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


def devices_of(runner) -> set[str]:
    """The devices of every compiled MAX model a runner holds (its attributes, and lists of them), by label."""
    from max.engine import Model

    held = [value for value in vars(runner).values()]
    held += [item for value in held if isinstance(value, (list, tuple)) for item in value]
    held += [getattr(value, "engine_model", None) for value in held]
    return {device.label for model in held if isinstance(model, Model) for device in model.input_devices}


@pytest.mark.gpu
@pytest.mark.parametrize("family, road", [("gpt2", "no-cache"), ("gpt2", "cache"), ("gpt2", "decode"),
                                          ("llama", "no-cache"), ("llama", "cache")])
def test_every_road_runs_on_the_gpu_it_is_given(request, family, road):
    """on a machine with a GPU, each road to a compiled model (step 13's graph, step 15's cache, step 16's decode
    graph; a Llama's step 13 and step 24) builds its graphs on the GPU it is handed, cache included, and its greedy
    tokens are Hugging Face's for 3 prompts x 32 tokens: the check that sees a device left to MAX's default
    (mutation_targets.UNTESTED)"""
    from max.driver import Accelerator
    from transformers import AutoModelForCausalLM

    from course.programs import build
    from course.programs.generate import import_steps

    checkpoint = request.getfixturevalue("checkpoint" if family == "gpt2" else "llama_checkpoint")
    needed, cache_step = build.NEEDED[family]
    steps = import_steps("solutions", SOLUTIONS, [*needed, cache_step, *([16] if road == "decode" else [])], family)
    reference = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    runner = build.compile_model(steps, build.load(steps, str(checkpoint), family), Accelerator(),
                                 cached=road != "no-cache", decode=road == "decode")
    assert devices_of(runner) == {"gpu"}, f"{family} ({road}): graphs on {devices_of(runner)}, not the GPU alone"
    rng = np.random.default_rng(13)
    for prompt in ([int(t) for t in rng.integers(0, reference.config.vocab_size, size=n)] for n in (3, 5, 8)):
        eos = reference.config.eos_token_id
        expected, scores = hf_greedy(reference, prompt, NEW_TOKENS, eos_id=eos)
        got = list(prompt)
        while len(got) < len(prompt) + NEW_TOKENS and got[-1:] != [eos]:
            got.append(int(np.argmax(runner(got))))
        if note := greedy_agreement(got[len(prompt):], expected, scores, f"{family} ({road}) on the GPU"):
            print(note)


def test_device_gpu_without_one(checkpoint, capsys):
    """--device gpu on a machine without a GPU: one clear line (main in this process)"""
    if _gpu_present():
        pytest.skip("this machine has a GPU, so --device gpu is valid here")
    result = program_here(capsys, "--model", str(checkpoint), "--prompt", "Hi", "--device", "gpu")
    one_line_error(result, "--device gpu: MAX finds no GPU on this machine")
    assert result.returncode == 2, result


def test_gpt2_on_unfinished_steps_names_them(checkpoint, tmp_path, capsys):
    """`gpt2` on the stubs names each unfinished step and its check command, with no traceback (main in this
    process); with only the cache's step left, it says how to run without it; a missing file is named"""
    from course.authoring.render import render_all

    render_all(tmp_path)
    asked = ["--target", "steps", "--steps-dir", str(tmp_path), "--model", str(checkpoint), "--prompt", "Hi"]
    result = program_here(capsys, *asked)
    err = result.stderr
    assert result.returncode == 1 and "Traceback" not in err, err
    assert "step 07 (multi-head attention): TODO 1, 2, 3, 4, 5 — check it with `pixi run s07` (or `python -m course.check 7`)" in err, err
    assert "--no-cache" not in err and "step 16" not in err, f"GPT-2's programs run on steps 1-15: {err}"
    for file in SOLUTIONS.glob("step_*.py"):
        if file.name != "step_15_kv_cache.py":
            shutil.copy(file, tmp_path / file.name)
    result = program_here(capsys, *asked)
    assert result.returncode == 1, result
    assert result.stderr.splitlines()[:3] == [
        f"Your GPT-2 is not finished: 1 of the steps it runs on still have stubs in {tmp_path.name}/.",
        "  step 15 (KV cache): TODO 1, 2, 3, 4 — check it with `pixi run s15` (or `python -m course.check 15`)",
        "  (or run without the KV cache: `pixi run gpt2 --no-cache`)"], result.stderr
    no_cache = program_here(capsys, *asked, "--no-cache", "--max-new-tokens", "2", "--temperature", "0")
    assert no_cache.returncode == 0 and no_cache.stdout.startswith("Hi"), no_cache  # step 15 is not needed
    (tmp_path / "step_03_layer_norm.py").unlink()
    from course.programs.generate import Stop, import_steps

    with pytest.raises(Stop) as stopped:
        import_steps("steps", tmp_path, [3])  # the family left to its default: GPT-2's
    assert str(stopped.value).startswith("Your GPT-2 is not finished: 1 of the steps"), stopped.value
    result = program_here(capsys, *asked)
    assert "step 03 (layer normalization): the file is missing — check it with `pixi run s03`" in result.stderr, result.stderr
    assert "--no-cache" not in result.stderr, result.stderr


def test_a_llama_on_unfinished_steps_names_part_ii(llama_checkpoint, tmp_path, capsys):
    """`gpt2 --model <a Llama>` on the stubs names Part II's unfinished steps too; --quantize on a Llama is one line"""
    from course.authoring.render import render_all

    render_all(tmp_path)
    result = program_here(capsys, "--target", "steps", "--steps-dir", str(tmp_path), "--model", str(llama_checkpoint),
                          "--prompt", "Hi")
    err = result.stderr
    assert result.returncode == 1 and "Traceback" not in err and "Your Llama is not finished" in err, err
    assert "step 21 (grouped-query attention): TODO 1, 2, 3 — check it with `pixi run s21`" in err, err
    assert "step 24 (Llama generation and its KV cache): TODO 1, 2, 3, 4" in err, err
    one_line_error(program_here(capsys, "--model", str(llama_checkpoint), "--prompt", "Hi", "--quantize", "q4_0"),
                   "--quantize runs Part I's GPT-2", "Part II runs in float32")


def _mapping_of(array):
    """The buffer at the bottom of a NumPy view's ``base`` chain: an mmap for on_huge_pages's weights."""
    while isinstance(array, np.ndarray) and array.base is not None:
        array = array.base
    return array.obj if isinstance(array, memoryview) else array


def test_the_road_builds_the_runner_asked_for(checkpoint, llama_checkpoint, mojo_kernels):
    """`compile_model` (course.programs.build) builds the runner each program asks for: step
    13's graph without a cache, step 15's or step 24's with it, step 16's decode graph (its kernels' model with
    `kernel`) with its cache in float32, float16 only for the kernels on quantized weights; on step 16's road the
    float32 weights lie on huge pages, once: the checkpoint's arrays are those same views, as MAX's are; step 15's
    road leaves them where the loader put them, and takes arrays that are not contiguous"""
    import mmap

    from max.driver import CPU
    from max.dtype import DType

    from course.programs import build
    from course.programs.generate import import_steps

    steps = import_steps("solutions", SOLUTIONS, [11, 13, 14, 15, 16])
    cpu = CPU()
    uncached = build.compile_model(steps, build.load(steps, str(checkpoint), "gpt2"), cpu, cached=False)
    assert uncached.__qualname__ == "compile_next_logits.<locals>.next_logits", uncached
    pretrained = build.load(steps, str(checkpoint), "gpt2")
    name = "transformer.h.0.mlp.c_fc.weight"
    pretrained.state[name] = np.asfortranarray(pretrained.state[name])  # the same values, not C-contiguous
    cached = build.compile_model(steps, pretrained, cpu, cached=True)
    assert type(cached) is steps[15].CachedNextLogits, type(cached)
    assert not isinstance(_mapping_of(pretrained.state["transformer.wte.weight"]), mmap.mmap), "step 15's road moved them"
    roads = [(dict(decode=True), "DecodeGPT2LMHeadModel", DType.float32, False),
             (dict(decode=True, kernel=True), "KernelGPT2LMHeadModel", DType.float32, False),
             (dict(decode=True, quantize="q4_0"), "DecodeGPT2LMHeadModel", DType.float32, True),
             (dict(decode=True, kernel=True, quantize="q4_0"), "KernelGPT2LMHeadModel", DType.float16, True)]
    fresh = build.load(steps, str(checkpoint), "gpt2").state
    for options, model, cache, quantized in roads:
        pretrained = build.load(steps, str(checkpoint), "gpt2")
        runner = build.compile_model(steps, pretrained, cpu, cached=True, **options, prefill_from=GEN["n_positions"])
        got = type(runner), type(runner.model), runner.cache_dtype, runner.prefill_from
        assert got == (steps[16].DecodeNextLogits, getattr(steps[16], model), cache, GEN["n_positions"]), (options, got)
        swapped = {name for name, w in runner.model.parameters if name not in fresh}
        assert bool(swapped) == quantized, (options, sorted(swapped)[:3])
        state = pretrained.state  # still the checkpoint's float32 arrays (bench's accuracy compiles float32 from it)
        changed = [name for name in fresh if state[name].dtype != np.float32 or not np.array_equal(state[name], fresh[name])]
        assert state.keys() == fresh.keys() and not changed, (options, changed[:3])
        if not quantized and hasattr(mmap, "MADV_HUGEPAGE"):
            roots = {id(_mapping_of(state[name])) for name, _ in runner.model.parameters}
            assert len(roots) == 1 and isinstance(_mapping_of(state["transformer.wte.weight"]), mmap.mmap), (
                f"{options}: the checkpoint's arrays are not the huge pages' views ({len(roots)} buffers)")
            copied = [name for name, w in runner.model.parameters if np.from_dlpack(w).ctypes.data != state[name].ctypes.data]
            assert not copied, f"{options}: MAX holds copies of {copied[:3]}, not the huge pages"
        layers, heads, head_dim = GEN["n_layer"], GEN["n_head"], GEN["n_embd"] // GEN["n_head"]
        for kind, buffers in (("key", runner.key_cache), ("value", runner.value_cache)):
            arrays = [np.from_dlpack(b) for b in buffers]
            assert [(a.shape, a.dtype) for a in arrays] == [((GEN["n_positions"], heads, head_dim), cache.to_numpy())] * layers, (
                options, kind, [(a.shape, a.dtype) for a in arrays[:2]])
            assert not any(a.any() for a in arrays), f"{options}: the {kind} cache does not start at zeros"
            if hasattr(mmap, "MADV_HUGEPAGE"):  # a decode step streams the cache as it does the weights
                mode, flags = _mapping_at(arrays[-1].ctypes.data)
                assert mode == "rw-p" and "hg" in flags, (
                    f"{options}: the {kind} cache's mapping is {mode} with VmFlags {flags}, not advised for huge pages")
    decode = build.compile_model(steps, build.load(steps, str(checkpoint), "gpt2"), cpu, cached=True, decode=True)
    assert decode.prefill_from == 1, decode.prefill_from  # every prompt through the prefill graph (as bench's roads)
    numbers, last = build.NEEDED["llama"]
    steps = import_steps("solutions", SOLUTIONS, [*numbers, last], "llama")
    cached = build.compile_model(steps, build.load(steps, str(llama_checkpoint), "llama"), cpu, cached=True)
    assert type(cached) is steps[24].CachedLlamaNextLogits, type(cached)


def test_the_road_refuses_a_llama_part_is_graphs(llama_checkpoint):
    """`compile_model` (course.programs.build) on a Llama with --quantize, step 16's decode graph or its kernels:
    one ValueError naming which, before anything is compiled (main and bench refuse them sooner, in their words)"""
    from max.driver import CPU

    from course.programs import build
    from course.programs.generate import import_steps

    numbers, cache = build.NEEDED["llama"]
    steps = import_steps("solutions", SOLUTIONS, [*numbers, cache], "llama")
    pretrained = build.load(steps, str(llama_checkpoint), "llama")
    for options, flag in [(dict(quantize="q4_0"), "--quantize"), (dict(decode=True), "step 16's decode graph"),
                          (dict(kernel=True), "step 16's decode graph"), (dict(quantize="q6_k", decode=True), "--quantize")]:
        with pytest.raises(ValueError) as refused:
            build.compile_model(steps, pretrained, CPU(), cached=True, **options)
        assert str(refused.value) == (f"{flag} runs Part I's GPT-2 (chapters 15 and 16); Part II's Llama runs in "
                                      "float32"), (options, str(refused.value))


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


@contextlib.contextmanager
def no_step_modules():
    """No step module in sys.modules while main imports a folder's steps in this process (it then imports that
    folder's files, not the ones imported before); afterwards, sys.modules's step modules and sys.path as they were."""
    kept, path = {name: module for name, module in sys.modules.items() if name.startswith("step_")}, list(sys.path)
    for name in kept:
        del sys.modules[name]
    try:
        yield
    finally:
        sys.path[:] = path
        for name in [name for name in sys.modules if name.startswith("step_")]:
            del sys.modules[name]
        sys.modules.update(kept)


@pytest.fixture
def fresh_steps():
    """``no_step_modules`` for the whole check."""
    with no_step_modules():
        yield


def test_main_names_a_learners_failing_step(checkpoint, tmp_path, capsys, fresh_steps, monkeypatch):
    """main in this process: a learner's step that fails while generating, or as it is imported, is named with
    its check (exit status 2); a bad flag value is argparse's usage and error (2); an interrupt exits with 130"""
    from course.programs import generate

    for file in SOLUTIONS.glob("step_*.py"):
        shutil.copy(file, tmp_path / file.name)
    (tmp_path / "step_13_generation.py").write_text((SOLUTIONS / "step_13_generation.py").read_text().replace(
        "return int(np.argmax(logits))", "return int(np.argmax(logits)) + undefined_name"))
    result = program_here(capsys, "--target", "steps", "--steps-dir", str(tmp_path), "--model", str(checkpoint),
                          "--prompt", "Hello", "--max-new-tokens", "4", "--temperature", "0")
    assert result.returncode == 2, result
    for words in ("NameError: name 'undefined_name' is not defined — raised at ", "step_13_generation.py, line",
                  "; check step 13 with `pixi run s13`"):
        assert words in result.stderr, f"{words!r} not in {result.stderr!r}"
    (tmp_path / "step_14_pretrained.py").write_text(
        (SOLUTIONS / "step_14_pretrained.py").read_text() + "\nundefined_at_import\n")
    for name in [name for name in sys.modules if name.startswith("step_")]:
        del sys.modules[name]  # the folder's steps, imported by the run above: imported anew below
    result = program_here(capsys, "--target", "steps", "--steps-dir", str(tmp_path), "--model", str(checkpoint),
                          "--prompt", "Hello")
    assert result.returncode == 2, result
    for words in ("NameError: name 'undefined_at_import' is not defined — raised at ", "step_14_pretrained.py, line",
                  "; check step 14 with `pixi run s14`"):
        assert words in result.stderr, f"a step that fails as it is imported: {words!r} not in {result.stderr!r}"
    with pytest.raises(SystemExit) as stopped:
        generate.main(["--temperature", "warm"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m course.programs.generate ") and \
        "error: argument --temperature: invalid float value: 'warm'" in err, err

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(generate.Generator, "compile", interrupted)
    assert program_here(capsys, "--model", str(checkpoint), "--prompt", "Hello").returncode == 130

    def fails_in_a_solution(self):  # the course's file, loaded anew: sys.modules holds the learner's folder's now
        raise tokenizer_error(SOLUTIONS / "step_12_tokenizer.py")

    monkeypatch.setattr(generate.Generator, "compile", fails_in_a_solution)
    result = program_here(capsys, "--model", str(checkpoint), "--prompt", "Hello")
    assert result.returncode == 2 and "the course's solutions failed: KeyError: '<|endoftext|>'" in result.stderr, result


def tokenizer_error(path: Path) -> Exception:
    """The KeyError that the step-12 file at ``path``, loaded anew, raises inside itself for a vocabulary
    without <|endoftext|> (its traceback runs through that file)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"probe_{path.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        module.Tokenizer({}, [])
    except KeyError as error:
        return error
    raise AssertionError("Tokenizer({}, []) raised nothing")


def test_a_fault_blames_whose_code_it_is(tmp_path):
    """an error raised in solutions/ (what main runs) is the course's, never "check step 12"; the same error
    in a learner's copy of the step names the step and its check"""
    from course.programs.generate import learner_fault


    ours = learner_fault(tokenizer_error(SOLUTIONS / "step_12_tokenizer.py"), SOLUTIONS)
    assert "the course's solutions failed" in ours and "pixi run s" not in ours, ours
    assert "KeyError: '<|endoftext|>' — raised at solutions/step_12_tokenizer.py, line" in ours, ours
    shutil.copy(SOLUTIONS / "step_12_tokenizer.py", tmp_path / "step_12_tokenizer.py")
    theirs = learner_fault(tokenizer_error(tmp_path / "step_12_tokenizer.py"), tmp_path)
    assert "check step 12 with `pixi run s12` (or `python -m course.check 12`)" in theirs and "solutions failed" not in theirs, theirs
    assert "KeyError: '<|endoftext|>' — raised at " in theirs and "step_12_tokenizer.py, line" in theirs, theirs
    # an error raised in no step file (the folder's, or any file named step_*): one line, the error alone
    assert learner_fault(tokenizer_error(SOLUTIONS / "step_12_tokenizer.py"), tmp_path / "elsewhere") == \
        "unexpected error: KeyError: '<|endoftext|>'"


def test_brackets_in_a_message_reach_the_learner_as_written(checkpoint, tmp_path, capsys, monkeypatch):
    """main's lines are rich markup: a folder named `runs[seq]` or an error about `[1, seq]` and `[/x]` are printed
    as written, not taken for styles (which would drop `[seq]`, and fail on `[/x]` with a traceback)"""
    from course.programs import generate

    missing = tmp_path / "runs[seq]"
    result = program_here(capsys, "--model", str(missing), "--prompt", "Hi")
    assert result.returncode == 2 and str(missing) in result.stderr, result.stderr
    copy = tmp_path / "tiny[gpt2]"
    shutil.copytree(checkpoint, copy)

    def fails(self, prompt):
        raise ValueError("shape [1, seq] does not match [/x]")

    monkeypatch.setattr(generate.Generator, "run", fails)
    result = program_here(capsys, "--model", str(copy), "--prompt", "Hi", "--max-new-tokens", "1")
    assert f"Loading {copy} …" in result.stderr, result.stderr
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == (
        "unexpected error: ValueError: shape [1, seq] does not match [/x]"), result.stderr


# --- llama.cpp, bench's peer (the `llama` extra) -----------------------------------------------


@pytest.fixture
def gguf_dir(tmp_path, monkeypatch) -> Path:
    """A scratch folder for GGUF files, and the working directory too: a file written to a wrong relative path
    (``str(None)``) lands there, and is gone for the next check."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="module")
def narrow_mlp_checkpoint(checkpoint, tmp_path_factory) -> Path:
    """The checkpoint's tokenizer with a model whose MLP is 2 x n_embd wide (config.json's n_inner), not 4 x."""
    folder = tmp_path_factory.mktemp("narrow-mlp")
    for name in ("vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (checkpoint / name).is_file():
            shutil.copy(checkpoint / name, folder / name)
    model = generation_model(n_inner=2 * GEN["n_embd"])
    model.config.eos_token_id = model.config.bos_token_id = json.loads((checkpoint / "config.json").read_text())["eos_token_id"]
    model.save_pretrained(folder)
    return folder


@pytest.mark.llama
@pytest.mark.parametrize("which", ["checkpoint", "narrow_mlp_checkpoint"])
def test_llama_cpp_on_the_same_checkpoint_gives_hugging_faces_tokens(request, which, gguf_dir):
    """the checkpoint written as GGUF (f32) gives Hugging Face's greedy tokens in llama.cpp (an MLP of n_inner
    too), each timed: the start, then one time a token"""
    from course.programs import llama

    assert llama.version(), f"llama-cpp-python is not installed: {llama.INSTALL}"
    from transformers import GPT2LMHeadModel

    checkpoint = request.getfixturevalue(which)
    reference = GPT2LMHeadModel.from_pretrained(checkpoint).eval()
    eos = reference.config.eos_token_id
    gguf = llama.write_f32(checkpoint, gguf_dir / "model-f32.gguf")
    for prompt in ([7, 1, 30], [11, 52, 3, 90, 17, 4, 60]):
        times, got = llama.time_generation(gguf, prompt, 24, GEN["n_positions"], "float32")
        assert len(got) == 24 and len(times) == 25 and all(b > a for a, b in zip(times, times[1:])), (len(got), times)
        expected, scores = hf_greedy(reference, prompt, 24, eos_id=eos)
        got = got[: got.index(eos) + 1] if eos in got else got  # llama.cpp's generate does not stop at the end token
        if note := greedy_agreement(got, expected, scores, f"llama.cpp, prompt {prompt}"):
            print(note)


@pytest.mark.llama
def test_the_gguf_file_carries_the_checkpoints_tokenizer(checkpoint, gguf_dir):
    """llama.cpp reads the GGUF file's vocabulary and merges as the checkpoint's own tokenizer: the same ids for
    each text and the same text back; the file marks the end token, and no other, as a control token (as
    llama.cpp's converter does), and its merges are merges.txt's, in order, without its #version line"""
    import gguf
    import llama_cpp
    from transformers import AutoTokenizer

    from course.programs import llama

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    path = llama.write_f32(checkpoint, gguf_dir / "model-f32.gguf")
    vocab = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    for text in [*PROMPTS, TEXT[:300], "Hello<|endoftext|> world"]:
        ids = tokenizer(text)["input_ids"]
        got = vocab.tokenize(text.encode(), add_bos=False, special=True)
        assert got == ids, f"{text!r}: llama.cpp's ids {got}, the tokenizer's {ids}"
        back = vocab.detokenize(ids, special=True).decode()
        assert back == text, f"{ids}: llama.cpp's text {back!r}, not {text!r}"
    fields = gguf.GGUFReader(path).fields
    types = fields["tokenizer.ggml.token_type"]
    control = {i for i, part in enumerate(types.data) if types.parts[part][0] == gguf.TokenType.CONTROL}
    assert control == {tokenizer.convert_tokens_to_ids("<|endoftext|>")}, f"control tokens {control}"
    field = fields["tokenizer.ggml.merges"]
    merges = [bytes(field.parts[i]).decode() for i in field.data]
    lines = (checkpoint / "merges.txt").read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("#version") and merges == lines[1:], (lines[:2], merges[:2], len(merges), len(lines))


@pytest.mark.llama
def test_a_float16_checkpoint_is_written_as_float32(checkpoint, gguf_dir):
    """a checkpoint saved in float16 gives a GGUF file whose every tensor is float32 (the f32 file bench quantizes
    from), each the float16 value exactly"""
    import gguf
    import torch
    from transformers import GPT2LMHeadModel

    from course.programs import llama

    folder = gguf_dir / "half"
    GPT2LMHeadModel.from_pretrained(checkpoint).to(torch.float16).save_pretrained(folder)
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(checkpoint / name, folder / name)
    tensors = {t.name: t for t in gguf.GGUFReader(llama.write_f32(folder, gguf_dir / "model-f32.gguf")).tensors}
    assert {t.tensor_type.name for t in tensors.values()} == {"F32"}, {t.tensor_type.name for t in tensors.values()}
    wpe = GPT2LMHeadModel.from_pretrained(folder, dtype=torch.float16).transformer.wpe.weight.detach().float().numpy()
    assert np.array_equal(np.asarray(tensors["position_embd.weight"].data).reshape(wpe.shape), wpe)


@pytest.mark.llama
def test_the_gguf_file_is_the_same_under_an_ascii_locale(checkpoint, gguf_dir):
    """write_f32 reads vocab.json and merges.txt as UTF-8 whatever the locale says (GPT-2's byte-level
    vocabulary is not ASCII): the file written under the C locale is the file written under UTF-8"""
    from course.programs import llama

    expected = llama.write_f32(checkpoint, gguf_dir / "utf8.gguf").read_bytes()
    with c_locale():
        written = llama.write_f32(checkpoint, gguf_dir / "ascii.gguf").read_bytes()
    assert written == expected, "the GGUF file differs under the C locale"


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
def test_llama_cpp_quantizes_without_its_log(checkpoint, gguf_dir, capfd):
    """llama.cpp's quantizer logs a line a tensor; bench keeps them out of its output, gives stderr back, and each
    file is the format asked for"""
    import gguf
    import llama_cpp  # noqa: F401 - its library's own files are open from here on

    from course.programs import llama

    descriptors = len(os.listdir("/proc/self/fd")) if Path("/proc/self/fd").is_dir() else None
    capfd.readouterr()
    out = llama.files(checkpoint, gguf_dir, ["q4_0"])  # (q4_k and q6_k need rows of 256: wider than these)
    os.write(2, b"stderr is back\n")
    printed = capfd.readouterr()
    assert "llama_model_loader" not in printed.err + printed.out, printed.err[:300]
    assert printed.err.endswith("stderr is back\n"), f"after quantizing, stderr is not the process's: {printed.err[-300:]!r}"
    if descriptors is not None:
        assert len(os.listdir("/proc/self/fd")) == descriptors, "quantizing left a file descriptor open"
    assert out == {name: gguf_dir / f"model-{name}.gguf" for name in ("f32", "q4_0")}, out
    for name, expected in (("f32", "F32"), ("q4_0", "Q4_0")):
        types = {tensor.tensor_type.name for tensor in gguf.GGUFReader(out[name]).tensors
                 if len(tensor.shape) == 2 and tensor.name != "position_embd.weight"}  # wpe stays float32, as ours
        assert types == {expected}, f"the {name} file's matrices are {types}"


@pytest.mark.llama
def test_a_file_llama_cpp_cannot_quantize_is_one_line_with_its_reason(gguf_dir, capfd):
    """llama.cpp's quantizer on a file that is not GGUF: bench's RuntimeError names the file, the format and
    llama.cpp's last log lines, and nothing else reaches stderr"""
    from course.programs import llama

    bogus = gguf_dir / "model-f32.gguf"
    bogus.write_bytes(b"\xff\xfe not a GGUF file")
    capfd.readouterr()
    with pytest.raises(RuntimeError) as failed:
        llama.quantize(bogus, gguf_dir / "model-q4_0.gguf", "q4_0")
    said = str(failed.value)
    assert said.startswith(f"llama.cpp could not quantize {bogus} to q4_0: "), said
    lines = said.removeprefix(f"llama.cpp could not quantize {bogus} to q4_0: ").split(" / ")
    assert len(lines) == 2 and lines[0].startswith("gguf_init_from_reader: invalid magic characters"), lines
    assert lines[1].startswith("llama_model_quantize: failed to quantize") and lines[1].endswith(
        f"failed to load model from {bogus}"), lines
    printed = capfd.readouterr()
    assert not printed.err and not printed.out, printed


@contextlib.contextmanager
def on_one_core(restrict: bool = True):
    """The block runs with this process restricted to one of its cores (``taskset``), where the system can do that
    (sched_setaffinity) and ``restrict`` asks for it; its cores are given back after."""
    if not restrict or not hasattr(os, "sched_setaffinity"):
        yield
        return
    cores = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cores)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, cores)


def test_bench_threads_are_the_cores_this_process_may_use(monkeypatch):
    """every engine's thread count is the cores the process may run on (``taskset``), not the machine's; where
    the system cannot say (macOS: no sched_getaffinity), the machine's cores, and 1 if even that is unknown"""
    from course.programs import llama

    if hasattr(os, "sched_setaffinity"):
        assert llama.threads() == len(os.sched_getaffinity(0))
        with on_one_core():
            assert llama.threads() == 1, f"{llama.threads()} threads on one core"
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    for count, expected in ((6, 6), (None, 1)):
        monkeypatch.setattr(os, "cpu_count", lambda count=count: count)
        assert llama.threads() == expected, (count, llama.threads())


@pytest.mark.llama
def test_llama_cpp_opens_the_context_bench_asks_for(checkpoint, gguf_dir, capfd):
    """llama.cpp's context has the size, batch and threads bench asks for (every engine's threads, for a token and
    for a prompt alike), its keys and values in the type asked (float32 beside our float32 paths), and opening
    it prints no loading log (a context longer than the model's 64 positions still gets llama.cpp's warning)"""
    import llama_cpp

    from course.programs import llama

    path = llama.write_f32(checkpoint, gguf_dir / "model-f32.gguf")
    for cache, ggml, one_core in (("float32", llama_cpp.GGML_TYPE_F32, False), ("float16", llama_cpp.GGML_TYPE_F16, True)):
        with on_one_core(one_core):  # (where llama-cpp-python's own defaults would differ from bench's threads)
            capfd.readouterr()
            params = llama.open_model(path, GEN["n_positions"], 12, cache).context_params
            printed = capfd.readouterr()
            threads = llama.threads()
        got = params.n_ctx, params.n_batch, params.n_threads, params.n_threads_batch, params.type_k, params.type_v
        assert got == (GEN["n_positions"], 12, threads, threads, ggml, ggml), (cache, got)
        assert "llama_model_loader" not in printed.err + printed.out, printed.err[:300]  # its loading log, verbose


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


def test_a_child_process_gets_the_environment_python_holds():
    """after runtime.setup() and importing MAX's nn, a child Python sees os.environ: no PYTHONEXECUTABLE of MAX's,
    the same sys.prefix (a virtualenv stays the virtualenv)"""
    import max.nn  # noqa: F401 - sets PYTHONEXECUTABLE, PYTHONPATH, MOJO_PYTHON_LIBRARY in the C environment

    from course import runtime

    runtime.setup()  # done once for the suite (conftest); the import above must not undo it
    code = "import os, sys; print([os.environ.get(n) for n in sys.argv[1:]], sys.prefix)"
    child = subprocess.run([sys.executable, "-c", code, *runtime.MOJO_SETS], capture_output=True, text=True, check=True)
    assert child.stdout.strip() == f"{[os.environ.get(n) for n in runtime.MOJO_SETS]} {sys.prefix}", child.stdout


def _mapping_at(address: int) -> tuple[str | None, list[str] | None]:
    """The mode (rw-p: private) and VmFlags (hg: advised for huge pages) of this process's mapping holding ``address``."""
    lines = Path("/proc/self/smaps").read_text().splitlines()
    for i, line in enumerate(lines):
        span = line.split(" ")[0]
        if "-" in span and all(c in "0123456789abcdef-" for c in span):
            start, end = (int(x, 16) for x in span.split("-"))
            if start <= address < end:
                return line.split()[1], next(l for l in lines[i + 1:] if l.startswith("VmFlags:")).split()[1:]
    return None, None


def test_weights_on_huge_pages_keep_their_values_in_one_advised_mapping():
    """course.runtime.on_huge_pages gives the same arrays back, each on a cache line, in memory advised for huge pages

    A float32 matrix, a uint8 array of GGUF-like blocks with an odd length, and a MAX tensor; on Linux the mapping's
    VmFlags carry ``hg`` (MADV_HUGEPAGE), elsewhere the weights come back as they were."""
    import mmap

    from course import runtime

    rng = np.random.default_rng(2)
    weights = {"w": rng.standard_normal((5, 7), dtype=np.float32), "blocks": rng.integers(0, 255, 4161, dtype=np.uint8),
               "tensor": runtime.from_numpy(rng.standard_normal(3, dtype=np.float32))}
    placed = runtime.on_huge_pages(weights)
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        assert placed is weights
        return
    for name, array in placed.items():
        expected = runtime.to_numpy(weights[name]) if name == "tensor" else weights[name]
        assert array.dtype == expected.dtype and array.shape == expected.shape, (name, array.dtype, array.shape)
        assert np.array_equal(array, expected), name
        assert array.ctypes.data % 64 == 0, (name, array.ctypes.data % 64)
    starts = [placed[name].ctypes.data for name in weights]
    assert starts[0] % runtime.HUGE_PAGE == 0, f"the first weight starts {starts[0] % runtime.HUGE_PAGE} bytes into a 2 MiB page"
    ends = [start + (placed[name].nbytes + 63) // 64 * 64 for start, name in zip(starts, weights)]
    assert starts[1:] == ends[:-1], f"the weights do not follow one another, each on the next cache line: {starts} {ends}"
    mode, flags = _mapping_at(placed["w"].ctypes.data)
    assert flags is not None and "hg" in flags, f"the weights' mapping has VmFlags {flags}: not advised for huge pages"
    assert mode == "rw-p", f"the weights' mapping is {mode}: a shared mapping is shared memory, never on huge pages"


def test_kernels_compile_after_max_nn_is_imported(monkeypatch, tmp_path):
    """course.runtime.kernels() compiles into an empty cache in a process that has imported max.nn"""
    import max.nn  # noqa: F401 - it sets PYTHONEXECUTABLE in the C environment, outside the virtualenv

    from course import runtime

    if why := no_mojo():
        pytest.skip(why)
    monkeypatch.setattr(runtime, "max_cache", lambda: tmp_path)  # an empty cache: the package is compiled anew
    runtime.kernels.cache_clear()
    try:
        package = runtime.kernels()  # raised "mojo could not compile ...: exit status 1" (`mojo` found no module mojo)
    finally:
        runtime.kernels.cache_clear()
    assert package.is_file() and package.is_relative_to(tmp_path), package
