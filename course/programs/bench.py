"""``pixi run bench``: decode speed of Hugging Face, ours without a cache, with the KV cache, and with step 16's decode graph (and its Mojo kernel).

    pixi run bench                         # GPT-2 small's sizes, random weights, 3 rounds
    pixi run bench --new-tokens 512 --rounds 5 --json
    pixi run bench --plot book/src/bench.svg
    pixi run -e llama bench --quantize q4_0 q4_k q6_k --roofline book/src/roofline.svg   # tok/s against bytes a token
    pixi run bench --quantize q4_0 q4_k q6_k   # add the quantized paths and their accuracy
    pixi run bench --model course --quantize q4_0 q4_k q6_k   # perplexity on the book's held-out text
    pixi run bench --model gpt2 --quantize q6_k # real weights (downloaded once), not random ones
    pixi run -e llama bench --quantize q4_0     # llama.cpp on the same checkpoint too (the `llama` extra)
    pixi run bench --model course-llama         # Part II's Llama: Hugging Face, ours without and with step 24's cache
    pixi run -e serve bench --serve             # max serve on the course's Llama: 1, 4 and 8 clients at once

Fair by construction:

* every path reads the same checkpoint through the same road (``course.programs.build``;
  Hugging Face through ``from_pretrained``): without ``--model``, GPT-2 small's sizes
  with GPT-2-style random weights, written once as a checkpoint folder
  (``course.weights.random_checkpoint``); ``solutions/`` is what runs, offline;
* Hugging Face runs on the device ours runs on: ``--device gpu`` needs a PyTorch
  built with CUDA, and is refused in one line without one;
* every path runs in **its own process**: once a MAX graph has run in a process,
  torch in that process is ~28% slower for good, which would flatter MAX;
* the paths alternate, round after round, so a busy moment hurts all of them;
* each llama.cpp path runs right after the last of ours it is compared with, and the
  "× llama.cpp" column is the median of the rounds' own ratios, with their range: a
  machine's speed drifts over minutes, and a ratio of two medians taken minutes apart
  would carry that drift;
* each process warms up first (MAX compiles or loads its graph, torch allocates),
  then generates greedily from the same 12-token prompt, and the medians over
  rounds are reported;
* the prefill is the time to the first new token; decode tok/s counts the rest;
* a path's process that gives no result within ``--worker-timeout`` seconds (half an
  hour by default) is stopped, and bench says which one, rather than wait for ever.

Hugging Face runs ``GPT2LMHeadModel.generate`` (greedy, with its cache); its step
times come from a logits processor called once per token. Ours run
``solutions/``: step 13's loop over step 13's graph (no cache), step 15's, or step
16's two graphs (the prefill's, and one for a single new token).

With ``llama-cpp-python`` installed (the ``llama`` extra), llama.cpp runs the same
checkpoint as a peer: written as GGUF, float32 and each ``--quantize`` format
(``course.programs.llama``), timed the same way in its own process on the same prompt
ids and thread count, with its KV cache in the type of the course path it is compared
with (the "KV cache" column: float32 for the f32 file, as the course's float32 paths;
float16 for the quantized files, as the course's kernel paths, while its quantized paths
through MAX's attention keep float32, the heavier); a "× llama.cpp" column compares
ours with it, format for format.

``--quantize`` adds step 16's model and cache with its weights in GGUF block formats
(``course.programs.quantize``), one path per format, with MAX's ``qmatmul``; on the CPU, a
second path per format (``kernel_<format>``) reads a float16 cache, as llama.cpp's, with the
course's Mojo attention (``course/kernels/attention.mojo``), and runs its single rows through
the course's Mojo kernels (``course/kernels/q4_0.mojo``, ``q4_k.mojo`` and ``q6_k.mojo``),
each with the layer norm before it and the bias, GELU and residual add after it in its op, as
float32's (``course/kernels/layer.mojo``). Its accuracy cost is measured once,
in the first round, on held-out text (the checkpoint's ``heldout.txt``, else the
course model's: the tenth of each chapter it never trained on): every next token
of ``--eval-tokens`` tokens is scored by float32 and by the format, giving each
one's **perplexity** on the text (the figure llama.cpp and the quantization
literature report), the top-1 agreement with float32 and the largest |Δ logit|.
Hugging Face scores the same tokens, so float32's perplexity has a reference.
Perplexity means something only for weights that predict: use ``--model course``
(the course's small GPT-2) or ``--model gpt2``.

A Llama-family checkpoint (``--model course-llama``, a folder, a Hub id) runs Part II's
paths: Hugging Face's ``LlamaForCausalLM.generate``, ours without a cache (step 13's
graph of step 22's model) and with step 24's cache. The decode graph, ``--quantize``
and the llama.cpp peer are Part I's (GPT-2) only, and are said to be left out.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from course.programs.generate import ONE_ROW_KERNELS, QUANTIZE
from course.outline import ROOT, SOLUTIONS

PATHS = {"hf": "Hugging Face generate (cache)", "no_cache": "ours, no cache (step 13)", "cache": "ours, KV cache (step 15)",
         "decode": "ours, decode graph (step 16)", "kernel": "ours, decode graph, Mojo kernel (step 16)"}
PATHS |= {f"cache_{name}": f"ours, decode graph, {name} weights" for name in QUANTIZE}
PATHS |= {f"kernel_{name}": f"ours, decode graph, Mojo {'kernels' if name in ONE_ROW_KERNELS else 'attention'}, {name}"
          for name in QUANTIZE}
PATHS |= {f"llama_{name}": f"llama.cpp, {name}" for name in ("f32", *QUANTIZE)}
#: Ours against llama.cpp on the same weights in the same format (the "× llama.cpp" column).
PEERS = {"cache": "llama_f32", "decode": "llama_f32", "kernel": "llama_f32"} | {f"cache_{name}": f"llama_{name}" for name in QUANTIZE}
PEERS |= {f"kernel_{name}": f"llama_{name}" for name in QUANTIZE}
#: Each path's colour in the plot; the roofline draws a format's paths in their float32 path's (the formats lie apart
#: along its axis of bytes).
COLOURS = {"hf": "#e8710a", "no_cache": "#888888", "cache": "#1a73e8", "decode": "#00897b", "kernel": "#004d40",
           "cache_q4_0": "#188038", "cache_q4_k": "#9334e6", "cache_q6_k": "#d93025", "kernel_q4_0": "#0d652d",
           "kernel_q4_k": "#681da8", "kernel_q6_k": "#a50e0e", "llama_f32": "#5f6368", "llama_q4_0": "#81c995",
           "llama_q4_k": "#c58af9", "llama_q6_k": "#f28b82"}
ROOFLINE_COLOURS = COLOURS | {f"{kind}_{name}": COLOURS[f32] for kind, f32 in (("cache", "cache"), ("kernel", "kernel"),
                                                                              ("llama", "llama_f32")) for name in QUANTIZE}
#: A sans-serif character's width, in font sizes (an estimate, for laying labels out where they fit).
CHAR_WIDTH = 0.52
#: The paths of Part II's Llama, and their labels.
LLAMA_PATHS = {"hf": PATHS["hf"], "no_cache": "ours, no cache (steps 13, 22)", "cache": "ours, KV cache (step 24)"}
err = Console(stderr=True, highlight=False)


def _prompt(n: int, vocab: int) -> list[int]:
    import numpy as np

    return np.random.default_rng(12).integers(0, vocab, size=n).tolist()


def worker(path: str, new_tokens: int, prompt_tokens: int, device: str, model: str, eval_tokens: int,
           gguf_dir: str | None = None) -> dict:
    """One path in this process: warm up, then time one greedy generation; with ``eval_tokens``,
    score that many held-out tokens too."""
    if path.startswith("llama_"):
        from course.programs import llama

        config = json.loads((Path(model) / "config.json").read_text())
        prompt = _prompt(prompt_tokens, config["vocab_size"])
        name = path.removeprefix("llama_")
        cache = llama_cache(name)
        times, tokens = llama.time_generation(Path(gguf_dir) / f"model-{name}.gguf", prompt, new_tokens,
                                              config["n_positions"], cache)
        result = {"kv_cache": cache}
    elif path == "hf":
        import torch
        import transformers

        reference = transformers.AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
        prompt = _prompt(prompt_tokens, reference.config.vocab_size)
        times, tokens = _time_hf(reference, prompt, new_tokens, device)
        result = {"kv_cache": "float32"}
        if eval_tokens:
            context = getattr(reference.config, "n_positions", None) or reference.config.max_position_embeddings
            result["perplexity"] = _hf_perplexity(reference, _windows(model, context, eval_tokens))
    else:
        times, tokens, result = _time_ours(path, model, prompt_tokens, new_tokens, device, eval_tokens)
    steps = [b - a for a, b in zip(times, times[1:])]
    return result | {"prefill_ms": 1000 * (times[1] - times[0]), "decode_tok_s": len(steps[1:]) / sum(steps[1:]),
                     "step_ms": [1000 * s for s in steps[1:]], "tokens": tokens}


def llama_cache(name: str) -> str:
    """llama.cpp's KV cache for its ``name`` file (f32 or a format): the type of its peer's, the course's kernel path
    in that format (like with like: float32 beside float32, float16 beside the quantized kernel paths)."""
    from course.programs.build import cache_type

    return cache_type(kernel=True, quantize=None if name == "f32" else name)


def _time_hf(model, prompt, new_tokens, device: str) -> tuple[list[float], list[int]]:
    """Hugging Face's generate on ``device`` (cpu, or gpu as CUDA), timed per token."""
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList

    where = "cuda" if device == "gpu" else "cpu"
    model = model.to(where).eval()
    sync = torch.cuda.synchronize if where == "cuda" else (lambda: None)

    class Clock(LogitsProcessor):
        def __init__(self):
            self.times = []

        def __call__(self, input_ids, scores):
            sync()  # a GPU runs ahead of Python: wait for the logits before reading the clock
            self.times.append(time.perf_counter())
            return scores

    ids = torch.tensor([prompt], device=where)
    kwargs = dict(attention_mask=torch.ones_like(ids), do_sample=False, use_cache=True, pad_token_id=0)
    with torch.no_grad():
        model.generate(ids, max_new_tokens=8, min_new_tokens=8, **kwargs)  # warm-up
        clock = Clock()
        sync()
        start = time.perf_counter()
        out = model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             logits_processor=LogitsProcessorList([clock]), **kwargs)
    return [start, *clock.times], out[0, len(prompt):].tolist()


