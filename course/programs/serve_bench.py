"""``pixi run bench --serve``: a served model's throughput and latency with 1, 4 and 8 clients at once.

    pixi run -e serve bench --serve                        # the course's Llama on MAX's own Llama architecture
    pixi run -e serve bench --serve --clients 1 8 --requests 50 --max-batch-size 8

The server (``course.programs.serve``) runs in its own process and is started once; bench then sends, for each
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

    def quantile(q):
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else float("nan")

    tokens = sum(made for _, made, _ in results)
    return {"clients": clients, "requests": len(results), "tokens": tokens,
            "tok_s": tokens / wall, "p50_s": quantile(0.5), "p95_s": quantile(0.95),
            "failed": len(failures), "failures": failures[:3]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench --serve", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="course-llama", help="what serve serves (default course-llama)")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 4, 8], help="clients at once (default 1 4 8)")
    p.add_argument("--requests", type=int, default=4, help="completions each client sends (default 4)")
    p.add_argument("--max-tokens", type=int, default=32, help="tokens each completion asks for (default 32)")
    p.add_argument("--max-batch-size", type=int, default=8, help="the server's batch size (default 8)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    port = serve.free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "course.programs.serve", "--model", args.model, "--port", str(port),
               "--max-batch-size", str(args.max_batch_size)]
    with tempfile.TemporaryFile("w+") as log:
        started = time.perf_counter()
        server = serve.start(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                  env=dict(os.environ, PYTHONPATH=str(ROOT)))
        try:
            serve.ready(url, server)
            start = time.perf_counter() - started
            rows = [load(url, args.model, clients, args.requests, args.max_tokens) for clients in args.clients]
        except serve.Stop as error:
            log.seek(0)
            print(f"bench --serve: {error}\n{log.read()[-3000:]}", file=sys.stderr)
            return 1
        finally:
            serve.stop(server)
    settings = {"model": args.model, "max_batch_size": args.max_batch_size, "max_tokens": args.max_tokens,
                "requests_per_client": args.requests, "start_s": round(start, 1), "cpus": os.cpu_count(),
                "command": " ".join(["python -m course.programs.bench --serve",
                                     *(arg for arg in (sys.argv[1:] if argv is None else argv) if arg != "--serve")])}
    if args.json:
        print(json.dumps({"settings": settings, "rows": rows}))
        return 0
    print(f"max serve, {args.model} on MAX's Llama, CPU, --max-batch-size {args.max_batch_size}; {args.requests} "
          f"requests a client of {args.max_tokens} greedy tokens; ready in {start:.0f} s")
    print("| clients | requests | tok/s | × one client | p50 latency (s) | p95 latency (s) | failed |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    one = rows[0]["tok_s"] if rows and rows[0]["clients"] == 1 else None
    for row in rows:
        ratio = f"{row['tok_s'] / one:.2f}" if one else "–"
        print(f"| {row['clients']} | {row['requests']} | {row['tok_s']:.1f} | {ratio} | {row['p50_s']:.2f} | "
              f"{row['p95_s']:.2f} | {row['failed']} |")
        for failure in row["failures"]:
            print(f"  failed: {failure}")
    print(f"command: {settings['command']}")
    return 0 if not any(row["failed"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
