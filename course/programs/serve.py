"""Serve a course model with MAX's own server (``max serve``), offline, on this machine.

    pixi run serve                               # the course's Llama at http://127.0.0.1:8000/v1
    pixi run serve --model course                # the course's GPT-2, on step 25's code
    pixi run serve --model course --target steps # ... on yours
    pixi run serve --llama course                # the course's Llama on step 26's code, not MAX's Llama
    pixi run serve --model DIR --port 8001       # a folder of your own (GPT-2 or the Llama family)
    python -m course.programs.serve              # the same, without pixi (the `serve` extra installed)

Any OpenAI client then talks to it, for example::

    curl http://127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' \\
        -d '{"model": "course-llama", "prompt": "In the beginning", "max_tokens": 32, "temperature": 0}'

MAX on the CPU reads float32 weights (or GGUF blocks), and its tokenizer from ``tokenizer.json``; the course's
folders store float16 and GPT-2's ``vocab.json``/``merges.txt``. So the first start writes a served copy of the
folder (:func:`prepare`: float32, the tokenizer's files, the same config) under the course's cache, once per
checkpoint, and never touches the original. A Llama-family checkpoint runs on MAX's own Llama architecture.
GPT-2, which MAX has no architecture for, runs on the course's (:mod:`course.architectures`, step 25's model),
and so does a Llama with ``--llama course`` (step 26's, registered over MAX's own Llama): the solutions' code by
default, the learner's with ``--target steps``.

Batching is on (``--max-batch-size``; MAX's default on the CPU serves one request at a time), MAX's telemetry
is off, since the course runs offline, so are MAX's metrics unless you set ``MAX_SERVE_METRIC_RECORDING_METHOD``
(:data:`DEFAULTS`), and MAX's server listens on a port of this machine's own: in front of it,
on ``--host`` and ``--port`` (127.0.0.1 unless told otherwise; MAX's default is every interface), the course's
front door (:mod:`course.programs.front`) reads every completion first and answers a bad one itself, with a 4xx
and a message that names the problem, so that no request can crash MAX's worker.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from course import checkpoints
from course.outline import ROOT, SERVE_STEPS_VARIABLE, STEPS

#: What MAX's server needs set to run offline: no Hub lookups, no telemetry host (it retries it, and logs each try).
OFFLINE = {"HF_HUB_OFFLINE": "1", "MAX_SERVE_DISABLE_TELEMETRY": "1"}
#: MAX's settings the course changes where the user has not set them. Metrics: MAX records every step's in a process
#: of its own by default, and nothing in the course reads them; without it a served GPT-2 made 15% more tokens a
#: second at 1 and at 8 clients on a 2-core VM, for 9% less CPU (the book's log, 2026-12-06).
DEFAULTS = {"MAX_SERVE_METRIC_RECORDING_METHOD": "NOOP"}
#: The files a served copy holds, besides the weights: MAX's tokenizer reads the first two.
TOKENIZER_OUT = ("tokenizer.json", "tokenizer_config.json")
#: Written last into a served copy: the copy is whole.
DONE = "course-served.json"


class Stop(Exception):
    """An expected failure: one line for the user."""


def served_root() -> Path:
    """Where served copies live: ``$COURSE_SERVE_CACHE``, else ``course-serve`` in the user's cache folder."""
    if os.environ.get("COURSE_SERVE_CACHE"):
        return Path(os.environ["COURSE_SERVE_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "course-serve"


def fingerprint(checkpoint: checkpoints.Checkpoint) -> str:
    """What a served copy is a copy of: the config's and the weights' bytes (a changed file is a new copy)."""
    digest = hashlib.sha256()
    for path in (checkpoint.folder / checkpoints.CONFIG, checkpoint.weights_file):
        with path.open("rb") as handle:
            while block := handle.read(1 << 24):
                digest.update(block)
    return digest.hexdigest()[:16]


def prepare(checkpoint: checkpoints.Checkpoint, root: Path | None = None) -> Path:
    """The served copy of ``checkpoint``'s folder, written once: its config with ``dtype`` float32, every tensor
    in float32 (``model.safetensors``), its tokenizer saved by ``transformers`` (``tokenizer.json`` and
    ``tokenizer_config.json``; GPT-2's ``vocab.json`` and ``merges.txt`` are read by ``GPT2TokenizerFast``, since
    ``AutoTokenizer`` would go by config.json's model type), and its generation settings. Written into a temporary folder and renamed, so a
    start cut short leaves no half copy; the original folder is only read."""
    import numpy as np
    from safetensors.numpy import save_file
    from transformers import AutoTokenizer, GPT2TokenizerFast

    root = root or served_root()
    key = fingerprint(checkpoint)
    folder = root / f"{checkpoint.folder.name}-{key}"
    if (folder / DONE).is_file():
        return folder
    root.mkdir(parents=True, exist_ok=True)
    partial = root / f".{folder.name}.{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    config = json.loads((checkpoint.folder / checkpoints.CONFIG).read_text(encoding="utf-8"))
    config.update(dtype="float32", torch_dtype="float32")
    (partial / checkpoints.CONFIG).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    weights = checkpoints.read_weights(checkpoint.weights_file)
    save_file({name: np.ascontiguousarray(value, dtype=np.float32) if np.issubdtype(value.dtype, np.floating)
               else np.ascontiguousarray(value) for name, value in weights.items()},
              str(partial / "model.safetensors"), metadata={"format": "pt"})
    if (checkpoint.folder / checkpoints.TOKENIZER_JSON).is_file():  # a Hub folder: its tokenizer as it is
        tokenizer = AutoTokenizer.from_pretrained(str(checkpoint.folder))
    else:  # GPT-2's byte-level BPE files (the course's folders): its fast tokenizer writes tokenizer.json
        tokenizer = GPT2TokenizerFast.from_pretrained(str(checkpoint.folder))
    tokenizer.save_pretrained(str(partial))
    missing = [name for name in TOKENIZER_OUT if not (partial / name).is_file()]
    if missing:
        raise Stop(f"transformers saved no {', '.join(missing)} for {checkpoint.folder}; MAX's server reads them")
    if (checkpoint.folder / "generation_config.json").is_file():
        shutil.copy2(checkpoint.folder / "generation_config.json", partial / "generation_config.json")
    (partial / DONE).write_text(json.dumps({"from": str(checkpoint.folder), "fingerprint": key}) + "\n")
    try:
        partial.rename(folder)
    except OSError:  # another start wrote it meanwhile: this start's own copy goes
        shutil.rmtree(partial)
    return folder


#: What ``max serve --custom-architectures`` takes: the course's root, and the module, for the course's GPT-2 and
#: for its Llama (registered over MAX's own).
ARCHITECTURES = {"gpt2": f"{ROOT}:course.architectures", "llama": f"{ROOT}:course.llama_architecture"}


def command(folder: Path, host: str, port: int, batch: int, name: str, family: str, llama: str) -> list[str]:
    """``max serve`` for a served copy: MAX's CPU, float32, batching on, listening on ``host``:``port``; GPT-2 on
    the course's architecture, a Llama on MAX's (``llama="course"``: on the course's)."""
    maxs = shutil.which("max", path=str(Path(sys.executable).parent)) or shutil.which("max") or "max"
    ours = family == "gpt2" or llama == "course"
    extra = ["--custom-architectures", ARCHITECTURES[family]] if ours else []
    return [maxs, "serve", "--model-path", str(folder), "--served-model-name", name, "--devices", "cpu",
            "--quantization-encoding", "float32", "--max-batch-size", str(batch), "--host", host, "--port", str(port),
            *extra]


#: The steps each family's served model imports: Part I and step 25 for GPT-2; the Llama adds Part II and step 26.
SERVED_STEPS = {"gpt2": [*range(1, 15), 25], "llama": [*range(1, 15), *range(17, 24), 25, 26]}


def whose_code(target: str, steps_dir: Path, family: str = "gpt2") -> dict[str, str]:
    """The environment that makes MAX's workers import the served steps from the learner's folder (``--target
    steps``); Stop if a step they run on still has a stub."""
    if target == "solutions":
        return {}
    from course.authoring.render import unfinished

    folder = steps_dir.resolve()
    left = unfinished(folder, SERVED_STEPS[family])
    if left:
        todo = ", ".join(f"step {n:02d} ({'TODO ' + ', '.join(map(str, t)) if t else 'the file is missing'})"
                         for n, t in left.items())
        name = "GPT-2" if family == "gpt2" else "Llama"
        raise Stop(f"your {name} is not finished in {folder.name}/: {todo}; check each with `pixi run sNN`, or "
                   f"serve the course's code (leave out --target steps)")
    return {SERVE_STEPS_VARIABLE: str(folder)}


def ready(url: str, process: subprocess.Popen | None = None, timeout: float = 900.0, name: str = "max serve") -> float:
    """Seconds until ``url``/health answers 200 (the model is loaded and compiled); Stop if the server (``name``)
    exits first or ``timeout`` passes."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if process is not None and process.poll() is not None:
            raise Stop(f"{name} exited with code {process.returncode} before it answered {url}/health")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                if answer.status == 200:
                    return time.perf_counter() - started
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise Stop(f"{name} did not answer {url}/health within {timeout:.0f} s")


def environment(code: dict[str, str], own: dict[str, str] | None = None) -> dict[str, str]:
    """The environment ``max serve`` runs in: the user's (``own``, this process's by default) over the course's
    :data:`DEFAULTS`; offline (:data:`OFFLINE`) whatever the user's says; ``code``, where the served steps are."""
    return {**DEFAULTS, **(os.environ if own is None else own), **OFFLINE, **code}


def free_port() -> int:
    """A port of this machine that nothing listens on now: where MAX's server listens, behind the front door."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def served(folder: Path, name: str):
    """What the front door checks requests against (:class:`course.programs.front.Served`), from the served copy:
    the name, the vocabulary, the context (``max_position_embeddings``, GPT-2's ``n_positions``) and the tokenizer's count of a text."""
    from transformers import AutoTokenizer

    from course.programs import front

    config = json.loads((folder / checkpoints.CONFIG).read_text(encoding="utf-8"))
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    return front.Served(name, int(config["vocab_size"]), int(config.get("max_position_embeddings") or config["n_positions"]),
                        lambda text: len(tokenizer(text)["input_ids"]))


def front_door(model, process: subprocess.Popen, behind: int, host: str, port: int, seconds: float) -> int:
    """Serves :mod:`course.programs.front` on ``host``:``port`` in front of MAX's server (listening on ``behind``)
    until Ctrl-C, or until MAX's server exits, whose exit code it then returns."""
    import threading

    import uvicorn

    from course.programs import front

    server = uvicorn.Server(uvicorn.Config(front.app(model, f"http://127.0.0.1:{behind}"), host=host, port=port,
                                           log_level="warning"))

    def watch():  # MAX's server gone: the door closes too
        process.wait()
        server.should_exit = True

    threading.Thread(target=watch, daemon=True).start()
    print(f"serve: {model.name} answers at http://{host}:{port}/v1 (OpenAI API; model name {model.name!r}), ready in "
          f"{seconds:.0f} s; Ctrl-C stops it", flush=True)
    server.run()
    if process.poll() is not None:
        print(f"serve: MAX's server exited with code {process.returncode}", file=sys.stderr, flush=True)
        return process.returncode or 1
    return 0


def start(command: list[str], **options) -> subprocess.Popen:
    """Starts a server in a process group of its own, so that :func:`stop` ends it with every process it started
    (MAX's server runs its model in worker processes, which outlive it when only it is ended), and with a temporary
    folder of its own (``TMPDIR``), which :func:`stop` removes: MAX's processes talk through ZeroMQ sockets, files
    it makes in the temporary folder and leaves there, five or six a start."""
    import tempfile

    scratch = tempfile.mkdtemp(prefix="course-serve-")
    options["env"] = {**(os.environ if options.get("env") is None else options["env"]), "TMPDIR": scratch}
    try:
        process = subprocess.Popen(command, start_new_session=True, **options)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    process.scratch = scratch
    return process


def stop(process: subprocess.Popen, grace: float = 60.0) -> None:
    """Ends a server :func:`start` started, and its process group: asked first (SIGTERM), killed after ``grace``
    seconds; then removes its temporary folder."""
    try:
        _end_group(process, grace)
    finally:
        if getattr(process, "scratch", None):
            shutil.rmtree(process.scratch, ignore_errors=True)


def _end_group(process: subprocess.Popen, grace: float) -> None:
    import signal

    def group(sent):
        try:
            os.killpg(process.pid, sent)
        except (ProcessLookupError, PermissionError):  # every process of the group has ended
            pass

    group(signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    deadline = time.perf_counter() + grace
    while time.perf_counter() < deadline:  # the group's other processes (MAX's workers) end on their own SIGTERM
        try:
            os.killpg(process.pid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.2)
    group(signal.SIGKILL)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="serve", description="Serve a course model with MAX's server (max serve), "
                                "offline, as an OpenAI-compatible API.")
    p.add_argument("--model", default=checkpoints.COURSE_LLAMA_NAME,
                   help="course-llama (the default), course (the course's GPT-2), or a folder or Hub id, as main "
                   "takes it")
    p.add_argument("--llama", choices=["max", "course"], default="max",
                   help="what a Llama runs on: MAX's own Llama architecture (the default) or the course's, step 26")
    p.add_argument("--target", choices=["solutions", "steps"], default="solutions",
                   help="whose code the course's architecture runs (GPT-2, or --llama course): the solutions "
                   "(default) or yours in steps/")
    p.add_argument("--steps-dir", type=Path, default=STEPS, help="the learner's folder for --target steps")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1: this machine)")
    p.add_argument("--port", type=int, default=8000, help="the port to listen on (default 8000)")
    p.add_argument("--max-batch-size", type=int, default=8,
                   help="how many requests MAX decodes together (default 8; MAX's own default on the CPU is 1)")
    p.add_argument("--prepare-only", action="store_true", help="write the served copy, print its folder, and stop")
    return p


def _stopped(signum, frame):  # noqa: ARG001 - a signal handler's signature
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    import signal

    args = parser().parse_args(argv)
    # SIGTERM (a service manager, a test, uvicorn passing it on once it has shut down) ends serve through its
    # `finally`, which ends MAX's server too; Python's default would leave it running.
    signal.signal(signal.SIGTERM, _stopped)
    try:
        checkpoint = checkpoints.find(args.model)
        family = checkpoint.family
        checkpoint.config_of(family)
        ours = family == "gpt2" or args.llama == "course"
        code = whose_code(args.target, args.steps_dir, family) if ours else {}
        if args.max_batch_size < 1:
            raise Stop(f"--max-batch-size {args.max_batch_size}: at least 1 request is decoded at a time")
        started = time.perf_counter()
        folder = prepare(checkpoint)
        print(f"serve: the served copy (float32, tokenizer.json): {folder} ({time.perf_counter() - started:.1f} s)",
              flush=True)
        if args.prepare_only:
            return 0
        behind = free_port()
        run = command(folder, "127.0.0.1", behind, args.max_batch_size, args.model, family, args.llama)
        print(f"serve: {' '.join(run)}", flush=True)
        process = start(run, env=environment(code))
        try:
            seconds = ready(f"http://127.0.0.1:{behind}", process)
            return front_door(served(folder, args.model), process, behind, args.host, args.port, seconds)
        except KeyboardInterrupt:
            return 0
        finally:
            stop(process)
    except (checkpoints.CheckpointError, Stop) as error:
        print(f"serve: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