def _windows(model: str, n_positions: int, tokens: int) -> list[list[int]]:
    """The held-out windows every path scores (``course.programs.quantize.held_out``), tokenized by step 12."""
    from course.checkpoints import find
    from course.programs.generate import import_steps
    from course.programs.quantize import held_out

    folder = find(model).folder
    tokenizer = import_steps("solutions", SOLUTIONS, [12])[12].Tokenizer.from_dir(folder)
    return held_out(folder, tokenizer, n_positions, tokens)


def _hf_perplexity(model, windows: list[list[int]]) -> float:
    import numpy as np
    import torch

    nll = []
    with torch.no_grad():
        for window in windows:
            logits = model(torch.tensor([window])).logits[0, :-1].double()
            nll += (-torch.log_softmax(logits, -1)[torch.arange(len(window) - 1), window[1:]]).tolist()
    return float(np.exp(np.mean(nll)))


def _time_ours(path, model, prompt_tokens, new_tokens, device, eval_tokens) -> tuple[list[float], list[int], dict]:
    from course import runtime

    runtime.setup()
    from course.programs import build
    from course.programs.build import compile_model, context, load
    from course.programs.generate import import_steps, pick_device
    from max.dtype import DType

    family = build.family(model)
    needed, cache_step = build.NEEDED[family]  # what the programs import, and step 16's decode graph
    steps = import_steps("solutions", SOLUTIONS, [*needed, cache_step, 16])
    gen = steps[13]
    quantize = path.split("_", 1)[1] if path.startswith(("cache_", "kernel_")) else None
    device = pick_device(device)
    pretrained = load(steps, model, family)
    config = pretrained.config
    prompt = _prompt(prompt_tokens, config.vocab_size)
    if quantize:
        from course.programs.quantize import check

        check(quantize, config, device)
    next_logits = compile_model(steps, pretrained, device, path != "no_cache", quantize,
                                decode=path in ("decode", "kernel") or quantize is not None, kernel=path.startswith("kernel"))
    result = {"kv_cache": "none" if path == "no_cache" else getattr(next_logits, "cache_dtype", DType.float32).name}  # as the runner allocated it
    kwargs = dict(n_positions=context(config), temperature=0.0)
    list(gen.generate(next_logits, prompt, 8, **kwargs))  # warm-up
    start = time.perf_counter()
    times, tokens = [start], []
    for token in gen.generate(next_logits, prompt, new_tokens, **kwargs):
        times.append(time.perf_counter())
        tokens.append(token)
    if quantize and eval_tokens:
        from course.programs.quantize import compare

        reference = compile_model(steps, pretrained, device, True)
        windows = _windows(model, context(config), eval_tokens)
        result["accuracy"] = compare(reference, next_logits, windows)
    return times, tokens, result


