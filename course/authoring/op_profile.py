"""A per-op profile of decode steps, read from MAX's own op log (the appendix "Past the roofline", "Where MAX stops").

    python -m course.authoring.op_profile                   # step 16's decode graph, GPT-2 small's sizes
    python -m course.authoring.op_profile --path cache      # step 15's graph
    python -m course.authoring.op_profile --model DIR       # another GPT-2 checkpoint folder
    python -m course.authoring.op_profile --quantize q6_k [--kernel]   # q6_k weights (MAX's qmatmul, or the course's kernel)

MAX 26.7's pip package has no CPU profiler a course can read. Its runtime does log every
op it launches and completes, when the graph is compiled with MAX's op log level at
TRACE (``MODULAR_MAX_DEBUG_OP_LOG_LEVEL=TRACE``, compiled into the graph). So a child
process compiles the model that way, with bench's random GPT-2 small weights, and decodes
``--tokens`` tokens after a 12-token prompt; this process reads the child's log through a
pipe and timestamps each line as it arrives. An op's time is from its LAUNCH line to its
COMPLETE line; "between ops" is the rest of each step inside the graph call; "Python" is
the rest of the step (the call into the graph and back, the argmax).

Writing and reading a line per event costs time of its own, so a logged step is slower
than bench's: the shares, not the milliseconds, are the profile. The first run compiles
a new graph (the log level is part of it): a minute or two; later runs load it.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EVENT = re.compile(r"\[OP\] (LAUNCH|COMPLETE) (.*) \[id=(\d+)\]")
#: What the op names say, in words, first match wins.
KINDS = [
    ("whole blocks, one op each (--kernel, float32: products, attention and all)", re.compile(r"block_one_row", re.I)),
    ("the head and the layers' products (matmul)", re.compile(r"matmul|one_row", re.I)),
    ("the attention by the Mojo kernel (--kernel)", re.compile(r"attend_one", re.I)),
    ("concat (step 15: the cache, copied; step 16: the scores)", re.compile(r"concat", re.I)),
    ("softmax", re.compile(r"softmax", re.I)),
    ("layer norms, GELU, adds (fused elementwise)", re.compile(r"elementwise|foreach", re.I)),
    ("reductions (mean, max, sum)", re.compile(r"reduce|mean|sum|max", re.I)),
    ("gather, slices, reshapes, copies", re.compile(r"gather|slice|reshape|transpose|copy|view|broadcast", re.I)),
]


def child(path: str, model: str, tokens: int, quantize: str | None, kernel: bool) -> None:
    """Compiles ``path``'s graph with the op log on, and decodes, marking each step on stdout."""
    from course import runtime

    runtime.setup()
    from course.programs.build import compile_model, load
    from course.programs.generate import import_steps

    steps = import_steps("solutions", ROOT / "solutions", [11, 13, 14, 15, 16])
    pretrained = load(steps, model, "gpt2")
    from max.driver import CPU

    next_logits = compile_model(steps, pretrained, CPU(), cached=True, decode=path == "decode",
                                quantize=quantize, kernel=kernel)
    ids = list(range(100, 112))
    kwargs = dict(n_positions=pretrained.config.n_positions, temperature=0.0)
    list(steps[13].generate(next_logits, ids, 4, **kwargs))  # compiles step 16's decode graph, warms up
    print("@@ START")  # the parent starts the child with python -u: each line leaves at once
    for token in steps[13].generate(next_logits, ids, tokens, **kwargs):
        print(f"@@ STEP {token}")


def read(process: subprocess.Popen) -> list[list[tuple[float, str, str, int]]]:
    """The child's events, timestamped as they arrive, split into steps: [(t, kind, name, id), …] per step."""
    steps, current, started = [], None, False
    for line in process.stdout:
        now = time.perf_counter()
        if line.startswith("@@ START"):
            started, current = True, []  # the prefill's step, left out below: no mark needed
        elif line.startswith("@@ STEP") and started:
            current.append((now, "MARK", "", -1))
            steps.append(current)
            current = [(now, "MARK", "", -1)]
        elif started and (match := EVENT.search(line)):
            current.append((now, match[1], match[2], int(match[3])))
    return steps[1:]  # the first marked step holds the prefill: decode steps only


