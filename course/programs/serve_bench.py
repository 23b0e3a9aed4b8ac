"""``pixi run bench --serve``: a served model's throughput and latency with 1, 4 and 8 clients at once.

    pixi run -e serve bench --serve                        # the course's GPT-2 (step 25), then its Llama (MAX's)
    pixi run -e serve bench --serve --clients 1 8 --requests 50 --max-batch-size 8

Where llama.cpp's own server is found (``course.programs.llama_server``: ``--build`` makes one), GPT-2 is also
served by it, on the same weights as float32 GGUF, with as many parallel slots as ``--max-batch-size``, its KV
cache in float32 and as many threads as MAX may use.

Each server (``course.programs.serve``, or ``llama-server``) runs in its own process and is started once a round;
bench then sends, for each
number of clients, ``--requests`` completions per client (greedy, ``--max-tokens`` tokens each, the same prompt),
each client one request after the other, all clients at once. It reports the tokens the server made a second
(every completion's tokens over the wall time), each request's latency (p50 and p95), and how many requests came
back incomplete or failed: none should. The first request of each client count is a warm-up and is not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from course.outline import ROOT
from course.programs import serve

PROMPT = "In the beginning God created the heaven and the earth."


def complete(url: str, model: str, tokens: int, timeout: float = 600) -> tuple[float, int, str | None]:
    """One greedy completion: (seconds, completion tokens, what went wrong or None)."""
    body = json.dumps({"model": model, "prompt": PROMPT, "max_tokens": tokens, "temperature": 0}).encode()
    request = urllib.request.Request(f"{url}/v1/completions", body, {"Content-Type": "application/json"})
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            reply = json.loads(answer.read())
    except Exception as error:  # noqa: BLE001 - a lost request is counted, with its reason
        return time.perf_counter() - started, 0, f"{type(error).__name__}: {error}"
    seconds = time.perf_counter() - started
    made = int(reply.get("usage", {}).get("completion_tokens", 0))
    ended = reply["choices"][0].get("finish_reason")
    if made == 0 or ended not in ("length", "stop"):
        return seconds, made, f"incomplete: finish_reason {ended!r}, {made} tokens"
    return seconds, made, None


def quantile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of ``ordered`` (sorted) as the value at ``q`` of the way along it (NaN when empty)."""
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def load(url: str, model: str, clients: int, requests: int, tokens: int) -> dict:
    """``clients`` at once, each sending ``requests`` completions one after another: tok/s, latencies, failures."""
    def client(_):
        return [complete(url, model, tokens) for _ in range(requests)]

    with ThreadPoolExecutor(clients) as pool:  # warm-up: one request per client, at once
        list(pool.map(lambda _: complete(url, model, tokens), range(clients)))
        started = time.perf_counter()
        results = [item for items in pool.map(client, range(clients)) for item in items]
        wall = time.perf_counter() - started
    latencies = sorted(seconds for seconds, _, problem in results if problem is None)
    failures = [problem for _, _, problem in results if problem is not None]
    tokens = sum(made for _, made, _ in results)
    return {"clients": clients, "requests": len(results), "tokens": tokens,
            "tok_s": tokens / wall, "p50_s": quantile(latencies, 0.5), "p95_s": quantile(latencies, 0.95),
            "failed": len(failures), "failures": failures[:3], "latencies": latencies}


def medians(rounds: list[list[dict]]) -> list[dict]:
    """One server's rows over several rounds: each client count's median tok/s (and the rounds' own), the
    latencies of every round's requests pooled for p50 and p95, the requests and failures summed."""
    merged = []
    for same in zip(*rounds):
        latencies = sorted(t for row in same for t in row["latencies"])
        merged.append({"clients": same[0]["clients"], "requests": sum(r["requests"] for r in same),
                       "tokens": sum(r["tokens"] for r in same),
                       "tok_s": statistics.median(r["tok_s"] for r in same),
                       "rounds_tok_s": [round(r["tok_s"], 1) for r in same],
                       "p50_s": quantile(latencies, 0.5), "p95_s": quantile(latencies, 0.95),
                       "failed": sum(r["failed"] for r in same),
                       "failures": [f for r in same for f in r["failures"]][:3]})
    return merged


#: bench's name for llama.cpp's server, beside serve's --llama choices (max, course).
LLAMA_CPP = "llama.cpp"
#: What a server runs its model on, by (family, --llama): the architecture a row of the table names.
ARCHITECTURE = {("gpt2", "max"): "the course's step 25", ("gpt2", "course"): "the course's step 25",
                ("llama", "max"): "MAX's Llama", ("llama", "course"): "the course's step 26",
                ("gpt2", LLAMA_CPP): "llama.cpp's server"}


def servers(models: list[str], llamas: list[str], peer: bool = False) -> list[tuple[str, str, str]]:
    """(model, --llama, what it runs on) for each server to start: GPT-2 once (and once on llama.cpp's server,
    with ``peer``), a Llama once a ``--llama``."""
    from course import checkpoints

    found = []
    for model in models:
        family = checkpoints.find(model).family
        for llama in (llamas if family == "llama" else ["max", *[LLAMA_CPP] * peer]):
            found.append((model, llama, ARCHITECTURE[family, llama]))
    return found