def _run_worker(path: str, args, model: str, accuracy: bool = False) -> dict:
    from course import runtime

    command = [sys.executable, "-m", "course.programs.bench", "--worker", path, "--new-tokens", str(args.new_tokens),
               "--prompt-tokens", str(args.prompt_tokens), "--device", args.device, "--model", model,
               "--eval-tokens", str(args.eval_tokens if accuracy else 0)]
    command += ["--gguf-dir", args.gguf_dir] if args.gguf_dir else []
    runtime.restore_environment()  # the worker's Python in this one's virtualenv, as the C environment may not say
    try:
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=args.worker_timeout)
    except subprocess.TimeoutExpired:  # run() has killed it: one line, not a bench that waits for ever
        raise SystemExit(f"bench: the {path} process gave no result in {args.worker_timeout:g} s and was stopped "
                         "(--worker-timeout): a first MAX run compiles for minutes, so on a slow machine allow it "
                         "more; a run that hangs is a fault: run bench again") from None
    if result.returncode != 0:
        raise SystemExit(worker_failed(path, result.returncode, result.stderr))
    return json.loads(result.stdout.strip().splitlines()[-1])


#: How to build llama.cpp without AMX: GCC's -mno-* options win over the -march=native of its build.
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"


def worker_failed(path: str, returncode: int, stderr: str) -> str:
    """bench's one line for a path's process that failed: its last line of stderr, or the signal that killed it.

    A process killed by SIGILL ran an instruction the processor refused. For llama.cpp that is AMX: built
    with -march=native on a processor that reports AMX, it multiplies quantized weights with AMX tiles, and
    some virtual machines report AMX but fault on it (seen on 2-core cloud VMs; its f32 file still runs)."""
    if returncode < 0:
        name = signal.Signals(-returncode).name
        why = f"it was killed by {name}"
        if name == "SIGILL" and path.startswith("llama"):
            return (f"bench: the {path} process failed: {why}, an instruction this processor refused: llama.cpp "
                    f"was built for this machine's AMX, which it reports but does not run. Rebuild it without: "
                    f'CFLAGS="{NO_AMX}" CXXFLAGS="{NO_AMX}" pip install --force-reinstall --no-cache-dir '
                    f'"llama-cpp-python>=0.3.16,<0.4"')
        return f"bench: the {path} process failed: {why}"
    tail = (stderr.strip().splitlines() or ["(no output)"])[-1]
    return f"bench: the {path} process failed: {tail}"