def profile(step: list[tuple[float, str, str, int]]) -> tuple[dict[str, float], dict[str, int], float, float, float]:
    """Seconds per outermost op name, their counts, the time between ops, Python's time, and the whole step."""
    seconds, counts, open_ops, depth = defaultdict(float), defaultdict(int), {}, 0
    first = last = None
    for t, kind, name, op_id in step[1:-1]:
        if kind == "LAUNCH":
            if depth == 0:
                open_ops[op_id] = t
                first = t if first is None else first
            depth += 1
        elif kind == "COMPLETE":
            depth -= 1
            if depth == 0 and op_id in open_ops:
                seconds[name] += t - open_ops.pop(op_id)
                counts[name] += 1
                last = t
    whole = step[-1][0] - step[0][0]
    inside = (last - first) if first is not None else 0.0
    return seconds, counts, inside - sum(seconds.values()), whole - inside, whole


def kind_of(name: str) -> str:
    return next((kind for kind, pattern in KINDS if pattern.search(name)), "other")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.authoring.op_profile", description=__doc__.split("\n")[0])
    parser.add_argument("--path", choices=("decode", "cache"), default="decode",
                        help="step 16's decode graph, or step 15's cached graph")
    parser.add_argument("--model", help="a GPT-2 checkpoint folder (default: bench's random GPT-2 small)")
    parser.add_argument("--tokens", type=int, default=24, help="decode steps to log")
    parser.add_argument("--top", type=int, default=12, help="op names to list")
    parser.add_argument("--quantize", choices=("q4_0", "q4_k", "q6_k"), help="the quantized model's graph")
    parser.add_argument("--kernel", action="store_true", help="step 16's graph with the course's Mojo kernel")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.path, args.model, args.tokens, args.quantize, args.kernel)
        return 0

    with tempfile.TemporaryDirectory(prefix="op-profile-") as scratch:
        model = args.model
        if model is None:
            from course.weights import random_checkpoint

            model = str(random_checkpoint(Path(scratch) / "random-gpt2", n_layer=12))
        command = [sys.executable, "-u", "-m", "course.authoring.op_profile", "--child", "--path", args.path,
                   "--model", model, "--tokens", str(args.tokens)]
        command += ["--quantize", args.quantize] if args.quantize else []
        command += ["--kernel"] if args.kernel else []
        env = {**os.environ, "MODULAR_MAX_DEBUG_OP_LOG_LEVEL": "TRACE"}
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, bufsize=1)
        steps = read(process)
        if process.wait() != 0 or not steps:
            raise SystemExit("op_profile: the decoding process failed (run it with --child to see why)")

    per_step = [profile(step) for step in steps]
    whole = statistics.median(p[4] for p in per_step)
    names = {name for p in per_step for name in p[0]}
    median = {name: statistics.median(p[0].get(name, 0.0) for p in per_step) for name in names}
    count = {name: max(p[1].get(name, 0) for p in per_step) for name in names}
    between, python = statistics.median(p[2] for p in per_step), statistics.median(p[3] for p in per_step)

    from rich.console import Console
    from rich.table import Table

    label = "step 16's decode graph" if args.path == "decode" else "step 15's cached graph"
    label += f", {args.quantize} weights" if args.quantize else ""
    label += ", the course's Mojo kernel" if args.kernel else ""
    print(f"$ python -m course.authoring.op_profile --path {args.path} --tokens {args.tokens} --top {args.top}"  # every setting
          + (f" --model {args.model}" if args.model else "") + (f" --quantize {args.quantize}" if args.quantize else "")
          + (" --kernel" if args.kernel else ""))
    print(f"{label}, {len(steps)} logged decode steps, medians; a logged step takes {1000 * whole:.1f} ms")
    kinds: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for name in names:
        kinds[kind_of(name)][0] += median[name]
        kinds[kind_of(name)][1] += count[name]
    table = Table("where a decode step's time goes", "ops per step", "ms per step", "share")
    for kind, (seconds, n) in sorted(kinds.items(), key=lambda item: -item[1][0]):
        table.add_row(kind, str(n), f"{1000 * seconds:.2f}", f"{seconds / whole:.0%}")
    table.add_row("between ops, inside the graph (the runtime's own work)", "", f"{1000 * between:.2f}",
                  f"{between / whole:.0%}")
    table.add_row("Python: into the graph and back, the argmax", "", f"{1000 * python:.2f}", f"{python / whole:.0%}")
    console = Console(width=120)
    console.print(table)
    top = Table(f"the {args.top} costliest op names", "ops per step", "ms per step", "µs each")
    for name in sorted(names, key=lambda n: -median[n])[:args.top]:
        top.add_row(name[:70], str(count[name]), f"{1000 * median[name]:.2f}",
                    f"{1e6 * median[name] / max(count[name], 1):.0f}")
    console.print(top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