def peer_command(model: str, port: int, args) -> list[str]:
    """llama-server (``args.server``) on ``model``'s weights (float32 GGUF, written once a run into
    ``args.scratch``), with as many slots as MAX's batch and bench's threads."""
    from course import checkpoints
    from course.programs import llama, llama_server

    found = checkpoints.find(model)
    gguf = Path(args.scratch) / f"{found.folder.name}-f32.gguf"
    if not gguf.is_file():
        llama.write_f32(found.folder, gguf)
    return llama_server.command(args.server, gguf, "127.0.0.1", port, args.max_batch_size,
                                int(found.config["n_positions"]), llama.threads())


def serve_one(model: str, llama: str, args) -> tuple[float, list[dict]]:
    """Starts ``serve`` on ``model`` in a process of its own, loads it with each client count, stops it: the
    seconds it took to answer, and a row a client count."""
    port = serve.free_port()
    url = f"http://127.0.0.1:{port}"
    command = peer_command(model, port, args) if llama == LLAMA_CPP else [
        sys.executable, "-m", "course.programs.serve", "--model", model, "--llama", llama, "--port", str(port),
        "--max-batch-size", str(args.max_batch_size)]
    with tempfile.TemporaryFile("w+") as log:
        started = time.perf_counter()
        server = serve.start(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                             env=dict(os.environ, PYTHONPATH=str(ROOT)))
        try:
            serve.ready(url, server, name="llama-server" if llama == LLAMA_CPP else "max serve")
            start = time.perf_counter() - started
            rows = [load(url, model, clients, args.requests, args.max_tokens) for clients in args.clients]
        except serve.Stop as error:
            log.seek(0)
            raise serve.Stop(f"{model}: {error}\n{log.read()[-3000:]}") from None
        finally:
            serve.stop(server)
    return start, rows


#: A line's colour in the plot, by what the server runs on.
COLOURS = {"the course's step 25": "#1f77b4", "MAX's Llama": "#d62728", "the course's step 26": "#2ca02c",
           "llama.cpp's server": "#ff7f0e"}


def plot(rows: list[dict], file: Path) -> None:
    """tok/s against the clients at once, one line a server, as a plain SVG (the serving chapter's figure)."""
    lines: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        lines.setdefault(f"{row['model']} on {row['architecture']}", []).append((row["clients"], row["tok_s"]))
    width, height, pad, legend = 600, 340, 50, 120
    x_max = max(c for points in lines.values() for c, _ in points)
    y_max = max(t for points in lines.values() for _, t in points) * 1.15
    sx = lambda x: pad + (width - pad - 20) * x / x_max  # noqa: E731
    sy = lambda y: height - pad - (height - pad - legend) * y / y_max  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" role="img" '
           f'aria-label="Tokens a second against clients at once, a line per server" style="max-width: 100%; '
           f'height: auto" font-family="sans-serif" font-size="12" fill="currentColor">',
           f'<line x1="{pad}" y1="{height - pad}" x2="{width - 20}" y2="{height - pad}" stroke="currentColor"/>',
           f'<line x1="{pad}" y1="{legend}" x2="{pad}" y2="{height - pad}" stroke="currentColor"/>',
           f'<text x="{(pad + width) / 2}" y="{height - 12}" text-anchor="middle">clients at once</text>',
           f'<text x="14" y="{(legend + height - pad) / 2}" transform="rotate(-90 14 {(legend + height - pad) / 2})" '
           f'text-anchor="middle">tok/s, all clients</text>']
    for k in range(5):
        out.append(f'<text x="{pad - 6}" y="{sy(y_max * k / 4) + 4:.0f}" text-anchor="end">{y_max * k / 4:.0f}</text>')
    for clients in sorted({c for points in lines.values() for c, _ in points}):
        out.append(f'<text x="{sx(clients):.0f}" y="{height - pad + 16}" text-anchor="middle">{clients}</text>')
    for i, (name, points) in enumerate(lines.items()):
        colour = COLOURS.get(name.split(" on ", 1)[1], "#7f7f7f")
        line = " ".join(f"{sx(c):.1f},{sy(t):.1f}" for c, t in points)
        out.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2"/>')
        out += [f'<circle cx="{sx(c):.1f}" cy="{sy(t):.1f}" r="3" fill="{colour}"/>' for c, t in points]
        out.append(f'<text x="{pad + 10}" y="{24 + 18 * i}" fill="{colour}">— {name}</text>')
    out.append("</svg>")
    file.write_text("\n".join(out) + "\n")