def _refuse_unfair_gpu(device: str) -> None:
    """``--device gpu`` times Hugging Face on the GPU too; without a CUDA PyTorch that cannot be fair."""
    if device != "gpu":
        return
    import torch

    if not torch.cuda.is_available():
        build = "a CPU build" if torch.version.cuda is None else "built with CUDA, but finds no GPU"
        raise SystemExit(f"bench --device gpu: this PyTorch ({torch.__version__}) is {build}, so Hugging Face "
                         "would run on the CPU against ours on the GPU, which is no fair race; install a CUDA "
                         "build of PyTorch, or compare on the CPU (--device cpu)")


def run_order(paths: list[str]) -> list[str]:
    """The order of a round: ``paths``, with each llama.cpp path moved to just after the last of ours that is
    compared with it (``PEERS``), so that the two runs of a pair follow each other."""
    order = [path for path in paths if not path.startswith("llama_")]
    for peer in (path for path in paths if path.startswith("llama_")):
        partners = [i for i, path in enumerate(order) if PEERS.get(path) == peer]
        order.insert(partners[-1] + 1 if partners else len(order), peer)
    return order


def paired_ratios(runs: dict[str, list[dict]]) -> dict[str, list[float]]:
    """Each of our paths that has a llama.cpp peer: its decode tok/s over the peer's, round by round."""
    return {path: [ours["decode_tok_s"] / theirs["decode_tok_s"] for ours, theirs in zip(r, runs[PEERS[path]])]
            for path, r in runs.items() if PEERS.get(path) in runs}


def _median(runs: list[dict]) -> dict:
    steps = [statistics.median(values) for values in zip(*(r["step_ms"] for r in runs))]
    out = {"prefill_ms": statistics.median(r["prefill_ms"] for r in runs),
           "decode_tok_s": statistics.median(r["decode_tok_s"] for r in runs),
           "step_ms": steps, "tokens": runs[0]["tokens"]}
    return out | {key: runs[0][key] for key in ("accuracy", "perplexity", "kv_cache") if key in runs[0]}


