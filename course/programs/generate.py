"""Generate text with the course's GPT-2: ``pixi run main`` (the solutions) and ``pixi run gpt2`` (yours).

    pixi run main --prompt "The meaning of life is"
    pixi run gpt2 --model ./my-checkpoint --temperature 0 --max-new-tokens 32 --json
    pixi run main                      # no --prompt: type prompts, one per line
    pixi run main --model course-llama # Part II: a Llama-family checkpoint runs on steps 17-24

``main`` imports only ``solutions/``; ``gpt2`` imports only your ``steps/``, all of
them: tokenizer (12), generation (13), weights (14), KV cache (15) and the model
they build on; for a Llama checkpoint (config.json's model_type), Part II's steps
17-23 and its cache, step 24. Tokens stream as they come; the timing goes to stderr, so that
``--json`` prints one JSON object and nothing else on stdout.

On the CPU, in float32, GPT-2 decodes with step 16's decode graph and the course's
Mojo kernels once step 16 is finished (``main``: always), and a prompt shorter than
``PREFILL_FROM`` tokens goes through that graph too, one token at a time: a first run
compiles one graph, not step 15's as well (the first token, cold, in a quarter of the
time: README). Otherwise, and where ``mojo`` cannot compile the kernels or MAX the decode
graph (one dim line says why), step 15's graph.

Every expected failure (a bad flag value, a checkpoint that cannot be found or
read, an unfinished step) ends in one line on stderr and exit status 2, or 1 for
unfinished steps; never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from course import runtime
from course.checkpoints import CheckpointError, default_model
from course.outline import OUTLINE, SOLUTIONS, check_command, STEPS, step_path
from course.programs import build

err = Console(stderr=True, highlight=False, soft_wrap=True)

#: The weight formats of ``--quantize`` (course.programs.quantize.FORMATS has their block sizes).
QUANTIZE = ("q4_0", "q4_k", "q6_k")
#: The formats whose single rows a Mojo kernel of the course's multiplies (course/kernels/q4_0.mojo, q4_k.mojo and
#: q6_k.mojo), with each layer norm, bias, GELU and residual add in the product's op, as float32's (step 16's
#: KernelGPT2LMHeadModel): all of quantize's; with ``kernel``, every format's attention is the Mojo kernel's too.
ONE_ROW_KERNELS = ("q4_0", "q4_k", "q6_k")

#: What the programs need, by step and family: everything up to the weights, and the cache.
NEEDED = build.NEEDED
#: The shortest prompt that compiles and runs step 16's prefill graph; a shorter one is fed through its decode
#: graph one token at a time, so that a first run compiles that graph alone. GPT-2 small on 2 cores: a decode step
#: takes 24-27 ms, and the prefill graph 0.67 s to load when cached and about 110 s to compile when not; so a prompt
#: of up to 63 tokens costs a warm run at most 0.9 s more, and spares a first run that compile.
PREFILL_FROM = 64


@contextlib.contextmanager
def status(message: str):
    """rich's spinner with ``message`` while the block runs, on a terminal; elsewhere (a pipe, a log file),
    the message as one line, since a spinner there shows nothing."""
    if err.is_terminal:
        with err.status(escape(message)):
            yield
    else:
        err.print(f"[dim]{escape(message)}[/]")
        yield


def kib(size: float) -> str:
    """A size in bytes, in KiB: one decimal below 10 KiB (a small model's cache is a fraction of one)."""
    return f"{size / 1024:.1f}" if size < 10 * 1024 else f"{size / 1024:.0f}"


class Stop(Exception):
    """An expected failure: one line for the user, then exit with ``code``."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Generate text with the course's GPT-2.")
    p.add_argument("--target", choices=["solutions", "steps"], default="solutions", help="whose code runs (main: solutions, gpt2: steps)")
    p.add_argument("--steps-dir", type=Path, default=STEPS, help="the learner's folder for --target steps")
    p.add_argument("--model", help="a Hugging Face Hub id (gpt2, gpt2-medium, gpt2-large, gpt2-xl; a Llama such as "
                   "HuggingFaceTB/SmolLM2-135M), a local folder, course (the course's own small GPT-2, trained on the "
                   "book) or course-llama (its Llama, Part II) (default: gpt2 when it is cached or the Hub answers, "
                   "else course)")
    p.add_argument("--prompt", help="the text to continue; without it, an interactive prompt")
    p.add_argument("--max-new-tokens", type=int, default=50, help="how many tokens to add at most (default 50)")
    p.add_argument("--temperature", type=float, default=0.8, help="0 is greedy; higher is more random (default 0.8)")
    p.add_argument("--top-k", type=int, default=40, help="sample among the k most likely tokens; 0 is off (default 40)")
    p.add_argument("--top-p", type=float, default=1.0, help="sample among the most likely tokens that make up p; 1 is off")
    p.add_argument("--seed", type=int, default=None, help="the random seed: the same seed gives the same text")
    p.add_argument("--device", choices=["cpu", "gpu"], default="cpu", help="where MAX runs the model")
    p.add_argument("--no-cache", action="store_true", help="rerun the whole sequence for every token (step 13) instead of the KV cache (step 15)")
    p.add_argument("--quantize", choices=QUANTIZE, help="store the weights in a GGUF block format (CPU only): faster, a little less accurate; see chapter 15")
    p.add_argument("--json", action="store_true", help='print one object: {"prompt_ids", "new_ids", "text"}')
    return p


# --- whose code -------------------------------------------------------------------------


def import_steps(target: str, steps_dir: Path, numbers: list[int], family: str = "gpt2") -> dict[int, object]:
    """Imports the steps the program needs from one folder only."""
    folder = SOLUTIONS if target == "solutions" else steps_dir.resolve()
    if target == "steps":
        from course.authoring.render import unfinished

        left = unfinished(folder, numbers)
        if left:
            lines = [f"Your {build.NAMES[family]} is not finished: {len(left)} of the steps it runs on still have "
                     f"stubs in {folder.name}/."]
            for number, todos in left.items():
                what = f"TODO {', '.join(map(str, todos))}" if todos else "the file is missing"
                lines.append(f"  step {number:02d} ({OUTLINE[number]}): {what} — check it with {check_command(number)}")
            if NEEDED[family][1] in left and len(left) == 1:
                lines.append("  (or run without the KV cache: `pixi run gpt2 --no-cache`)")
            raise Stop("\n".join(lines), code=1)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() not in (SOLUTIONS, STEPS, steps_dir.resolve())]
    sys.path.insert(0, str(folder))
    modules = {}
    for number in numbers:
        path = step_path(number, SOLUTIONS)
        try:
            modules[number] = importlib.import_module(path.stem)
        except Exception as error:  # noqa: BLE001 - the learner's file does not import
            raise Stop(learner_fault(error, folder)) from error
    return modules


def learner_fault(error: BaseException, folder: Path) -> str:
    """One line for an unexpected error, naming the step file it came from and how to check it."""
    from course.check.hints import REPORT_TO, describe, explain_exception

    files, tb = [], error.__traceback__
    while tb is not None:
        file = Path(tb.tb_frame.f_code.co_filename)
        if file.parent == folder and file.name.startswith("step_"):
            files.append(file)
        tb = tb.tb_next
    if not files:
        return f"unexpected error: {describe(error)}"
    if folder == SOLUTIONS:  # main runs the course's own code: no step of the user's to check
        return (f"the course's solutions failed: {explain_exception(error, files[-1])} — not your input; "
                f"{REPORT_TO}")
    number = int(files[-1].name[5:7])  # the innermost step file on the traceback
    return f"{explain_exception(error, files[-1])}; check step {number:02d} with {check_command(number)}"


# --- the model ----------------------------------------------------------------------------


def kernel_road(args, family: str) -> bool:
    """Whether GPT-2 runs on step 16's decode graph with the course's Mojo kernels (see the module's docstring):
    on the CPU, in float32, with the cache, step 16 finished, and the kernels compiled (3 s the first time)."""
    if family != "gpt2" or args.no_cache or args.quantize or args.device != "cpu":
        return False
    if args.target == "steps":
        from course.authoring.render import unfinished

        if unfinished(args.steps_dir.resolve(), [16]):
            return False
    try:
        runtime.kernels()
    except runtime.KernelError as error:
        err.print(f"[dim]{escape(str(error))}: step 15's graph runs instead of step 16's kernels.[/]")
        return False
    return True


def steps_to_run(args, family: str) -> list[int]:
    """The steps the program imports: everything up to the weights, the cache (not with --no-cache), and step 16
    on the kernels' road."""
    needed, cache_step = NEEDED[family]
    numbers = needed if args.no_cache else [*needed, cache_step]
    return [*numbers, 16] if kernel_road(args, family) else numbers


def pick_device(name: str):
    from max.driver import CPU, Accelerator, accelerator_count

    if name == "cpu":
        return CPU()
    if accelerator_count() == 0:
        raise Stop("--device gpu: MAX finds no GPU on this machine; run on the CPU (--device cpu, the default)")
    return Accelerator()


class Generator:
    """The tokenizer, the compiled model and the loop, ready for prompts."""

    def __init__(self, args, steps: dict[int, object], family: str = "gpt2"):
        self.args, self.steps, self.family = args, steps, family
        device = pick_device(args.device)
        with status(f"Loading {args.model} …"):
            try:
                pretrained = build.load(steps, args.model, family)
            except CheckpointError as error:
                raise Stop(str(error)) from None
            self.tokenizer = steps[12].Tokenizer.from_dir(pretrained.folder)
        self.config, self.pretrained, self.device = pretrained.config, pretrained, device
        # The longest token's bytes (each stand-in character of step 12 is one byte).
        vocab = getattr(self.tokenizer, "encoder", None) or {}
        self.longest_token = max(map(len, vocab), default=0) or None
        self.vocabulary = len(vocab) or self.config.vocab_size
        if args.quantize and family != "gpt2":
            raise Stop(f"--quantize runs Part I's GPT-2 (chapter 15); {args.model} is a {build.NAMES[family]}, "
                       "which Part II runs in float32: leave --quantize out")
        if args.quantize:
            from course.programs.quantize import check

            try:
                check(args.quantize, self.config, device)
            except ValueError as error:
                raise Stop(str(error)) from None

    def compile(self) -> None:
        """Builds the model with the checkpoint's weights and compiles it (minutes the first time, then seconds)."""
        args, config, pretrained = self.args, self.config, self.pretrained
        millions = sum(v.size for v in pretrained.state.values()) / 1e6
        cached = not args.no_cache
        note = "the first run on a machine takes a few minutes (MAX compiles and caches it); later runs take seconds"
        started = time.perf_counter()
        name = build.NAMES[self.family]
        with status(f"Compiling {name} ({build.layers(config)} layers, {millions:.0f}M parameters, {self.kind()}) "
                    f"with MAX: {note} …"):
            self.next_logits = self.compiled(cached)
        self.runner = self.next_logits
        err.print(f"[dim]Compiled in {time.perf_counter() - started:.1f} s ({self.kind()}).[/]")
        if cached and self.family == "llama":
            per_token = self.steps[24].kv_bytes_per_token(config)
            full = per_token * config.num_attention_heads // config.num_key_value_heads
            err.print(f"[dim]KV cache: {kib(per_token)} KiB a token, {per_token * build.context(config) / 2**20:.1f} "
                      f"MiB at {build.context(config)} tokens ({config.num_key_value_heads} key/value heads for "
                      f"{config.num_attention_heads} query heads; one per query head would take {kib(full)} "
                      f"KiB a token).[/]")
        if config.vocab_size > self.vocabulary:
            padded = config.vocab_size - self.vocabulary
            err.print(f"[dim]The model scores {config.vocab_size} tokens and its tokenizer has {self.vocabulary}: "
                      f"the {padded} padded rows are never generated.[/]")
            self.next_logits = only_tokens_below(self.vocabulary, self.next_logits)
        del self.pretrained  # the model holds the weights now

    def kind(self) -> str:
        """What is compiled: ``with a KV cache, step 16's decode graph and Mojo kernels on 2 CPUs``, the CPUs the
        kernels split their work among (runtime.usable_cpus: the affinity mask, less a container's quota)."""
        kind = "without a cache" if self.args.no_cache else "with a KV cache"
        if 16 in self.steps:
            cpus = runtime.usable_cpus()
            kind += f", step 16's decode graph and Mojo kernels on {cpus} CPU{'s' if cpus > 1 else ''}"
        if self.args.quantize:
            kind += f", weights in {self.args.quantize}"
        return kind

    def compiled(self, cached: bool):
        """The model, compiled. On the kernels' road, the decode graph alone (the graph the first token waits for;
        the prefill graph waits for a long prompt, see run); if it does not compile (the kernels on a system the
        course has not run on), one dim line says why, and step 15's graph runs instead."""
        kernel = 16 in self.steps
        try:
            model = build.compile_model(self.steps, self.pretrained, self.device, cached, self.args.quantize,
                                        decode=kernel, kernel=kernel, prefill_from=PREFILL_FROM)
            if kernel:
                model.decode_graph()
            return model
        except Exception as error:  # noqa: BLE001 - step 15's graph computes the same tokens
            if not kernel:
                raise
            from course.check.hints import REPORT_TO, describe

            who = f"check step 16 with {check_command(16)}" if self.args.target == "steps" else REPORT_TO
            err.print(f"[dim]step 16's decode graph did not compile ({escape(describe(error))}): step 15's graph runs "
                      f"instead; {who}.[/]")
            del self.steps[16]
            return self.compiled(cached)

    def encode(self, prompt: str) -> list[int]:
        """The prompt's ids, refused at once (before any compiling) when they cannot be generated from.

        Faults of the input are named as such, before the tokenizer sees it: text
        that is not valid Unicode, and text too long to fit whatever its tokens.
        """
        check_text(prompt, self.longest_token, build.context(self.config))
        ids = self.tokenizer.encode(prompt)
        try:
            self.steps[13].check_lengths(len(ids), self.args.max_new_tokens, build.context(self.config))
        except ValueError as error:
            raise Stop(str(error)) from None
        return ids

    def eos_id(self) -> int | None:
        return getattr(self.tokenizer, "eot_id", None)

    def run(self, prompt: str) -> dict:
        a, gen = self.args, self.steps[13]
        ids = self.encode(prompt)
        if 16 in self.steps and len(ids) >= PREFILL_FROM and self.runner.run is None:
            with status(f"Compiling step 15's prefill graph, for prompts of {PREFILL_FROM} tokens or more (once) …"):
                self.runner.prefill_graph()
        tokens = gen.generate(
            self.next_logits, ids, a.max_new_tokens, n_positions=build.context(self.config), eos_id=self.eos_id(),
            temperature=a.temperature, top_k=a.top_k, top_p=a.top_p, seed=a.seed,
        )
        new, times = [], []
        started = time.perf_counter()
        write = (lambda piece: None) if a.json else show
        write(prompt)
        try:
            stream(tokens, self.text, write, new, times)
        finally:  # end the streamed line, also when an error stops the loop
            write("\n")
        report_speed(started, times)
        return {"prompt_ids": ids, "new_ids": new, "text": self.text(new)}

    def text(self, new: list[int]) -> str:
        eos = self.eos_id()
        return self.tokenizer.decode([t for t in new if t != eos])


def show(piece: str) -> None:
    """Writes ``piece`` to stdout at once."""
    sys.stdout.write(piece)
    sys.stdout.flush()


def stream(tokens, text_of, write, new: list[int], times: list[float]) -> None:
    """Writes the text of ``tokens`` as each comes, appending it to ``new`` and the time it came to ``times``.

    A token may end inside a character (an emoji is four UTF-8 bytes, often two or more tokens):
    ``text_of`` then ends in U+FFFD, the replacement character, and the piece waits for the next
    token, so that nothing written is ever taken back. The last piece is written whatever it holds.
    """
    shown = ""
    for token in tokens:
        times.append(time.perf_counter())
        new.append(int(token))
        text = text_of(new)
        if not text.endswith("\ufffd"):  # wait for the rest of a UTF-8 character
            write(text[len(shown) :])
            shown = text
    write(text_of(new)[len(shown) :])


def check_text(prompt: str, longest_token: int | None, n_positions: int) -> None:
    """A Stop naming what is wrong with the prompt's text itself, decided from the text alone."""
    try:
        size = len(prompt.encode("utf-8"))
    except UnicodeEncodeError as error:
        bad = prompt[error.start]
        raise Stop(f"the prompt is not valid text: character {error.start + 1} is {bad!r}, a lone surrogate, which "
                   "Python makes of bytes that are not UTF-8 (a terminal or pipe in another encoding sends those); "
                   "set a UTF-8 locale, or pass the text as UTF-8") from None
    if longest_token and size > longest_token * n_positions:
        raise Stop(f"the prompt is {size:,} bytes: even in tokens of {longest_token} bytes, the tokenizer's longest, "
                   f"that is more than the {n_positions} positions the model can read; shorten it")


def only_tokens_below(vocabulary: int, next_logits):
    """``next_logits`` with every id from ``vocabulary`` on set to -inf: the rows a checkpoint pads its
    vocabulary with (nanoGPT-style 50304 for 50257) have no token to decode."""
    import numpy as np

    def masked(ids: list[int]):
        logits = np.array(next_logits(ids))  # a copy: the compiled model's output may be read-only
        logits[vocabulary:] = -np.inf
        return logits

    return masked


def report_speed(started: float, times: list[float]) -> None:
    if not times:
        return
    first = times[0] - started
    line = f"{len(times)} tokens; first token (prefill) {first * 1000:.0f} ms"
    if len(times) > 1:
        line += f", then {(len(times) - 1) / (times[-1] - times[0]):.1f} tok/s"
    err.print(f"[dim]{line}[/]")


def interactive(generator: Generator) -> None:
    err.print("[dim]Type a prompt and press Enter (an empty line or Ctrl-D quits).[/]")
    while True:
        try:
            prompt = input("prompt> ")
        except (EOFError, KeyboardInterrupt):
            err.print()
            return
        if not prompt.strip():
            return
        try:
            result = generator.run(prompt)
        except Stop as stop:
            err.print(f"[red]{escape(str(stop))}[/]")
            continue
        if generator.args.json:
            print(json.dumps(result, ensure_ascii=False))


def main(argv: list[str] | None = None, prog: str = "python -m course.programs.generate") -> int:
    args = parser(prog).parse_args(argv)
    try:
        runtime.setup()
        runtime.say_left()  # what the course left in MAX's process that costs speed, if anything
        if args.model is None:
            args.model, notice = default_model()
            if notice:
                err.print(f"[yellow]{escape(notice)}[/]")
        try:
            family = build.family(args.model)
        except CheckpointError as error:
            raise Stop(str(error)) from None
        steps = import_steps(args.target, args.steps_dir, steps_to_run(args, family), family)
        try:
            steps[13].check_sampling(args.temperature, args.top_k, args.top_p)
            if args.max_new_tokens < 0:
                raise ValueError(f"--max-new-tokens must be 0 or more, got {args.max_new_tokens}")
        except ValueError as error:
            raise Stop(str(error)) from None
        generator = Generator(args, steps, family)
        if args.prompt is not None:
            generator.encode(args.prompt)
        generator.compile()
        if args.prompt is None:
            interactive(generator)
            return 0
        result = generator.run(args.prompt)
        if args.json:
            print(json.dumps(result, ensure_ascii=False))
        return 0
    except Stop as stop:
        err.print(f"[red]{escape(str(stop))}[/]")
        return stop.code
    except KeyboardInterrupt:
        err.print()
        return 130
    except Exception as error:  # noqa: BLE001 - anything else is still one line, never a traceback
        folder = SOLUTIONS if args.target == "solutions" else args.steps_dir.resolve()
        err.print(f"[red]{escape(learner_fault(error, folder))}[/]")
        return 2


if __name__ == "__main__":
    sys.exit(main())