def main(argv: list[str] | None = None) -> int:
    from course import checkpoints

    p = argparse.ArgumentParser(prog="bench --serve", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", nargs="+", default=["course", "course-llama"],
                   help="what serve serves, one server after the other (default: course course-llama)")
    p.add_argument("--llama", nargs="+", choices=["max", "course"], default=["max", "course"],
                   help="what a Llama runs on, a server each: MAX's Llama, the course's step 26 (default: both)")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 4, 8], help="clients at once (default 1 4 8)")
    p.add_argument("--requests", type=int, default=4, help="completions each client sends (default 4)")
    p.add_argument("--max-tokens", type=int, default=32, help="tokens each completion asks for (default 32)")
    p.add_argument("--max-batch-size", type=int, default=8, help="the server's batch size (default 8)")
    p.add_argument("--rounds", type=int, default=3,
                   help="times every server is started and loaded, in turn; tok/s is the rounds' median (default 3)")
    p.add_argument("--llama-server", choices=["auto", "off"], default="auto",
                   help="auto (the default): GPT-2 on llama.cpp's server too, where one is found; off: never")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", type=Path, help="also write tok/s against clients as an SVG, a line per server")
    args = p.parse_args(argv)
    from course.programs import llama_server
    from course.programs.llama import threads

    rows, starts = [], {}
    args.server, missing = None, None  # llama.cpp's server, or why there is none (neither: --llama-server off)
    if args.llama_server == "auto":
        try:
            args.server = llama_server.find()
        except llama_server.Missing as error:
            missing = str(error)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-serve-") as args.scratch:
            order = servers(args.model, args.llama, args.server is not None)
            found: dict[tuple, list[list[dict]]] = {server: [] for server in order}
            for _ in range(args.rounds):  # every server once a round, in turn: a slow spell of the machine hits all
                for model, llama, runs_on in order:
                    starts[f"{model} on {runs_on}"], measured = serve_one(model, llama, args)
                    found[model, llama, runs_on].append(measured)
        for (model, _, runs_on), rounds in found.items():
            rows += [dict(row, model=model, architecture=runs_on) for row in medians(rounds)]
    except (serve.Stop, checkpoints.CheckpointError) as error:
        print(f"bench --serve: {error}", file=sys.stderr)
        return 1
    settings = {"models": args.model, "max_batch_size": args.max_batch_size, "max_tokens": args.max_tokens,
                "requests_per_client": args.requests, "rounds": args.rounds, "start_s": {m: round(s, 1) for m, s in starts.items()},
                "cpus": os.cpu_count(),
                "llama_server": str(args.server or missing or "off"),
                "command": " ".join(["python -m course.programs.bench --serve",
                                     *(arg for arg in (sys.argv[1:] if argv is None else argv) if arg != "--serve")])}
    if args.plot:
        plot(rows, args.plot)
    if args.json:
        print(json.dumps({"settings": settings, "rows": rows}))
        return 0
    print(f"max serve on the CPU ({os.cpu_count()} CPUs), each model's server in its own process, one after the "
          f"other, {args.rounds} rounds; --max-batch-size {args.max_batch_size}; {args.requests} requests a client of "
          f"{args.max_tokens} greedy tokens, the same prompt; tok/s the rounds' median (their range in brackets), "
          f"latencies over every round's requests; last ready in "
          + ", ".join(f"{s:.0f} s ({m})" for m, s in starts.items()))
    if args.server is not None:
        print(f"llama.cpp's server: {args.server}, --parallel {args.max_batch_size}, float32 weights and KV "
              f"cache, {threads()} threads")
    elif missing is not None:
        print(f"llama.cpp's server: none ({missing})")
    print("| model | runs on | clients | requests | tok/s | × one client | p50 latency (s) | p95 latency (s) | failed |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        one = next((r["tok_s"] for r in rows if (r["model"], r["architecture"]) == (row["model"], row["architecture"])
                    and r["clients"] == 1), None)
        ratio = f"{row['tok_s'] / one:.2f}" if one else "–"
        spread = f" ({min(row['rounds_tok_s']):.0f}–{max(row['rounds_tok_s']):.0f})" if len(row["rounds_tok_s"]) > 1 else ""
        print(f"| {row['model']} | {row['architecture']} | {row['clients']} | {row['requests']} | {row['tok_s']:.1f}{spread} | "
              f"{ratio} | {row['p50_s']:.2f} | {row['p95_s']:.2f} | {row['failed']} |")
        for failure in row["failures"]:
            print(f"  failed: {failure}")
    for model in dict.fromkeys(row["model"] for row in rows):
        def by_clients(runs_on):
            return {r["clients"]: r["rounds_tok_s"] for r in rows if (r["model"], r["architecture"]) == (model, runs_on)}

        ours, maxs = by_clients(ARCHITECTURE["llama", "course"]), by_clients(ARCHITECTURE["llama", "max"])
        if ours and maxs:  # the median of the rounds' own ratios: each round ran both servers in turn
            ratios = {c: [a / b for a, b in zip(ours[c], maxs[c])] for c in ours if c in maxs}
            print(f"{model}: the course's step 26 makes " + ", ".join(
                f"{statistics.median(r):.2f}x ({min(r):.2f}–{max(r):.2f}) at {c} client{'s' * (c > 1)}"
                for c, r in ratios.items()) + " of what MAX's Llama makes on the same weights (the rounds' median)")
    print(f"command: {settings['command']}")
    return 0 if not any(row["failed"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