def plot(results: dict, file: Path, labels: dict[str, str] = PATHS) -> None:
    """Decode tok/s over the tokens generated so far, one line per path, as a plain SVG."""
    curves = {}
    for path, r in results.items():
        total, points = 0.0, []
        for i, ms in enumerate(r["step_ms"], start=1):
            total += ms
            points.append((i + 1, 1000 * i / total))
        curves[path] = points
    plot_width, height, pad = 540, 360, 50
    legend = pad + plot_width + 20  # the legend's column, right of the axes: it covers no line
    width = legend + round(CHAR_WIDTH * 12 * max(len(f"— {labels[path]}") for path in curves)) + 10
    x_max = max(x for pts in curves.values() for x, _ in pts)
    y_max = max(y for pts in curves.values() for _, y in pts) * 1.15
    sx = lambda x: pad + plot_width * x / x_max  # noqa: E731
    sy = lambda y: height - pad - (height - 2 * pad) * y / y_max  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" role="img" '
           f'aria-label="Decode speed over the tokens generated, a line per path" style="max-width: 100%; height: auto" '
           f'font-family="sans-serif" font-size="12" fill="currentColor">',
           f'<line x1="{pad}" y1="{height - pad}" x2="{pad + plot_width}" y2="{height - pad}" stroke="currentColor"/>',
           f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="currentColor"/>',
           f'<text x="{pad + plot_width / 2}" y="{height - 12}" text-anchor="middle">tokens generated</text>',
           f'<text x="14" y="{height / 2}" transform="rotate(-90 14 {height / 2})" text-anchor="middle">decode tok/s (mean so far)</text>']
    for k in range(5):
        y = y_max * k / 4
        out.append(f'<text x="{pad - 6}" y="{sy(y) + 4:.0f}" text-anchor="end">{y:.0f}</text>')
    for k in range(5):
        x = x_max * k / 4
        out.append(f'<text x="{sx(x):.0f}" y="{height - pad + 16}" text-anchor="middle">{x:.0f}</text>')
    for i, (path, pts) in enumerate(curves.items()):
        line = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{line}" fill="none" stroke="{COLOURS[path]}" stroke-width="2"/>')
        out.append(f'<text x="{legend}" y="{pad + 16 * i}" fill="{COLOURS[path]}">— {labels[path]}</text>')
    out.append("</svg>")
    file.write_text("\n".join(out) + "\n")


def bytes_read(path: str, config) -> float:
    """The bytes of weights one decode step of ``path`` reads (step 16's ``bytes_per_token``): 4 a weight in
    float32, a format's bits over 8 for ``cache_<format>``, ``kernel_<format>`` and ``llama_<format>``."""
    from course.programs.generate import import_steps
    from course.programs.quantize import FORMATS

    fmt = path.split("_", 1)[1] if path.startswith(("cache_", "kernel_", "llama_")) else "f32"
    bits = 32 if fmt == "f32" else FORMATS[fmt][1]
    return import_steps("solutions", SOLUTIONS, [16])[16].bytes_per_token(config, bits / 8)


def roofline(results: dict, file: Path, labels: dict[str, str], config, bandwidth: float, threads: int) -> None:
    """Decode tok/s against the megabytes of weights a step reads, one point per path, on log-log axes, with
    the memory limit (``bandwidth`` / bytes) as a line: the roofline of chapter 16, as a plain SVG."""
    import math

    points = {path: (bytes_read(path, config) / 1e6, r["decode_tok_s"]) for path, r in results.items()}
    width, height, pad = 680, 460, 60
    x_lo, x_hi = min(x for x, _ in points.values()) / 2, max(x for x, _ in points.values()) * 2
    y_lo = min(y for _, y in points.values()) / 2
    y_hi = max(max(y for _, y in points.values()), bandwidth * 1e3 / x_lo) * 1.5
    sx = lambda x: pad + (width - 2 * pad) * math.log(x / x_lo) / math.log(x_hi / x_lo)  # noqa: E731
    sy = lambda y: height - pad - (height - 2 * pad) * math.log(y / y_lo) / math.log(y_hi / y_lo)  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" role="img" '
           f'aria-label="Decode speed against the bytes of weights read a token, with the memory limit" '
           f'style="max-width: 100%; height: auto" font-family="sans-serif" font-size="12" fill="currentColor">',
           f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="currentColor"/>',
           f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="currentColor"/>',
           f'<text x="{width / 2}" y="{height - 14}" text-anchor="middle">MB of weights read per token (log)</text>',
           f'<text x="14" y="{height / 2}" transform="rotate(-90 14 {height / 2})" text-anchor="middle">'
           f'decode tok/s (log)</text>']
    for value in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000):
        if x_lo <= value <= x_hi:
            out.append(f'<text x="{sx(value):.0f}" y="{height - pad + 16}" text-anchor="middle">{value}</text>')
        if y_lo <= value <= y_hi:
            out.append(f'<text x="{pad - 6}" y="{sy(value) + 4:.0f}" text-anchor="end">{value}</text>')
    # y_hi is at least 1.5 x the limit at x_lo, so the limit's line runs from the left edge to the right
    out.append(f'<line x1="{sx(x_lo):.1f}" y1="{sy(bandwidth * 1e3 / x_lo):.1f}" x2="{sx(x_hi):.1f}" '
               f'y2="{sy(bandwidth * 1e3 / x_hi):.1f}" stroke="#d93025" stroke-dasharray="5 4" stroke-width="1.5"/>')
    out.append(f'<text x="{width - pad}" y="{pad - 8}" text-anchor="end" fill="#d93025">memory limit: '
               f'{bandwidth:.1f} GB/s ÷ bytes a token (NumPy, {threads} threads for every engine)</text>')
    # What a label must not cover: every point, and the labels placed so far (x0, x1, y0, y1).
    boxes = [(sx(x) - 5, sx(x) + 5, sy(y) - 5, sy(y) + 5) for x, y in points.values()]
    for path, (x, y) in sorted(points.items(), key=lambda item: -item[1][1]):
        cx, cy = sx(x), sy(y)
        text = f"{labels[path]}: {y:.0f} tok/s"
        right = cx < width / 2
        x0 = cx + 8 if right else cx - 8 - CHAR_WIDTH * 10 * len(text)
        x1 = x0 + CHAR_WIDTH * 10 * len(text)
        # beside its point, else the nearest free row below or above it (rows a label's height apart), inside the axes
        rows = [cy + 4 + 13 * k * side for k in range(height // 13) for side in ((1,) if k == 0 else (1, -1))]
        free = [y for y in rows if pad + 10 <= y <= height - pad - 3
                and not any(x0 < b1 and b0 < x1 and y - 10 < c1 and c0 < y + 3 for b0, b1, c0, c1 in boxes)]
        label_y = free[0] if free else cy + 4
        boxes.append((x0, x1, label_y - 10, label_y + 3))
        out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="{ROOFLINE_COLOURS[path]}"/>')
        if abs(label_y - 4 - cy) > 8:  # moved to clear another label: a leader line to its point
            out.append(f'<line x1="{cx:.1f}" y1="{cy:.1f}" x2="{x0 if right else x1:.1f}" y2="{label_y - 4:.1f}" '
                       f'stroke="currentColor" stroke-width="0.5"/>')
        out.append(f'<text x="{x0:.1f}" y="{label_y:.1f}" font-size="10">{text}</text>')
    out.append("</svg>")
    file.write_text("\n".join(out) + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--serve" in argv:  # a served model under load (course.programs.serve_bench; the `serve` extra)
        from course.programs import serve_bench

        return serve_bench.main([arg for arg in argv if arg != "--serve"])
    p = argparse.ArgumentParser(prog="pixi run bench", description=__doc__.split("\n")[0] + (
        " Runs solutions/; offline, on GPT-2 small's sizes with random weights unless --model names a checkpoint."),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--device", choices=["cpu", "gpu"], default="cpu", help="where both sides run")
    p.add_argument("--new-tokens", type=int, default=64, help="greedy tokens generated per run")
    p.add_argument("--prompt-tokens", type=int, default=12, help="length of the (random) prompt")
    p.add_argument("--rounds", type=int, default=3, help="runs per path; the medians are reported")
    p.add_argument("--layers", type=int, default=12, help="n_layer of the random model (GPT-2 small: 12)")
    p.add_argument("--model", help="a checkpoint (Hub id or folder, as for main) instead of random weights")
    p.add_argument("--quantize", nargs="+", choices=QUANTIZE, default=[], help="add step 16's model and cache with weights in these formats (CPU only)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--paths", nargs="+", choices=list(PATHS), help="time only these paths (hf is always timed: "
                   "the × Hugging Face column divides by it); e.g. leave out no_cache for long runs, where it is slow")
    p.add_argument("--plot", type=Path, help="write decode tok/s against generated length as an SVG")
    p.add_argument("--roofline", type=Path, help="write decode tok/s against MB of weights read a token, with the "
                   "memory limit NumPy measures here, as an SVG (GPT-2 only)")
    p.add_argument("--eval-tokens", type=int, default=1024, help="with --quantize: held-out tokens each format is scored on")
    p.add_argument("--worker-timeout", type=float, default=1800, help="seconds a path's process may take (its "
                   "compiles, timing and scoring) before bench stops it and says so")
    p.add_argument("--worker", choices=list(PATHS), help=argparse.SUPPRESS)
    p.add_argument("--gguf-dir", help=argparse.SUPPRESS)  # where the llama.cpp paths' GGUF files are
    args = p.parse_args(argv)
    if args.worker:
        result = worker(args.worker, args.new_tokens, args.prompt_tokens, args.device, args.model, args.eval_tokens,
                        args.gguf_dir)
        print(json.dumps(result))
        return 0
    if args.new_tokens < 3 or args.prompt_tokens < 1 or args.rounds < 1:
        raise SystemExit("bench: --new-tokens must be 3 or more, --prompt-tokens and --rounds 1 or more")
    if not args.worker_timeout > 0:
        raise SystemExit(f"bench: --worker-timeout must be more than 0 seconds, not {args.worker_timeout:g}")
    _refuse_unfair_gpu(args.device)
    bandwidth = None
    if args.roofline:  # measured first, while nothing else runs
        from course.programs.generate import import_steps

        bandwidth = import_steps("solutions", SOLUTIONS, [16])[16].measure_bandwidth()
    paths = ["hf", "no_cache", "cache", "decode", *(["kernel"] if args.device == "cpu" else []),
             *(f"cache_{name}" for name in args.quantize),
             *(f"kernel_{name}" for name in args.quantize if args.device == "cpu")]
    from course.programs import llama

    family = "gpt2"
    if args.model is not None:  # a Hub id, a folder or `course`, found (downloaded) once for every path
        from course.checkpoints import CheckpointError, find

        try:
            found = find(args.model)
        except CheckpointError as error:
            raise SystemExit(f"bench: {error}") from None
        family = found.family
    if family == "llama":
        if args.quantize or args.roofline:
            flag = "--quantize" if args.quantize else "--roofline"
            raise SystemExit(f"bench: {flag} runs Part I's GPT-2 (chapters 15 and 16); {args.model} is a Llama, "
                             "which Part II runs in float32: leave it out")
        paths = list(LLAMA_PATHS)
        err.print("[dim]A Llama checkpoint: Hugging Face, ours without a cache and with step 24's; step 16's decode "
                  "graph and the llama.cpp peer are Part I's (GPT-2) only.[/]")
    labels = LLAMA_PATHS if family == "llama" else PATHS
    peer = llama.version() if family == "gpt2" else None
    if peer is None and family == "gpt2":
        err.print(f"[dim]llama.cpp is not installed, so bench times no peer: {escape(llama.INSTALL)}.[/]")
    with tempfile.TemporaryDirectory(prefix="bench-") as scratch:
        model = args.model
        if model is not None:
            model = str(found.folder.resolve())  # each path's process runs in the course's folder, not this one
        else:
            from course.weights import random_checkpoint

            with err.status(f"Writing GPT-2 small's sizes ({args.layers} layers) with random weights as a checkpoint …"):
                model = str(random_checkpoint(Path(scratch) / "random-gpt2", n_layer=args.layers))
        if peer is not None:  # the same checkpoint as GGUF, beside it in the scratch folder the workers read
            with err.status("Writing the checkpoint as GGUF for llama.cpp (f32, then its own quantizer) …"):
                llama.files(Path(model), Path(scratch), list(args.quantize))
            args.gguf_dir = scratch
            paths += ["llama_f32", *(f"llama_{name}" for name in args.quantize)]
        if args.paths:
            paths = [path for path in paths if path == "hf" or path in args.paths]
        if kernel_paths := [path for path in paths if path.startswith("kernel")]:
            from course.runtime import KernelError, kernels

            try:
                kernels()  # compiled once here, not in each round's worker
            except KernelError as error:
                paths = [path for path in paths if path not in kernel_paths]
                err.print(f"[dim]No Mojo kernel paths ({', '.join(kernel_paths)}): {escape(str(error))}.[/]")
        runs = _run_all(paths, args, model, labels)
        config = import_steps_config(model) if args.roofline else None  # before the scratch folder goes
    results = {path: _median(r) for path, r in runs.items()}
    hf = results["hf"]["decode_tok_s"]
    rounds_vs_peer = paired_ratios(runs)  # each round's pair ran one after the other
    vs_peer = {path: statistics.median(ratios) for path, ratios in rounds_vs_peer.items()}
    perplexities = _perplexities(results)
    if args.plot:
        plot(results, args.plot, labels)
    if args.roofline:
        roofline(results, args.roofline, labels, config, bandwidth, llama.threads())
        err.print(f"[dim]Roofline: {bandwidth:.1f} GB/s measured by NumPy before the runs; wrote {escape(str(args.roofline))}.[/]")
    if args.json:
        out = {}
        for path, r in results.items():
            out[path] = {"prefill_ms": round(r["prefill_ms"], 2), "decode_tok_s": round(r["decode_tok_s"], 2),
                         "vs_hf": round(r["decode_tok_s"] / hf, 3), "kv_cache": r["kv_cache"], "tokens": r["tokens"]}
            if path in vs_peer:
                out[path] |= {"vs_llama_cpp": round(vs_peer[path], 3),
                              "vs_llama_cpp_rounds": [round(ratio, 3) for ratio in rounds_vs_peer[path]]}
            if "accuracy" in r:
                out[path] |= {"top1_vs_fp32": round(r["accuracy"]["top1"], 4), "max_logit_err": round(r["accuracy"]["max_abs_err"], 4)}
            if path in perplexities:
                out[path]["perplexity"] = round(perplexities[path], 4)
        print(json.dumps(out))
        return 0
    weights = f"{args.model}'s weights" if args.model else f"{args.layers} layers, random weights"
    name = "Llama" if family == "llama" else "GPT-2"
    table = Table(title=f"{name} ({weights}, {args.device}), {args.prompt_tokens}-token prompt, {args.new_tokens} new tokens, greedy; medians of {args.rounds} rounds"
                  + ("; × llama.cpp: the median of each round's ratio (their range)" if vs_peer and args.rounds > 1 else ""))
    columns = ["path", "KV cache", "prefill ms", "decode tok/s", "× Hugging Face"] + (["× llama.cpp"] if vs_peer else [])
    columns += ["perplexity", "top-1 vs fp32", "max |Δ logit|"] if args.quantize else []
    for column in columns:
        table.add_column(column, justify="left" if column == "path" else "right")
    for path, r in results.items():
        row = [labels[path], r["kv_cache"], f"{r['prefill_ms']:.1f}", f"{r['decode_tok_s']:.1f}", f"{r['decode_tok_s'] / hf:.2f}"]
        row += [_ratio_cell(rounds_vs_peer[path]) if path in vs_peer else ""] if vs_peer else []
        if args.quantize:
            a = r.get("accuracy")
            row.append(f"{perplexities[path]:.2f}" if path in perplexities else "")
            row += [f"{round(a['top1'] * a['steps'])}/{a['steps']}", f"{a['max_abs_err']:.3f}"] if a else ["", ""]
        table.add_row(*row)
    # off a terminal (a file, a pipe) rich would wrap the table at 80 columns: keep each row on one line there
    Console(highlight=False, width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 1000).print(table)
    threads = llama.threads()
    err.print(f"[dim]Threads: {threads} for every engine (MAX's and PyTorch's default, llama.cpp's n_threads). "
              + (f"llama.cpp: llama-cpp-python {peer}, GGUF written from the same checkpoint, quantized by "
                 f"llama_model_quantize with every tensor in the one format (pure). "
                 if peer and any(path.startswith("llama_") for path in results) else "")
              + f"Command: {escape(' '.join(['python -m course.programs.bench', *(argv if argv is not None else sys.argv[1:])]))}[/]",
              soft_wrap=True)  # the command whole on one line, to copy
    if a := next((r["accuracy"] for r in results.values() if "accuracy" in r), None):
        err.print(f"[dim]Every row scores the same {a['steps']} next tokens of held-out text (lower perplexity is better; "
                  f"top-1 and |Δ logit| against float32, whose logits have a standard deviation of {a['logit_std']:.2f}).[/]")
    return 0


def _ratio_cell(ratios: list[float]) -> str:
    """The "× llama.cpp" cell: the median of the rounds' ratios, and their range when there are two or more."""
    median = f"{statistics.median(ratios):.2f}"
    return median if len(ratios) == 1 else f"{median} ({min(ratios):.2f}–{max(ratios):.2f})"


def import_steps_config(model: str):
    """Step 01's GPT2Config of the checkpoint folder ``model`` (step 14's config_from_json)."""
    from course.checkpoints import find
    from course.programs.generate import import_steps

    return import_steps("solutions", SOLUTIONS, [14])[14].config_from_json(find(model).config)


def _perplexities(results: dict) -> dict[str, float]:
    """Each path's perplexity on the held-out tokens: Hugging Face's, float32's (on the cache row) and each format's."""
    out = {path: r["perplexity"] for path, r in results.items() if "perplexity" in r}
    for path, r in results.items():
        if "accuracy" in r:
            out["cache"] = r["accuracy"]["perplexity_fp32"]
            out[path] = r["accuracy"]["perplexity"]
    return out


def _run_all(paths: list[str], args, model: str, labels: dict[str, str] = PATHS) -> dict[str, list[dict]]:
    """Every path, round after round (each llama.cpp path after its partners: ``run_order``), each in its own
    process; a line per finished run."""
    runs = {path: [] for path in paths}
    for round_ in range(1, args.rounds + 1):
        for path in run_order(paths):
            started = time.perf_counter()
            with err.status(f"round {round_}/{args.rounds}: {labels[path]} (its own process; "
                            "a first MAX run compiles for minutes) …"):
                scored = round_ == 1 and bool(args.quantize) and (path == "hf" or path.startswith(("cache_", "kernel_")))
                run = _run_worker(path, args, model, accuracy=scored)
            runs[path].append(run)
            err.print(f"[dim]round {round_}/{args.rounds}: {labels[path]}: {run['decode_tok_s']:.1f} tok/s "
                      f"({time.perf_counter() - started:.0f} s)[/]")
    return runs


if __name__ == "__main__":
    sys.exit(main())
