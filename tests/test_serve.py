"""`serve` (course/programs/serve.py): the served copy of a course folder, the command it starts, its refusals,
and, with the `serve` extra (marked `serve`), MAX's server on the course's Llama answering the OpenAI client with
Hugging Face's greedy tokens."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from course import checkpoints
from course.outline import ROOT
from course.programs import serve

pytestmark = pytest.mark.programs

#: Prompts for the server's check, and how many tokens each asks for.
PROMPTS = ("In the beginning", "And the LORD said unto Moses,", "A chapter holds one idea:")
TOKENS = 32


def _sums(folder: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(folder.iterdir())
            if path.is_file()}


def test_the_served_copy_is_float32_with_the_same_numbers_and_tokens_written_once(tmp_path):
    """prepare(course-llama): a folder of its own with config.json's dtype float32, every tensor the original's
    value in float32 (exactly: float16 to float32 loses nothing), tokenizer.json and tokenizer_config.json that
    tokenize as the course's files do, and the original folder untouched; a second call returns the same folder
    without writing it again"""
    from safetensors.numpy import load_file
    from transformers import AutoTokenizer

    checkpoint = checkpoints.find(checkpoints.COURSE_LLAMA_NAME)
    before = _sums(checkpoint.folder)
    folder = serve.prepare(checkpoint, tmp_path)
    assert folder.parent == tmp_path and folder != checkpoint.folder, folder
    config = json.loads((folder / "config.json").read_text())
    assert config["dtype"] == "float32" and config["torch_dtype"] == "float32", config
    original = json.loads((checkpoint.folder / "config.json").read_text())
    assert {k: v for k, v in config.items() if k not in ("dtype", "torch_dtype")} == \
        {k: v for k, v in original.items() if k not in ("dtype", "torch_dtype")}, "the config changed beyond its dtype"
    served, stored = load_file(str(folder / "model.safetensors")), checkpoints.read_weights(checkpoint.weights_file)
    assert set(served) == set(stored), sorted(set(served) ^ set(stored))
    kinds = {str(value.dtype) for value in served.values()}
    assert kinds == {"float32"}, f"the served tensors are {kinds}"
    worst = max(float(np.abs(served[name] - stored[name].astype(np.float32)).max()) for name in stored)
    assert worst == 0.0, f"a served tensor differs from the original by {worst:.1e}"
    for name in serve.TOKENIZER_OUT:
        assert (folder / name).is_file(), f"the served copy has no {name}"
    text = "In the beginning God created the heaven and the earth. Naïve café ✓\n\n  spaced"
    ids = AutoTokenizer.from_pretrained(str(folder))(text)["input_ids"]
    vocab, merges = checkpoints.read_tokenizer(checkpoint.folder)
    from transformers import GPT2TokenizerFast

    expected = GPT2TokenizerFast.from_pretrained(str(checkpoint.folder))(text)["input_ids"]
    assert ids == expected and len(vocab) == 50257 and merges, (ids[:12], expected[:12])
    assert _sums(checkpoint.folder) == before, "prepare changed the original folder"
    assert (folder / "generation_config.json").read_bytes() == \
        (checkpoint.folder / "generation_config.json").read_bytes(), "the generation settings were not copied"
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "np") as stored_file:
        assert stored_file.metadata() == {"format": "pt"}, stored_file.metadata()  # transformers reads it as PyTorch's
    assert json.loads((folder / serve.DONE).read_text()) == {"from": str(checkpoint.folder),
                                                             "fingerprint": folder.name.rsplit("-", 1)[1]}
    written = (folder / "model.safetensors").stat().st_mtime_ns
    assert serve.prepare(checkpoint, tmp_path) == folder, "a second call made another copy"
    assert (folder / "model.safetensors").stat().st_mtime_ns == written, "a second call wrote the copy again"
    assert [path.name for path in tmp_path.iterdir()] == [folder.name], "a partial copy was left behind"


def test_a_changed_checkpoint_gets_a_copy_of_its_own(tmp_path):
    """the served copy is named by the config's and the weights' bytes: a folder whose weights change is copied
    again, not served from the old copy"""
    import shutil

    source = tmp_path / "llama"
    shutil.copytree(checkpoints.find(checkpoints.COURSE_LLAMA_NAME).folder, source)
    first = serve.prepare(checkpoints.find(str(source)), tmp_path / "served")
    weights = checkpoints.read_weights(source / "model.safetensors")
    name = sorted(weights)[0]
    weights[name] = weights[name] * 2
    from safetensors.numpy import save_file

    save_file(weights, str(source / "model.safetensors"), metadata={"format": "pt"})
    second = serve.prepare(checkpoints.find(str(source)), tmp_path / "served")
    assert second != first, "a changed checkpoint was served from the old copy"


def test_a_copy_keeps_whole_numbers_reads_a_hub_tokenizer_and_outlives_a_start_cut_short(tmp_path, monkeypatch):
    """prepare: a tensor of whole numbers is copied as it is (only floating tensors become float32); a folder with
    its own tokenizer.json (a Hub folder; here a served copy) is copied with that tokenizer; a partial copy that a
    start cut short left behind is cleared, in a cache folder made on the way; a start that another one beat to the
    copy serves that copy and clears its own; and a tokenizer file transformers did not write is refused by name"""
    from safetensors.numpy import load_file, save_file
    from transformers import AutoTokenizer

    source = tmp_path / "llama"
    shutil.copytree(checkpoints.find(checkpoints.COURSE_LLAMA_NAME).folder, source)
    weights = checkpoints.read_weights(source / "model.safetensors")
    weights["extra.positions"] = np.arange(5, dtype=np.int64)
    save_file(weights, str(source / "model.safetensors"), metadata={"format": "pt"})
    checkpoint = checkpoints.find(str(source))
    root = tmp_path / "cache" / "course-serve"  # its parents do not exist yet
    name = f"{source.name}-{serve.fingerprint(checkpoint)}"
    cut_short = root / f".{name}.{os.getpid()}"
    cut_short.mkdir(parents=True)
    (cut_short / "half.safetensors").write_bytes(b"half")
    folder = serve.prepare(checkpoint, root)
    assert sorted(path.name for path in root.iterdir()) == [name], "the partial copy was left behind"
    kept = load_file(str(folder / "model.safetensors"))["extra.positions"]
    assert kept.dtype == np.int64 and kept.tolist() == [0, 1, 2, 3, 4], kept

    again = serve.prepare(checkpoints.find(str(folder)), tmp_path / "deep" / "er")  # a folder with tokenizer.json
    text = "In the beginning God created the heaven and the earth."
    assert AutoTokenizer.from_pretrained(str(again))(text)["input_ids"] == \
        AutoTokenizer.from_pretrained(str(folder))(text)["input_ids"]

    raced = checkpoints.read_weights

    def another_start_finishes_first(path):  # while this start reads the weights, another one writes the copy
        (tmp_path / "raced" / name).mkdir(parents=True)
        (tmp_path / "raced" / name / serve.DONE).write_text("{}")
        return raced(path)

    monkeypatch.setattr(checkpoints, "read_weights", another_start_finishes_first)
    assert serve.prepare(checkpoint, tmp_path / "raced") == tmp_path / "raced" / name
    assert sorted(path.name for path in (tmp_path / "raced").iterdir()) == [name], "this start's copy was left behind"
    monkeypatch.setattr(checkpoints, "read_weights", raced)

    monkeypatch.setattr(serve, "TOKENIZER_OUT", (*serve.TOKENIZER_OUT, "special_tokens.model", "added.json"))
    with pytest.raises(serve.Stop) as refused:
        serve.prepare(checkpoint, tmp_path / "third")
    assert str(refused.value) == (f"transformers saved no special_tokens.model, added.json for {source}; MAX's server "
                                  "reads them")


class _Calls(dict):
    """What serve's main handed MAX's server and the door, each faked (see the check below)."""

    def __init__(self, monkeypatch, door=lambda: 7, ready=lambda: 12.5):
        super().__init__()
        self.process = object()
        monkeypatch.setattr(serve, "free_port", lambda: 41234)
        monkeypatch.setattr(serve, "start", lambda run, env: self.update(run=run, env=env) or self.process)
        monkeypatch.setattr(serve, "ready", lambda url, process: self.update(url=url, waited_on=process) or ready())
        monkeypatch.setattr(serve, "served", lambda folder, name: ("served", folder, name))
        monkeypatch.setattr(serve, "front_door", lambda *args: self.update(door=args) or door())
        monkeypatch.setattr(serve, "stop", lambda process: self.update(stopped=process))


def test_main_starts_max_behind_the_door_and_stops_it_whatever_happens(tmp_path, monkeypatch, capsys):
    """serve's main, with MAX's server, the wait and the door faked: MAX's server on a free port of 127.0.0.1 with
    the command and environment each model and flag asks for, the door on --host and --port in front of it with the
    served copy and the seconds MAX took, and MAX's server stopped after the door closes, after Ctrl-C, and after a
    failed start (exit 2, one line); --prepare-only starts nothing; MAX's own Llama serves whatever steps/ holds"""
    from course.outline import SERVE_STEPS_VARIABLE

    monkeypatch.setenv("COURSE_SERVE_CACHE", str(tmp_path / "served"))
    calls = _Calls(monkeypatch)
    assert serve.main([]) == 7
    llama = serve.prepare(checkpoints.find(checkpoints.COURSE_LLAMA_NAME))  # the copy main wrote, found again
    run = serve.command(llama, "127.0.0.1", 41234, 8, "course-llama", "llama", "max")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"serve: the served copy (float32, tokenizer.json): {llama} (") and \
        lines[0].endswith(" s)") and lines[1:] == [f"serve: {' '.join(run)}"], lines
    assert 0 < float(lines[0].rsplit("(", 1)[1].split()[0]) < 120, lines[0]  # the seconds the copy took
    assert calls == {"run": run, "env": serve.environment({}), "url": "http://127.0.0.1:41234",
                     "waited_on": calls.process, "door": (("served", llama, "course-llama"), calls.process, 41234,
                                                          "127.0.0.1", 8000, 12.5), "stopped": calls.process}, calls

    steps = tmp_path / "steps"
    shutil.copytree(ROOT / "solutions", steps)
    calls = _Calls(monkeypatch)
    argv = ["--model", "course", "--target", "steps", "--steps-dir", str(steps), "--host", "0.0.0.0", "--port",
            "9000", "--max-batch-size", "1"]
    assert serve.main(argv) == 7
    gpt2 = serve.prepare(checkpoints.find("course"))
    assert calls["run"] == serve.command(gpt2, "127.0.0.1", 41234, 1, "course", "gpt2", "max"), calls["run"]
    assert calls["env"] == serve.environment({SERVE_STEPS_VARIABLE: str(steps.resolve())}), calls["env"]
    assert calls["door"] == (("served", gpt2, "course"), calls.process, 41234, "0.0.0.0", 9000, 12.5), calls["door"]

    calls = _Calls(monkeypatch)
    assert serve.main(["--llama", "course"]) == 7  # the course's step 26, on the solutions
    assert calls["run"] == serve.command(llama, "127.0.0.1", 41234, 8, "course-llama", "llama", "course")
    assert calls["env"] == serve.environment({}), calls["env"]
    calls = _Calls(monkeypatch)
    assert serve.main(["--target", "steps", "--steps-dir", str(tmp_path / "empty")]) == 7  # MAX's Llama: no steps
    assert calls["env"] == serve.environment({}), calls["env"]

    def interrupted():
        raise KeyboardInterrupt

    def exited():
        raise serve.Stop("max serve exited with code 3 before it answered http://127.0.0.1:41234/health")

    capsys.readouterr()
    calls = _Calls(monkeypatch, door=interrupted)
    assert serve.main([]) == 0 and calls["stopped"] is calls.process, calls
    calls = _Calls(monkeypatch, ready=exited)
    assert serve.main([]) == 2 and calls["stopped"] is calls.process and "door" not in calls, calls
    assert capsys.readouterr().err == "serve: max serve exited with code 3 before it answered " \
        "http://127.0.0.1:41234/health\n"
    calls = _Calls(monkeypatch)
    assert serve.main(["--prepare-only"]) == 0 and calls == {}, calls


def test_serve_finds_max_beside_its_python_then_on_path(tmp_path, monkeypatch):
    """command's program: the `max` beside this Python (its environment's, whatever PATH says), else the one on
    PATH, else the bare name (the start then fails, saying so)"""
    import sys

    beside = Path(sys.executable).parent / "max"
    monkeypatch.setenv("PATH", "")
    assert serve.command(tmp_path, "127.0.0.1", 1, 1, "m", "llama", "max")[0] == str(beside)
    elsewhere = tmp_path / "bin" / "max"
    elsewhere.parent.mkdir()
    elsewhere.write_text("#!/bin/sh\n")
    elsewhere.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(elsewhere.parent))
    assert serve.command(tmp_path, "127.0.0.1", 1, 1, "m", "llama", "max")[0] == str(elsewhere)
    monkeypatch.setenv("PATH", "")
    assert serve.command(tmp_path, "127.0.0.1", 1, 1, "m", "llama", "max")[0] == "max"


def test_serve_help_names_each_flag_and_refuses_a_wrong_choice(capsys, monkeypatch):
    """serve --help: the program's name and what it does, and each flag with its help; a --target or --llama
    outside its choices is refused by argparse, naming the choices"""
    monkeypatch.setenv("COLUMNS", "1000")  # no line broken inside a word ("OpenAI- compatible")
    with pytest.raises(SystemExit):
        serve.main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert shown.startswith("usage: serve [-h] [--model MODEL] [--llama {max,course}] [--target {solutions,steps}]"), \
        shown
    assert "Serve a course model with MAX's server (max serve), offline, as an OpenAI-compatible API." in shown, shown
    for action in serve.parser()._actions[1:]:
        assert action.help and " ".join(action.help.split()) in shown, (action.option_strings, shown)
    for flag, wrong, choices in (("--target", "elsewhere", "'solutions', 'steps'"), ("--llama", "mine", "'max', 'course'")):
        with pytest.raises(SystemExit):
            serve.main([flag, wrong])
        assert f"argument {flag}: invalid choice: '{wrong}' (choose from {choices})" in capsys.readouterr().err


@contextlib.contextmanager
def _stand_in(handler):
    """An HTTP server of ``handler`` (an ``http.server`` handler class) on a free port of 127.0.0.1, in a thread of
    this process: yields its URL; shut down and closed after."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_wait_for_max_ends_when_health_answers_and_never_hangs_on_a_silent_one():
    """ready(): the seconds until /health answers 200, asked every half second (two 503s first: about 1 s); and a
    server that takes the connection and never answers is given up on at the timeout, not waited on forever"""
    import http.server
    import threading

    answers = [503, 503, 200]

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(answers.pop(0) if len(answers) > 1 else answers[0])
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    with _stand_in(Health) as url:
        seconds = serve.ready(url, None, timeout=30)
    assert 0.9 <= seconds < 2.5, f"/health answered 200 after {seconds:.2f} s (two 503s, half a second apart)"

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()  # takes connections, never reads or answers
    url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    outcome = []
    waiting = threading.Thread(target=lambda: outcome.append(_stopped_with(serve.ready, url, None, 3)))
    waiting.start()
    waiting.join(15)
    silent.close()
    assert not waiting.is_alive(), "ready() hung on a server that never answers /health"
    assert outcome == [f"max serve did not answer {url}/health within 3 s"], outcome


def _stopped_with(function, *args) -> str:
    try:
        function(*args)
    except serve.Stop as stop:
        return str(stop)
    return "returned"


def test_the_served_copies_live_in_the_users_cache_or_where_course_serve_cache_says(tmp_path, monkeypatch):
    """served_root: $COURSE_SERVE_CACHE (a ~ in it is the home folder), else course-serve in $XDG_CACHE_HOME, else in
    ~/.cache"""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("COURSE_SERVE_CACHE", raising=False)
    assert serve.served_root() == tmp_path / "home" / ".cache" / "course-serve"
    monkeypatch.setenv("XDG_CACHE_HOME", "~/elsewhere")
    assert serve.served_root() == tmp_path / "home" / "elsewhere" / "course-serve"
    monkeypatch.setenv("COURSE_SERVE_CACHE", "~/copies")
    assert serve.served_root() == tmp_path / "home" / "copies"


def test_the_door_knows_the_served_models_name_vocabulary_context_and_tokenizer(tmp_path):
    """served(): what the door checks requests against, from the served copy: the name asked for, the vocabulary,
    the context (a Llama's max_position_embeddings, GPT-2's n_positions) and a count of tokens that is the
    tokenizer's; and free_port() a port that nothing listens on"""
    from transformers import AutoTokenizer

    text = "In the beginning God created the heaven and the earth."
    for name, context in (("course-llama", 256), ("course", 256)):
        folder = serve.prepare(checkpoints.find(name), tmp_path)
        model = serve.served(folder, f"{name}-served")
        assert (model.name, model.vocab_size, model.context) == (f"{name}-served", 50257, context), model
        assert model.count_tokens(text) == len(AutoTokenizer.from_pretrained(str(folder))(text)["input_ids"])
    config = json.loads((folder / "config.json").read_text())
    assert "n_positions" in config and "max_position_embeddings" not in config, "GPT-2's context is n_positions"
    port = serve.free_port()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))  # free: it binds


def test_a_server_keeps_its_temporary_files_in_a_folder_of_its_own_which_stop_removes(monkeypatch):
    """start() hands the server a temporary folder of its own (TMPDIR: where MAX's ZeroMQ sockets go, five or six
    files a start, which MAX leaves); stop() removes it with what the server and its worker left there, and keeps the
    environment it was given otherwise"""
    import tempfile

    monkeypatch.setenv("COURSE_SERVE_PROBE", "kept")
    child = ("import os, subprocess, sys, tempfile, time\n"
             "folder = tempfile.gettempdir()\n"
             "open(os.path.join(folder, 'socket-left'), 'w').close()\n"
             "subprocess.run([sys.executable, '-c', 'import tempfile; open(tempfile.mkstemp()[1], \"w\").close()'])\n"
             "print(folder, os.environ['COURSE_SERVE_PROBE'], len(os.listdir(folder)), flush=True)\ntime.sleep(60)\n")
    server = serve.start([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    folder, probe, count = server.stdout.readline().split()
    assert Path(folder).parent == Path(tempfile.gettempdir()) and Path(folder).name.startswith("course-serve-"), folder
    assert (probe, count) == ("kept", "2"), (probe, count)
    serve.stop(server, grace=10)
    assert not Path(folder).exists(), f"{folder} is left after stop()"
    given = serve.start([sys.executable, "-c", "import os; print(os.environ.get('COURSE_SERVE_PROBE'), "
                         "os.environ['TMPDIR'])"], stdout=subprocess.PIPE, text=True, env={"PATH": os.environ["PATH"]})
    said, scratch = given.stdout.readline().split()
    serve.stop(given, grace=10)
    assert said == "None" and not Path(scratch).exists(), (said, scratch)  # the env given, not this process's
    made, mkdtemp = [], tempfile.mkdtemp
    monkeypatch.setattr(tempfile, "mkdtemp", lambda **kwargs: made.append(mkdtemp(**kwargs)) or made[-1])
    with pytest.raises(FileNotFoundError):  # a server that cannot start: its error, and no folder left behind
        serve.start([str(Path(tempfile.gettempdir()) / "no-such-server")])
    assert len(made) == 1 and not Path(made[0]).exists(), made  # its own folder, not another server's


def test_stop_ends_the_server_and_every_process_it_started_even_one_that_ignores_sigterm(tmp_path):
    """start() puts a server in a process group of its own; stop() ends the group: a server whose worker outlives
    it on SIGTERM alone is ended with its worker; one that ignores SIGTERM is killed after the grace; and a SIGTERM
    to serve itself ends it through its finally (exit 128 + 15)"""
    import signal

    child = ("import subprocess, sys, time\n"
             "worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
             "print(worker.pid, flush=True)\ntime.sleep(60)\n")
    server = serve.start([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    worker = int(server.stdout.readline())
    serve.stop(server, grace=10)
    assert server.poll() is not None, "the server is still running"
    assert _gone(worker), "the server's worker outlived it"

    stubborn = serve.start([sys.executable, "-c", "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)"
                            "\nprint('ready', flush=True)\ntime.sleep(60)"], stdout=subprocess.PIPE, text=True)
    assert stubborn.stdout.readline() == "ready\n"
    started = time.monotonic()
    serve.stop(stubborn, grace=1)
    assert stubborn.returncode == -signal.SIGKILL and time.monotonic() - started < 10, stubborn.returncode
    with pytest.raises(SystemExit) as ended:
        serve._stopped(signal.SIGTERM, None)
    assert ended.value.code == 128 + signal.SIGTERM


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended: gone, or a zombie that nobody has reaped yet (Linux's /proc says which)."""
    stat = Path(f"/proc/{pid}/stat")
    if Path("/proc").is_dir():
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except FileNotFoundError:
            return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.serve  # uvicorn comes with the `serve` extra
def test_the_door_closes_when_maxs_server_exits_and_says_so(capsys):
    """front_door(): the door answers on --host and --port (here 127.0.0.2, not uvicorn's default) and says where,
    refusing a bad completion for the model it serves, until MAX's server (here a process that exits with code 3
    after two seconds) exits; then it closes and returns that code, saying so"""
    import urllib.error
    import urllib.request

    from course.programs import front

    port, host = serve.free_port(), "127.0.0.2"
    behind = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2); raise SystemExit(3)"])
    model = front.Served("course-llama", 50257, 256, lambda text: len(text.split()))
    answered, elsewhere = [], []

    def ask():
        body = json.dumps({"model": "course-llama", "prompt": [50257]}).encode()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not answered:
            try:
                urllib.request.urlopen(urllib.request.Request(f"http://{host}:{port}/v1/completions", body), timeout=1)
            except urllib.error.HTTPError as refused:
                answered.append((refused.code, json.loads(refused.read())["error"]["message"]))
            except OSError:
                time.sleep(0.05)
        try:  # only where it was asked to listen: not on this machine's other addresses
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            elsewhere.append("answered on 127.0.0.1")
        except OSError:
            elsewhere.append("refused")

    import threading

    asking = threading.Thread(target=ask)
    asking.start()
    assert serve.front_door(model, behind, serve.free_port(), host, port, 17.4) == 3
    asking.join()
    out, err = capsys.readouterr()
    assert answered == [(400, "prompt[0] is token id 50257, outside the vocabulary: ids run from 0 to 50256")], \
        "the door did not answer on its address"
    assert elsewhere == ["refused"], f"the door listened beyond {host}: {elsewhere}"
    assert out == (f"serve: course-llama answers at http://{host}:{port}/v1 (OpenAI API; model name "
                   "'course-llama'), ready in 17 s; Ctrl-C stops it\n"), out
    assert err == "serve: MAX's server exited with code 3\n", err


def test_the_command_listens_on_this_machine_with_batching_on_and_telemetry_off():
    """max serve's command line: the served folder, MAX's CPU, float32, the batch size, 127.0.0.1 unless told
    otherwise (MAX's own default is every interface), the port; offline, without MAX's telemetry"""
    args = serve.parser().parse_args([])
    assert (args.model, args.llama, args.target, args.host, args.port, args.max_batch_size) == (
        "course-llama", "max", "solutions", "127.0.0.1", 8000, 8), args
    line = serve.command(Path("/served/llama"), "127.0.0.1", 8123, 4, "course-llama", "llama", "max")
    assert line[1] == "serve" and Path(line[0]).name == "max", line
    options = dict(zip(line[2::2], line[3::2]))
    assert options == {"--model-path": "/served/llama", "--served-model-name": "course-llama", "--devices": "cpu",
                       "--quantization-encoding": "float32", "--max-batch-size": "4", "--host": "127.0.0.1",
                       "--port": "8123"}, options
    assert serve.OFFLINE == {"HF_HUB_OFFLINE": "1", "MAX_SERVE_DISABLE_TELEMETRY": "1"}, serve.OFFLINE
    gpt2 = serve.command(Path("/served/gpt2"), "127.0.0.1", 8123, 4, "course", "gpt2", "max")
    assert gpt2[:len(line)] == line[:3] + ["/served/gpt2", "--served-model-name", "course"] + line[6:], gpt2
    assert gpt2[len(line):] == ["--custom-architectures", f"{ROOT}:course.architectures"], gpt2
    ours = serve.command(Path("/served/llama"), "127.0.0.1", 8123, 4, "course-llama", "llama", "course")
    assert ours == line + ["--custom-architectures", f"{ROOT}:course.llama_architecture"], ours


def test_max_serve_runs_offline_without_metrics_unless_the_user_asks_for_them():
    """max serve's environment: offline and without MAX's telemetry whatever the user's says; MAX's metrics process
    off unless the user set MAX_SERVE_METRIC_RECORDING_METHOD; the served steps' folder from ``code``"""
    code = {"COURSE_SERVE_STEPS": "/learner/steps"}
    env = serve.environment(code, own={"PATH": "/bin", "HF_HUB_OFFLINE": "0"})
    assert env == {"PATH": "/bin", "HF_HUB_OFFLINE": "1", "MAX_SERVE_DISABLE_TELEMETRY": "1",
                   "MAX_SERVE_METRIC_RECORDING_METHOD": "NOOP", "COURSE_SERVE_STEPS": "/learner/steps"}, env
    asked = serve.environment({}, own={"MAX_SERVE_METRIC_RECORDING_METHOD": "PROCESS"})
    assert asked["MAX_SERVE_METRIC_RECORDING_METHOD"] == "PROCESS", asked


@pytest.mark.serve
def test_max_reads_the_metrics_setting_the_course_gives_it(monkeypatch):
    """MAX's server settings, read with the course's defaults in the environment, record no metrics: a MAX that
    renames the variable or its value fails here, not silently"""
    from max.serve.config import MetricRecordingMethod, Settings

    for name, value in serve.DEFAULTS.items():
        monkeypatch.setenv(name, value)
    assert Settings().metric_recording is MetricRecordingMethod.NOOP, Settings().metric_recording


def test_the_learners_gpt2_is_served_from_their_folder(tmp_path):
    """--target steps hands MAX's workers the learner's folder (COURSE_SERVE_STEPS), where every step GPT-2 is
    served on is finished; the course's own code needs nothing. (What the workers do with it, the served checks
    below show; course.architectures imports MAX's serving stack, the `serve` extra.)"""
    from course.outline import SERVE_STEPS_VARIABLE

    assert serve.whose_code("solutions", tmp_path) == {}
    for source in [*(ROOT / "solutions").glob("step_0*.py"), *(ROOT / "solutions").glob("step_1[0-4]_*.py"),
                   ROOT / "solutions" / "step_25_serving.py"]:
        (tmp_path / source.name).write_text(source.read_text())
    assert serve.whose_code("steps", tmp_path) == {SERVE_STEPS_VARIABLE: str(tmp_path.resolve())}
    (tmp_path / "step_03_layer_norm.py").write_text((ROOT / "steps" / "step_03_layer_norm.py").read_text())
    (tmp_path / "step_25_serving.py").unlink()
    with pytest.raises(serve.Stop) as unfinished:
        serve.whose_code("steps", tmp_path)
    assert str(unfinished.value) == (f"your GPT-2 is not finished in {tmp_path.name}/: step 03 (TODO 1, 2, 3), step "
                                     "25 (the file is missing); check each with `pixi run sNN`, or serve the course's "
                                     "code (leave out --target steps)"), str(unfinished.value)


@pytest.mark.parametrize("argv, message", [
    (["--model", "course", "--target", "steps"], "serve: your GPT-2 is not finished in steps/: step 01 (TODO 1"),
    (["--llama", "course", "--target", "steps"], "serve: your Llama is not finished in steps/: step 01 (TODO 1"),
    (["--max-batch-size", "0"], "serve: --max-batch-size 0: at least 1 request is decoded at a time"),
    (["--model", "/no/such/folder"], "serve: there is no folder /no/such/folder"),
])
def test_serve_refuses_in_one_line(argv, message, capsys):
    """what serve cannot serve is refused in one line that names it, with exit code 2, before anything starts"""
    code = serve.main([*argv, "--prepare-only"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(message) and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_bench_serve_starts_each_server_once_a_round_and_reports_medians():
    """bench --serve's servers: GPT-2 once, the Llama once on MAX's and once on the course's; a server's rows over
    rounds: the median tok/s with every round's value, latencies pooled, requests and failures summed"""
    from course.programs import serve_bench

    assert serve_bench.servers(["course", "course-llama"], ["max", "course"]) == [
        ("course", "max", "the course's step 25"), ("course-llama", "max", "MAX's Llama"),
        ("course-llama", "course", "the course's step 26")]
    assert serve_bench.servers(["course", "course-llama"], ["max"], peer=True) == [  # llama.cpp's server: GPT-2's
        ("course", "max", "the course's step 25"), ("course", "llama.cpp", "llama.cpp's server"),
        ("course-llama", "max", "MAX's Llama")]

    def row(tok_s, latencies, failed=0):
        return {"clients": 8, "requests": len(latencies) + failed, "tokens": 32, "tok_s": tok_s, "p50_s": 0, "p95_s": 0,
                "failed": failed, "failures": ["lost"] * failed, "latencies": latencies}

    merged = serve_bench.medians([[row(100.0, [0.1, 0.2])], [row(300.0, [0.3, 0.4], 1)], [row(200.0, [0.5, 0.6])]])
    assert merged == [{"clients": 8, "requests": 7, "tokens": 96, "tok_s": 200.0, "rounds_tok_s": [100.0, 300.0, 200.0],
                       "p50_s": 0.4, "p95_s": 0.6, "failed": 1, "failures": ["lost"]}], merged


def test_bench_serve_counts_what_the_clients_got_and_times_only_after_the_warm_up():
    """serve_bench.load on a stand-in OpenAI server (every answer 20 ms, its 6th one cut short): a warm-up request a
    client first, not counted; then each client's requests one after another, counted whole: the tokens, the failed
    one with its reason, the latencies of the others, their p50 and p95, and tok/s over the counted wall time. And
    complete: a server that is not there is a failure with its reason, not an exception"""
    import http.server
    import threading

    from course.programs import serve_bench

    assert serve_bench.quantile([], 0.5) != serve_bench.quantile([], 0.5)  # NaN
    assert [serve_bench.quantile([1.0, 2.0, 3.0, 4.0], q) for q in (0.0, 0.5, 0.74, 0.75, 0.95, 1.0)] == \
        [1.0, 3.0, 3.0, 4.0, 4.0, 4.0]
    asked, lock = [], threading.Lock()

    class OpenAI(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                asked.append(body)
                number = len(asked)
            time.sleep(0.02)
            ended = "abort" if number == 6 else "length"
            answer = json.dumps({"choices": [{"text": "x", "finish_reason": ended}],
                                 "usage": {"completion_tokens": body["max_tokens"] - (number == 6)}}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    with _stand_in(OpenAI) as url:
        started = time.perf_counter()
        row = serve_bench.load(url, "course", clients=2, requests=4, tokens=5)
        took = time.perf_counter() - started
    assert len(asked) == 2 + 8 and all(body == {"model": "course", "prompt": serve_bench.PROMPT, "max_tokens": 5,
                                                "temperature": 0} for body in asked), asked
    latencies = row.pop("latencies")
    tok_s = row.pop("tok_s")
    assert row == {"clients": 2, "requests": 8, "tokens": 8 * 5 - 1, "p50_s": latencies[3], "p95_s": latencies[6],
                   "failed": 1, "failures": ["incomplete: finish_reason 'abort', 4 tokens"]}, row
    assert len(latencies) == 7 and latencies == sorted(latencies) and latencies[0] >= 0.02, latencies
    assert 39 / took <= tok_s <= 39 / (4 * 0.02), f"{tok_s:.0f} tok/s: 39 tokens in at most {took:.2f} s of wall"

    seconds, made, problem = serve_bench.complete(url, "course", 5, timeout=5)  # the server is gone
    assert made == 0 and problem.startswith("URLError: <urlopen error [Errno 111] Connection refused"), problem


def test_a_server_that_exits_early_is_said_and_one_that_never_answers_times_out():
    """ready(): a server that exits before it answers, and one that never answers within the timeout, each stop
    the wait with a line that says which"""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    quits = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(serve.Stop) as exited:
        serve.ready(f"http://127.0.0.1:{port}", quits, timeout=60)
    assert str(exited.value) == f"max serve exited with code 3 before it answered http://127.0.0.1:{port}/health"
    with pytest.raises(serve.Stop) as waited:
        serve.ready(f"http://127.0.0.1:{port}", None, timeout=1)
    assert str(waited.value) == f"max serve did not answer http://127.0.0.1:{port}/health within 1 s"


def _served():
    from course.programs import front

    return front.Served("course-llama", 50257, 256, lambda text: len(text.split()))


#: Bad completions, and the course's message for each (MAX's own server answers most with "Value error.", makes a
#: token for max_tokens 0, ignores n, and crashes on a token id past the vocabulary).
BAD = [
    ([1, 2], 400, "", "the body is a JSON list, not an object with model and prompt"),
    ({"model": "gpt-4", "prompt": "Hi"}, 404, "model",
     'model "gpt-4" is not served here: this server serves "course-llama"'),
    ({"model": "course-llama"}, 400, "prompt", "the body has no prompt: give a text, or a list of token ids"),
    ({"model": "course-llama", "prompt": ""}, 400, "prompt", "prompt is empty: give a text, or a list of token ids"),
    ({"model": "course-llama", "prompt": [99999999]}, 400, "prompt",
     "prompt[0] is token id 99999999, outside the vocabulary: ids run from 0 to 50256"),
    ({"model": "course-llama", "prompt": [5, -3]}, 400, "prompt",
     "prompt[1] is token id -3, outside the vocabulary: ids run from 0 to 50256"),
    ({"model": "course-llama", "prompt": [50256, 50257]}, 400, "prompt",
     "prompt[1] is token id 50257, outside the vocabulary: ids run from 0 to 50256"),
    ({"model": "course-llama", "prompt": {"text": "Hi"}}, 400, "prompt",
     'prompt {"text": "Hi"}: it must be a text or a list of token ids'),
    ({"model": "course-llama", "prompt": 7}, 400, "prompt", "prompt 7: it must be a text or a list of token ids"),
    ({"model": "course-llama", "prompt": ["a", "b"]}, 400, "prompt", "prompt holds 2 prompts: this server takes one "
     "prompt a request (send the others as requests of their own; it batches them)"),
    ({"model": "course-llama", "prompt": " ".join(["word"] * 300)}, 400, "prompt",
     "prompt is 300 tokens; course-llama's context is 256 tokens, and at least one must be left for the answer"),
    ({"model": "course-llama", "prompt": " ".join(["word"] * 256)}, 400, "prompt",
     "prompt is 256 tokens; course-llama's context is 256 tokens, and at least one must be left for the answer"),
    ({"model": "course-llama", "prompt": "Hi", "max_tokens": 0}, 400, "max_tokens", "max_tokens 0: it must be at least 1"),
    ({"model": "course-llama", "prompt": "Hi", "max_tokens": "ten"}, 400, "max_tokens",
     'max_tokens "ten": it must be a whole number'),
    ({"model": "course-llama", "prompt": "Hi there", "max_tokens": 100000}, 400, "max_tokens", "max_tokens 100000 with "
     "a prompt of 2 tokens needs 100002; course-llama's context is 256 tokens: ask for at most 254"),
    ({"model": "course-llama", "prompt": "Hi there", "max_tokens": 255}, 400, "max_tokens", "max_tokens 255 with a "
     "prompt of 2 tokens needs 257; course-llama's context is 256 tokens: ask for at most 254"),
    ({"model": "course-llama", "prompt": "Hi", "n": 3}, 400, "n", "n 3: it must be at least 1 and at most 1"),
    ({"model": "course-llama", "prompt": "Hi", "n": 2}, 400, "n", "n 2: it must be at least 1 and at most 1"),
    ({"model": "course-llama", "prompt": "Hi", "temperature": -1}, 400, "temperature",
     "temperature -1: it must be from 0 to 2"),
    ({"model": "course-llama", "prompt": "Hi", "temperature": "hot"}, 400, "temperature",
     'temperature "hot": it must be a number from 0 to 2'),
    ({"model": "course-llama", "prompt": "Hi", "top_p": 0}, 400, "top_p", "top_p 0: it must be above 0 and at most 1"),
    ({"model": "course-llama", "prompt": "Hi", "top_k": -7}, 400, "top_k", "top_k -7: it must be at least 0"),
    ({"model": "course-llama", "prompt": "Hi", "seed": 1.5}, 400, "seed", "seed 1.5: it must be a whole number"),
    ({"model": "course-llama", "prompt": "Hi", "seed": -1}, 400, "seed", "seed -1: it must be at least 0"),
    ({"model": "course-llama", "prompt": "Hi", "stream": "yes"}, 400, "stream", 'stream "yes": it must be true or false'),
]


@pytest.mark.parametrize("body, status, param, message", BAD,
                         ids=[message.split(":")[0][:40] for _, _, _, message in BAD])
def test_the_front_door_refuses_a_bad_completion_with_its_reason(body, status, param, message):
    """front.check: each bad completion is refused with its status and the course's message, which names the
    field and the value (OpenAI's error shape, with the field as its param, which the client's error carries)"""
    from course.programs import front

    with pytest.raises(front.Refusal) as refused:
        front.check(body, _served())
    got = refused.value
    assert (got.status, got.message, str(got)) == (status, message, message), (got.status, got.message, str(got))
    assert got.body() == {"error": {"message": message, "type": "invalid_request_error", "param": param,
                                    "code": str(status)}}, got.body()


def test_the_front_door_lets_a_good_completion_through_and_refuses_chat():
    """front.check passes what MAX's server answers well (a text or ids, the sampling fields in range, top_k -1
    for off, a stream), and refuses a chat completion: the course's Llama has no chat template"""
    from course.programs import front

    for body in ({"model": "course-llama", "prompt": "Hi", "max_tokens": 32, "temperature": 0},
                 {"model": "course-llama", "prompt": [0, 50256], "max_tokens": 254, "top_p": 1, "top_k": -1,
                  "seed": 7, "stream": True},
                 {"model": "course-llama", "prompt": ["In the beginning"], "temperature": 2, "top_k": 40},
                 # each edge of each range: the least, the most, and the prompt that leaves one token for the answer
                 {"model": "course-llama", "prompt": "Hi", "max_tokens": 1, "n": 1, "seed": 0, "top_k": 0,
                  "top_p": 1e-9, "frequency_penalty": -2, "presence_penalty": 2, "stream": False},
                 {"model": "course-llama", "prompt": " ".join(["word"] * 255), "max_tokens": 1}):
        assert front.check(body, _served()) is None, body
    with pytest.raises(front.Refusal) as refused:
        front.check({"model": "course-llama", "messages": [{"role": "user", "content": "Hi"}]}, _served(), chat=True)
    assert refused.value.message == ("course-llama has no chat template (it was trained on plain text): send a "
                                     "prompt to /v1/completions"), refused.value.message


def test_the_chapters_table_of_bad_requests_is_what_the_door_answers():
    """book/src/serving.md's "Bad requests" table: each row's request, sent with the prompt "Hi there", gets the
    status and the message the row gives (a chat completion: its own)"""
    import re

    from course.programs import front

    page = (ROOT / "book" / "src" / "serving.md").read_text()
    rows = re.findall(r"^\| (`.+?`|a chat completion) \| .+? \| (\d{3}) `(.+)` \|$", page, flags=re.M)
    assert len(rows) >= 10, f"the chapter's table has {len(rows)} rows of bad requests"
    for request, status, message in rows:
        body = {"model": "course-llama", "prompt": "Hi there"}
        chat = request == "a chat completion"
        if not chat:
            body.update(json.loads("{" + request.strip("`") + "}"))
        with pytest.raises(front.Refusal) as refused:
            front.check(body, _served(), chat=chat)
        got = (str(refused.value.status), refused.value.message)
        assert got == (status, message), f"{request}: the page says {status} {message!r}, the door {got}"


class _Upstream:
    """A stand-in for MAX's server behind the door, on a port of its own. It keeps each request it gets (method,
    path with its query, headers, body). A completion is answered with a stream of chunks and a header of its own:
    three at once; with ``max_tokens`` 200, two with a pause longer than httpx's default timeout (5 s) between them;
    with ``max_tokens`` 100, one every 0.1 s for 5 s, setting ``hung_up`` if its reader is gone before the end.
    With ``max_tokens`` 150, not streamed: one JSON answer after 5 s, or ``hung_up`` set if the reader goes first.
    Anything else is answered with 418 and a JSON body."""

    def __init__(self):
        import http.server
        import threading

        seen = self.seen = []
        self.hung_up = threading.Event()
        self.connections = set()  # the door's connections to it, by their address
        upstream = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def _answer(self):
                if self.headers.get("Transfer-Encoding") == "chunked":  # what the door should never send on
                    body = b"(chunked)"
                else:
                    body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                seen.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                upstream.connections.add(self.client_address)
                if self.path.split("?")[0] != "/v1/completions":
                    answer = json.dumps({"path": self.path}).encode()
                    self.send_response(418)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(answer)
                    return
                asked = json.loads(body).get("max_tokens") if body.startswith(b"{") else None
                if asked == 150:  # not streamed: nothing is sent until the whole answer is ready, 5 s later
                    for _ in range(50):
                        time.sleep(0.1)
                        readable, _, _ = select.select([self.connection], [], [], 0)
                        if readable and not self.connection.recv(1, socket.MSG_PEEK):
                            upstream.hung_up.set()  # the door closed its side: its client hung up
                            return
                    self.send_response(200)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"{}")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("X-Upstream", "max")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                if asked == 100:
                    try:
                        for sent in range(50):
                            self._chunk(b"data: %d\n\n" % sent)
                            time.sleep(0.1)
                    except OSError:  # the door closed its side: its client hung up
                        upstream.hung_up.set()
                        return
                else:
                    for index, chunk in enumerate((b"data: one\n\n", b"data: two\n\n", b"data: [DONE]\n\n")):
                        if asked == 200 and index == 2:
                            time.sleep(5.5)
                        self._chunk(chunk)
                self.wfile.write(b"0\r\n\r\n")

            do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_OPTIONS = _answer

            def log_message(self, *args):  # quiet
                pass

        self._serving = _stand_in(Handler)
        self.url = self._serving.__enter__()

    def close(self):
        self._serving.__exit__(None, None, None)


@contextlib.contextmanager
def _door(upstream: str):
    """front.app served as serve serves it (uvicorn, in a thread here) on a free port, before ``upstream``: yields
    a function that sends one request over HTTP and returns (status, headers as (name, value) pairs, body)."""
    import http.client
    import threading

    import uvicorn

    from course.programs import front

    port = serve.free_port()
    server = uvicorn.Server(uvicorn.Config(front.app(_served(), upstream), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started, "the door did not start"

    def send(method: str, path: str, body=None, headers: dict | None = None):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            chunked = body is not None and not isinstance(body, (bytes, str))
            connection.request(method, path, body=body, headers=headers or {}, encode_chunked=chunked)
            answer = connection.getresponse()
            return answer.status, answer.getheaders(), answer.read()
        finally:
            connection.close()

    try:
        yield send, port
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.mark.serve  # uvicorn, Starlette and httpx come with the `serve` extra
def test_the_door_answers_a_bad_request_itself_and_forwards_the_rest_unchanged():
    """front.app over HTTP, before a stand-in for MAX's server: a bad completion, a chat completion and a body that
    is not JSON are answered by the door (OpenAI's error shape) and never reach MAX; a good completion reaches it as
    sent (body, query, headers but the host; a chunked upload as one body of its length) and its stream comes back
    whole and framed once, with MAX's status and headers; other paths and methods go through; MAX gone: 502"""
    upstream = _Upstream()
    try:
        with _door(upstream.url) as (send, port):
            for path, body, status, param, message in [
                    ("/v1/completions", json.dumps({"model": "course-llama", "prompt": [50257]}), 400, "prompt",
                     "prompt[0] is token id 50257, outside the vocabulary: ids run from 0 to 50256"),
                    ("/v1/chat/completions", json.dumps({"model": "course-llama", "messages": []}), 400, "messages",
                     "course-llama has no chat template (it was trained on plain text): send a prompt to "
                     "/v1/completions"),
                    ("/v1/completions", "{not json", 400, "",
                     "the body is not JSON (Expecting property name enclosed in double quotes: line 1 column 2 "
                     "(char 1))"),
                    ("/v1/completions", b"\x80", 400, "", "the body is not JSON ('utf-8' codec can't decode byte "
                     "0x80 in position 0: invalid start byte)")]:
                status_got, _, answer = send("POST", path, body)
                assert (status_got, json.loads(answer)) == (status, {"error": {
                    "message": message, "type": "invalid_request_error", "param": param, "code": str(status)}}), \
                    (path, body, status_got, answer)
            assert upstream.seen == [], f"a refused request reached MAX's server: {upstream.seen}"

            good = json.dumps({"model": "course-llama", "prompt": "Hi there", "max_tokens": 254, "stream": True})
            for upload in (good, iter([good[:20].encode(), good[20:].encode()])):  # with a length, then chunked
                status, headers, answer = send("POST", "/v1/completions?trace=1", upload,
                                                {"Authorization": "Bearer none", "Content-Type": "application/json"})
                assert (status, answer) == (200, b"data: one\n\ndata: two\n\ndata: [DONE]\n\n"), (status, answer)
                names = [name.lower() for name, _ in headers]
                assert dict((n.lower(), v) for n, v in headers)["x-upstream"] == "max", headers
                assert names.count("transfer-encoding") + names.count("content-length") == 1, headers
                method, path, sent_headers, body = upstream.seen[-1]
                assert (method, path, body) == ("POST", "/v1/completions?trace=1", good.encode()), upstream.seen[-1]
                assert sent_headers["authorization"] == "Bearer none", sent_headers
                assert sent_headers["content-type"] == "application/json", sent_headers
                assert sent_headers["host"] == upstream.url.removeprefix("http://"), sent_headers
                assert sent_headers["content-length"] == str(len(good)), sent_headers

            for method in ("GET", "PUT", "DELETE", "OPTIONS"):
                status, _, answer = send(method, "/v1/models")
                assert (status, json.loads(answer)) == (418, {"path": "/v1/models"}), (method, status, answer)
                assert upstream.seen[-1][:2] == (method, "/v1/models"), upstream.seen[-1]
            status, _, answer = send("GET", "/v1/completions")  # a completion's path, not a POST: MAX's to answer
            assert status == 200 and upstream.seen[-1][:2] == ("GET", "/v1/completions"), (status, answer)
            upstream.connections.clear()
            for _ in range(4):  # an answer the door never reads (a HEAD's) is closed all the same: one connection
                status, _, answer = send("HEAD", "/v1/models")
                assert (status, answer, upstream.seen[-1][0]) == (418, b"", "HEAD"), (status, answer)
            assert len(upstream.connections) == 1, f"4 HEAD requests held {len(upstream.connections)} connections"
        from starlette.testclient import TestClient

        from course.programs import front

        with TestClient(front.app(_served(), upstream.url)) as door:  # what the door hands its own server, unframed
            for method, path, body in (("POST", "/v1/completions", good), ("GET", "/v1/models", None)):
                headers = door.request(method, path, content=body).headers
                framing = {name for name in headers if name.lower() in ("content-length", "transfer-encoding")}
                assert not framing, f"{method} {path}: MAX's {framing} handed on; the door's server frames the answer"
    finally:
        upstream.close()
    with _door(upstream.url) as (send, _):  # MAX's server gone from its port
        status, _, answer = send("GET", "/health")
    assert (status, json.loads(answer)) == (502, {"error": {
        "message": "MAX's server behind this one did not answer (ConnectError)", "type": "invalid_request_error",
        "param": "", "code": "502"}}), (status, answer)


@pytest.mark.serve
def test_the_door_waits_as_long_as_max_takes_and_lets_go_when_its_client_does(caplog):
    """a completion whose stream pauses longer than httpx's default timeout (5 s) still comes back whole through the
    door; and a client that hangs up, in the middle of a stream or before a whole answer's first byte, ends the
    request at MAX's end too within a second, not after the 5 s it would have run (MAX's server cancels a request
    whose client hangs up, and frees its place in the batch); and a hang-up is no error: the door's log (warnings
    and worse, as serve shows it) stays empty"""
    import gc
    import http.client
    import logging

    uvicorn_log = logging.getLogger("uvicorn")  # asyncio's records reach caplog at the root; uvicorn's stay in its own
    upstream = _Upstream()
    try:
        with _door(upstream.url) as (send, port):
            uvicorn_log.addHandler(caplog.handler)  # after the door's start, which sets uvicorn's handlers anew
            slow = json.dumps({"model": "course-llama", "prompt": "Hi", "max_tokens": 200})
            status, _, answer = send("POST", "/v1/completions", slow)
            assert (status, answer) == (200, b"data: one\n\ndata: two\n\ndata: [DONE]\n\n"), (status, answer)

            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connection.request("POST", "/v1/completions",
                               json.dumps({"model": "course-llama", "prompt": "Hi", "max_tokens": 100}))
            answer = connection.getresponse()
            assert answer.status == 200 and answer.read1(64).startswith(b"data: 0"), answer.status
            hung_up = time.monotonic()
            answer.close()
            connection.close()
            assert upstream.hung_up.wait(3), "MAX's end of the stream kept going after the client hung up"
            assert time.monotonic() - hung_up < 2, f"MAX's end let go {time.monotonic() - hung_up:.1f} s later"

            upstream.hung_up.clear()  # not streamed: the client hangs up before the answer's first byte
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connection.request("POST", "/v1/completions",
                               json.dumps({"model": "course-llama", "prompt": "Hi", "max_tokens": 150}))
            time.sleep(0.5)
            hung_up = time.monotonic()
            connection.close()
            assert upstream.hung_up.wait(3), "MAX's end kept the request after its client hung up, before an answer"
            assert time.monotonic() - hung_up < 2, f"MAX's end let go {time.monotonic() - hung_up:.1f} s later"
            time.sleep(0.5)  # the door's side of it done
            gc.collect()  # a task whose error nobody read says so when it goes
            faults = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
            assert not faults, f"the door logged a client's hang-up as a fault: {faults}"
    finally:
        uvicorn_log.removeHandler(caplog.handler)
        upstream.close()


def _hugging_faces(folder: Path, prompt: str) -> str:
    """Hugging Face's greedy continuation of ``prompt`` (TOKENS tokens at most, its end-of-text token stops it)."""
    import torch
    from transformers import AutoModelForCausalLM, GPT2TokenizerFast

    tokenizer = GPT2TokenizerFast.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=TOKENS, do_sample=False, eos_token_id=tokenizer.eos_token_id,
                             pad_token_id=tokenizer.eos_token_id)
    new = out[0, ids.shape[1]:].tolist()
    return tokenizer.decode(new, skip_special_tokens=True)


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    """`serve` on the course's Llama, started once for the server's checks: its URL, and its log's path."""
    yield from _server(tmp_path_factory, [])


@pytest.fixture(scope="module")
def gpt2_server(tmp_path_factory):
    """`serve --model course`: the course's GPT-2 on step 25's code, as a MAX architecture."""
    yield from _server(tmp_path_factory, ["--model", "course"])


@pytest.fixture(scope="module")
def course_llama_server(tmp_path_factory):
    """`serve --llama course`: the course's Llama on step 26's code, registered over MAX's own Llama."""
    yield from _server(tmp_path_factory, ["--llama", "course"])


def _server(tmp_path_factory, argv: list[str]):
    pytest.importorskip("openai", reason="the `serve` extra (pip install -e '.[serve]') has the OpenAI client")
    tmp = tmp_path_factory.mktemp("serve")
    port = serve.free_port()
    env = dict(os.environ, COURSE_SERVE_CACHE=str(tmp / "served"), PYTHONPATH=str(ROOT))
    log = (tmp / "serve.log").open("w")
    server = serve.start([sys.executable, "-m", "course.programs.serve", *argv, "--port", str(port)], cwd=ROOT,
                         env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        serve.ready(url, server, timeout=900)
        yield url, tmp / "serve.log"
    finally:
        serve.stop(server)
        log.close()
    # Ended with every process it started: MAX's server and its model workers (they inherit the environment)
    marker = f"COURSE_SERVE_CACHE={tmp / 'served'}".encode()
    deadline = time.monotonic() + 90
    while (left := _running_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"processes left running after serve was stopped: {left}"


def _running_with(marker: bytes) -> list[str]:
    """The processes of this machine whose environment holds ``marker``: their ids and command lines."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker in (proc / "environ").read_bytes().split(b"\0"):
                    command = (proc / "cmdline").read_bytes().replace(b"\0", b" ")[:120]
                    found.append(f"{proc.name}: {command!r}")
            except OSError:  # ended meanwhile, or not ours to read
                pass
    return found


def _post(url: str, body) -> tuple[int, dict]:
    """A POST to the server's completions, as curl sends it: the status and the JSON it answered."""
    import urllib.error
    import urllib.request

    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(f"{url}/v1/completions", data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=300) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.serve
def test_the_openai_client_gets_hugging_faces_greedy_tokens_from_the_served_llama(llama_server):
    """`serve` on the course's Llama (MAX's own Llama architecture, batching on), offline on 127.0.0.1: the
    `openai` client's completions.create, greedy, for three prompts of TOKENS tokens, and the same request as
    curl sends it, each give Hugging Face generate's greedy text on the original folder; the server said where it
    listens"""
    import openai

    url, log = llama_server
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", timeout=300)
    folder = checkpoints.find(checkpoints.COURSE_LLAMA_NAME).folder
    for prompt in PROMPTS:
        answer = client.completions.create(model="course-llama", prompt=prompt, max_tokens=TOKENS, temperature=0)
        expected = _hugging_faces(folder, prompt)
        assert answer.choices[0].text == expected, (prompt, answer.choices[0].text, expected)
    body = json.dumps({"model": "course-llama", "prompt": PROMPTS[0], "max_tokens": TOKENS, "temperature": 0})
    curl = subprocess.run(["curl", "-s", f"{url}/v1/completions", "-H", "Content-Type: application/json",
                           "-d", body], capture_output=True, text=True, timeout=300, check=True)
    assert json.loads(curl.stdout)["choices"][0]["text"] == _hugging_faces(folder, PROMPTS[0]), curl.stdout
    said = log.read_text()
    assert f"serve: course-llama answers at {url}/v1" in said, said[-3000:]


@pytest.mark.serve
def test_the_server_answers_every_bad_request_and_keeps_serving(llama_server):
    """each bad request of BAD, a body that is not JSON, and a chat completion get their 4xx and the course's
    message through HTTP (the token id past the vocabulary, which crashes MAX's own server, included); after each,
    a good request is answered in full; and the OpenAI client raises the 400 as BadRequestError with the message"""
    import openai

    url, _ = llama_server
    good = {"model": "course-llama", "prompt": "In the beginning", "max_tokens": 4, "temperature": 0}
    cases = [*BAD, (b"not json {", 400, "", "the body is not JSON (Expecting value: line 1 column 1 (char 0))")]
    for body, status, param, message in cases:
        got = _post(url, body)
        assert got[0] == status and got[1]["error"]["message"] == message, (body, got)
        assert got[1]["error"]["param"] == param, (body, got)
        after = _post(url, good)
        assert after[0] == 200 and after[1]["usage"]["completion_tokens"] == 4, (body, after)
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", timeout=300)
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model="course-llama", prompt=[99999999], max_tokens=4)
    assert "prompt[0] is token id 99999999, outside the vocabulary" in str(refused.value), str(refused.value)
    with pytest.raises(openai.BadRequestError) as chat:
        client.chat.completions.create(model="course-llama", messages=[{"role": "user", "content": "Hi"}])
    assert "has no chat template" in str(chat.value), str(chat.value)


@pytest.mark.serve
def test_eight_clients_of_fifty_requests_lose_nothing(llama_server):
    """a bounded load: 8 clients at once, 50 completions each, one after the other: every one of the 400 comes
    back whole (its 8 tokens, finish_reason "length"), none lost, none failed"""
    from course.programs import serve_bench

    url, _ = llama_server
    row = serve_bench.load(url, "course-llama", clients=8, requests=50, tokens=8)
    assert row["requests"] == 400 and row["failed"] == 0, row
    assert row["tokens"] == 400 * 8, row


#: Eight prompts asked at once: one batch, prompts of different lengths prefilling beside sequences decoding.
TOGETHER = (*PROMPTS, "A", "The cache keeps every", "We", "Once upon a time, in a land far away, there", "It")


def _served_greedily_as_elsewhere(url: str, name: str, model: str) -> None:
    """The `openai` client's greedy completions from the server at ``url`` (serving ``model`` as ``name``) equal
    Hugging Face generate's on the original folder for PROMPTS one at a time and for TOGETHER asked at once, and
    `main --json`'s for the first prompt."""
    import openai
    from concurrent.futures import ThreadPoolExecutor

    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", timeout=300)
    folder = checkpoints.find(model).folder

    def ask(prompt: str) -> str:
        return client.completions.create(model=name, prompt=prompt, max_tokens=TOKENS, temperature=0).choices[0].text

    for prompt in PROMPTS:
        assert ask(prompt) == _hugging_faces(folder, prompt), prompt
    with ThreadPoolExecutor(len(TOGETHER)) as pool:
        answers = list(pool.map(ask, TOGETHER))
    wrong = [(p, a) for p, a in zip(TOGETHER, answers) if a != _hugging_faces(folder, p)]
    assert not wrong, f"{len(wrong)} of {len(TOGETHER)} prompts asked at once differ from Hugging Face: {wrong}"
    assert ask(PROMPTS[0]) == _mains(model, PROMPTS[0])


def _mains(model: str, prompt: str) -> str:
    """`main --json`'s greedy continuation of ``prompt`` on ``model`` (TOKENS tokens), in a process of its own."""
    run = subprocess.run([sys.executable, "-m", "course.programs.generate", "--target", "solutions", "--model", model,
                          "--prompt", prompt, "--max-new-tokens", str(TOKENS), "--temperature", "0", "--json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600, check=True)
    return json.loads(run.stdout.strip().splitlines()[-1])["text"]


@pytest.mark.serve
def test_the_course_gpt2_served_on_step_25_gives_hugging_faces_greedy_tokens(gpt2_server):
    """`serve --model course`: the course's GPT-2 on MAX's server through the course's architecture (step 25's
    ragged batch and paged attention): greedy completions equal Hugging Face's and main's, one prompt at a time and
    eight at once"""
    url, log = gpt2_server
    _served_greedily_as_elsewhere(url, "course", "course")
    assert f"serve: course answers at {url}/v1" in log.read_text()


@pytest.mark.serve
def test_the_course_llama_served_on_step_26_gives_hugging_faces_greedy_tokens(course_llama_server):
    """`serve --llama course`: the course's Llama on MAX's server through step 26's code, registered under MAX's
    own Llama's name: greedy completions equal Hugging Face's and main's, one prompt at a time and eight at once"""
    url, log = course_llama_server
    _served_greedily_as_elsewhere(url, "course-llama", checkpoints.COURSE_LLAMA_NAME)
    assert f"--custom-architectures {ROOT}:course.llama_architecture" in log.read_text()


@pytest.fixture(scope="module")
def llama_cpp_server(tmp_path_factory):
    """llama.cpp's own server on the course's GPT-2 (float32 GGUF), started as `bench --serve` starts it."""
    import argparse

    from course.programs import llama_server, serve_bench

    try:
        program = llama_server.find()
    except llama_server.Missing as error:
        pytest.skip(f"{error}: bench --serve's llama.cpp row is untested on this machine")
    tmp = tmp_path_factory.mktemp("llama-server")
    port = serve.free_port()
    args = argparse.Namespace(scratch=tmp, server=program, max_batch_size=len(TOGETHER))
    log = (tmp / "llama-server.log").open("w")
    server = serve.start(serve_bench.peer_command("course", port, args), stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        serve.ready(url, server, timeout=300, name="llama-server")
        yield url
    finally:
        serve.stop(server)
        log.close()


@pytest.mark.llama
def test_llama_cpps_server_in_bench_serves_the_same_weights_and_prompt(llama_cpp_server):
    """bench --serve's peer: llama.cpp's server on the course's GPT-2 as float32 GGUF reads the prompt as the same
    tokens as Hugging Face's tokenizer and answers with Hugging Face generate's greedy text, for PROMPTS one at a
    time and TOGETHER at once (its parallel slots): like with like"""
    from concurrent.futures import ThreadPoolExecutor

    from transformers import GPT2TokenizerFast

    folder = checkpoints.find("course").folder
    tokenizer = GPT2TokenizerFast.from_pretrained(str(folder))

    def ask(prompt: str) -> dict:
        status, answer = _post(llama_cpp_server, {"prompt": prompt, "max_tokens": TOKENS, "temperature": 0})
        assert status == 200, answer
        return answer

    for prompt in PROMPTS:
        answer = ask(prompt)
        assert answer["usage"]["prompt_tokens"] == len(tokenizer(prompt)["input_ids"]), (prompt, answer["usage"])
        assert answer["choices"][0]["text"] == _hugging_faces(folder, prompt), (prompt, answer)
    with ThreadPoolExecutor(len(TOGETHER)) as pool:
        answers = [a["choices"][0]["text"] for a in pool.map(ask, TOGETHER)]
    wrong = [(p, a) for p, a in zip(TOGETHER, answers) if a != _hugging_faces(folder, p)]
    assert not wrong, f"{len(wrong)} of {len(TOGETHER)} prompts asked at once differ from Hugging Face: {wrong}"


def test_bench_finds_llama_server_where_it_looks_and_says_how_to_build_one(tmp_path, monkeypatch):
    """llama_server.find(): none anywhere is refused with the command that builds one; then one on PATH, one that
    --build made (of any release) before it, and $LLAMA_SERVER before both, a wrong one refused by name; and --build
    without CMake says what it needs"""
    from course.programs import llama_server

    def program(path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
        return path

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.delenv(llama_server.VARIABLE, raising=False)
    with pytest.raises(llama_server.Missing) as missing:
        llama_server.find()
    assert str(missing.value) == ("no llama-server here: build it with `python -m course.programs.llama_server "
                                  "--build` (about 8 CPU minutes), or name one in $LLAMA_SERVER"), str(missing.value)
    on_path = program(tmp_path / "bin" / "llama-server")
    assert llama_server.find() == on_path
    made = program(tmp_path / "cache" / "course-llama-server" / "0.3.1" / "llama-server")
    assert llama_server.find() == made
    monkeypatch.setenv(llama_server.VARIABLE, str(on_path))
    assert llama_server.find() == on_path
    monkeypatch.setenv(llama_server.VARIABLE, str(tmp_path / "nothing"))
    with pytest.raises(llama_server.Missing) as wrong:
        llama_server.find()
    assert str(wrong.value) == f"$LLAMA_SERVER names {tmp_path / 'nothing'}, which is not a program", str(wrong.value)
    with pytest.raises(llama_server.Missing) as no_cmake:
        llama_server.build(release="0.3.1")
    assert str(no_cmake.value).startswith("building llama-server needs cmake on PATH"), str(no_cmake.value)


def test_llama_server_build_fetches_the_releases_source_builds_the_one_program_and_says_what_failed(
        tmp_path, monkeypatch, capsys):
    """llama_server --build with pip and CMake faked: the source package of the release asked for (else the `llama`
    extra's range), llama.cpp configured with the course's settings, then the user's CMAKE_ARGS, and the user's CFLAGS
    and CXXFLAGS plus AMX off,
    llama-server alone built on the jobs asked for (else the CPUs this process may use), and the program put in the
    cache folder whole; and each failure (no source package, pip's error, CMake's first error, a bare exit status)
    one line that says which step failed"""
    import subprocess as real
    import sys
    import tarfile

    from course import runtime
    from course.programs import llama_server

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("CFLAGS", "-O2")
    monkeypatch.delenv("CXXFLAGS", raising=False)
    monkeypatch.setenv("CMAKE_ARGS", "-DGGML_CUDA=on  -DCMAKE_CXX_FLAGS_RELEASE='-O1 -g'")
    monkeypatch.setattr(llama_server.shutil, "which", lambda tool, *args, **kwargs: f"/usr/bin/{tool}")
    monkeypatch.setattr(runtime, "usable_cpus", lambda: 3)
    monkeypatch.setattr(llama_server, "_release", lambda: None)
    ran, fail = [], {}

    def run(command, **options):
        ran.append((command, options.get("env")))
        step = command[3] if command[:3] == [sys.executable, "-m", "pip"] else command[1]
        if step in fail:
            return real.CompletedProcess(command, fail[step][0], fail[step][1], fail[step][2])
        if step == "download":
            dest, wanted = Path(command[command.index("--dest") + 1]), command[-1]
            release = wanted.split("==")[1] if "==" in wanted else "0.3.16"
            tree = tmp_path / "tree" / f"llama_cpp_python-{release}" / "vendor" / "llama.cpp"
            tree.mkdir(parents=True, exist_ok=True)
            (tree / "CMakeLists.txt").write_text("project(llama.cpp)\n")
            with tarfile.open(dest / f"llama_cpp_python-{release}.tar.gz", "w:gz") as archive:
                archive.add(tmp_path / "tree" / f"llama_cpp_python-{release}", f"llama_cpp_python-{release}")
        elif step == "--build":
            program = Path(command[2]) / "bin" / "llama-server"
            program.parent.mkdir(parents=True)
            program.write_text("#!/bin/sh\necho llama-server\n")
            program.chmod(0o755)
        return real.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(llama_server.subprocess, "run", run)
    assert llama_server.main(["--build", "--release", "0.3.1", "--jobs", "2"]) == 0
    out = tmp_path / "cache" / "course-llama-server" / "0.3.1" / "llama-server"
    assert capsys.readouterr().out.splitlines() == [
        "llama_server: fetching the source of llama-cpp-python==0.3.1 …",
        "llama_server: building llama-server from llama_cpp_python-0.3.1.tar.gz on 2 jobs (about 8 CPU minutes) …",
        f"llama_server: built {out}"]
    assert out.read_text() == "#!/bin/sh\necho llama-server\n" and [p.name for p in out.parent.iterdir()] == [out.name]
    (fetch, _), (configure, env), (make, env_again) = ran
    scratch = Path(fetch[fetch.index("--dest") + 1])
    assert fetch == [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", "llama-cpp-python",
                     "--dest", str(scratch), "llama-cpp-python==0.3.1"], fetch
    assert configure == ["cmake", "-S", str(scratch / "llama_cpp_python-0.3.1" / "vendor" / "llama.cpp"), "-B",
                         str(scratch / "build"), *llama_server.CMAKE, "-DGGML_CUDA=on",
                         "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -g"], configure
    assert make == ["cmake", "--build", str(scratch / "build"), "--target", "llama-server", "-j", "2"], make
    flags = llama_server._flags()
    assert (env["CFLAGS"], env["CXXFLAGS"]) == (f"-O2 {flags}".strip(), flags) and env_again == env, env
    assert not scratch.exists(), "the scratch folder was left behind"

    ran.clear()
    monkeypatch.delenv("CMAKE_ARGS")
    assert llama_server.build() == tmp_path / "cache" / "course-llama-server" / "latest" / "llama-server"
    assert ran[0][0][-1] == f"llama-cpp-python{llama_server.RELEASES}" and ran[2][0][-1] == "3", ran
    assert ran[1][0][-len(llama_server.CMAKE):] == llama_server.CMAKE, ran[1][0]  # no CMAKE_ARGS: nothing after
    capsys.readouterr()
    for step, result, message in [
            ("download", (1, "", "Looking in indexes\nERROR: No matching distribution found for llama-cpp-python==9.9"),
             "pip could not fetch the source of llama-cpp-python==9.9: ERROR: No matching distribution found for "
             "llama-cpp-python==9.9"),
            ("download", (0, "", ""), "pip could not fetch the source of llama-cpp-python==9.9: no source package"),
            ("-S", (1, "-- The C compiler is GNU\nCMake Error at CMakeLists.txt:3 (project):\n", "CMake Error: later"),
             "`cmake -S` failed: CMake Error at CMakeLists.txt:3 (project):"),
            ("--build", (2, "[ 10%] Building C object\n", ""), "`cmake --build` failed: exit status 2")]:
        fail.clear()
        fail[step] = result  # pip's exit 0 with nothing fetched included
        assert llama_server.main(["--build", "--release", "9.9"]) == 1
        assert capsys.readouterr().err == f"llama_server: {message}\n", message
    fail.clear()
    monkeypatch.setenv(llama_server.VARIABLE, str(out))
    assert llama_server.main([]) == 0 and capsys.readouterr().out == f"llama_server: {out}\n"
    # as bench --serve starts it: MAX's batch as slots, each with the model's whole context, a float32 cache
    assert llama_server.command(out, Path("/m.gguf"), "127.0.0.1", 8080, 8, 1024, 2) == [
        str(out), "--model", "/m.gguf", "--host", "127.0.0.1", "--port", "8080", "--parallel", "8", "--ctx-size",
        "8192", "--threads", "2", "--threads-batch", "2", "--cache-type-k", "f32", "--cache-type-v", "f32"]


def test_bench_serve_reports_every_server_and_llama_cpps_settings(tmp_path, monkeypatch, capsys):
    """bench --serve's report, its servers faked (serve_one), 2 rounds: a line of settings with each server's last
    start, llama.cpp's server named with its settings, a row a server and client count (the rounds' median tok/s and
    their range, the ratio to one client, p50 and p95 over both rounds' requests, failures named), step 26's median
    ratio to MAX's Llama, the command; exit 1 as a request failed; --json the same numbers; and llama.cpp's server
    said missing (why) where none is found"""
    import statistics

    from course.programs import llama, llama_server, serve_bench

    speeds = {"the course's step 25": (100, 120), "llama.cpp's server": (300, 330), "MAX's Llama": (100, 110),
              "the course's step 26": (90, 88)}
    starts = {"the course's step 25": 17.2, "llama.cpp's server": 0.6, "MAX's Llama": 18.6, "the course's step 26": 17.4}
    rounds = {}

    def fake(model, runs_on, args):
        what = serve_bench.ARCHITECTURE[checkpoints.find(model).family, runs_on]
        k = rounds[what] = rounds.get(what, -1) + 1
        failed = int(what == "the course's step 26" and k == 1)
        return starts[what] + k, [{
            "clients": c, "requests": 8, "tokens": 256, "tok_s": speeds[what][k] * (1 if c == 1 else 4), "p50_s": 0,
            "p95_s": 0, "failed": failed * (c == 8), "latencies": [0.1 * (i + 1 + 8 * k) for i in range(8)],
            "failures": ["incomplete: finish_reason 'abort', 4 tokens"] * (failed * (c == 8))} for c in args.clients]

    monkeypatch.setattr(serve_bench, "serve_one", fake)
    found = tmp_path / "llama-server"
    monkeypatch.setattr(llama_server, "find", lambda: found)
    argv = ["--model", "course", "course-llama", "--clients", "1", "8", "--rounds", "2"]
    assert serve_bench.main(argv) == 1  # a request failed
    cpus = os.cpu_count()
    assert capsys.readouterr().out.splitlines() == [
        f"max serve on the CPU ({cpus} CPUs), each model's server in its own process, one after the other, 2 rounds; "
        "--max-batch-size 8; 4 requests a client of 32 greedy tokens, the same prompt; tok/s the rounds' median (their "
        "range in brackets), latencies over every round's requests; last ready in 18 s (course on the course's step "
        "25), 2 s (course on llama.cpp's server), 20 s (course-llama on MAX's Llama), 18 s (course-llama on the "
        "course's step 26)",
        f"llama.cpp's server: {found}, --parallel 8, float32 weights and KV cache, {llama.threads()} threads",
        "| model | runs on | clients | requests | tok/s | × one client | p50 latency (s) | p95 latency (s) | failed |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        "| course | the course's step 25 | 1 | 16 | 110.0 (100–120) | 1.00 | 0.90 | 1.60 | 0 |",
        "| course | the course's step 25 | 8 | 16 | 440.0 (400–480) | 4.00 | 0.90 | 1.60 | 0 |",
        "| course | llama.cpp's server | 1 | 16 | 315.0 (300–330) | 1.00 | 0.90 | 1.60 | 0 |",
        "| course | llama.cpp's server | 8 | 16 | 1260.0 (1200–1320) | 4.00 | 0.90 | 1.60 | 0 |",
        "| course-llama | MAX's Llama | 1 | 16 | 105.0 (100–110) | 1.00 | 0.90 | 1.60 | 0 |",
        "| course-llama | MAX's Llama | 8 | 16 | 420.0 (400–440) | 4.00 | 0.90 | 1.60 | 0 |",
        "| course-llama | the course's step 26 | 1 | 16 | 89.0 (88–90) | 1.00 | 0.90 | 1.60 | 0 |",
        "| course-llama | the course's step 26 | 8 | 16 | 356.0 (352–360) | 4.00 | 0.90 | 1.60 | 1 |",
        "  failed: incomplete: finish_reason 'abort', 4 tokens",
        "course-llama: the course's step 26 makes 0.85x (0.80–0.90) at 1 client, 0.85x (0.80–0.90) at 8 clients of "
        "what MAX's Llama makes on the same weights (the rounds' median)",
        "command: python -m course.programs.bench --serve --model course course-llama --clients 1 8 --rounds 2"]

    rounds.clear()
    assert serve_bench.main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["settings"] == {
        "models": ["course", "course-llama"], "max_batch_size": 8, "max_tokens": 32, "requests_per_client": 4,
        "rounds": 2, "start_s": {"course on the course's step 25": 18.2, "course on llama.cpp's server": 1.6,
                                 "course-llama on MAX's Llama": 19.6, "course-llama on the course's step 26": 18.4},
        "cpus": cpus, "llama_server": str(found),
        "command": "python -m course.programs.bench --serve --model course course-llama --clients 1 8 --rounds 2 "
                   "--json"}, out["settings"]
    assert [(r["model"], r["architecture"], r["clients"], r["tok_s"], r["rounds_tok_s"], r["failed"]) for r in
            out["rows"]][-2:] == [("course-llama", "the course's step 26", 1, statistics.median([90, 88]), [90, 88], 0),
                                  ("course-llama", "the course's step 26", 8, 356.0, [360, 352], 1)], out["rows"]

    def missing():
        raise llama_server.Missing("no llama-server here")

    monkeypatch.setattr(llama_server, "find", missing)
    rounds.clear()
    assert serve_bench.main(["--model", "course", "--clients", "1", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "llama.cpp's server: none (no llama-server here)" in out and "llama.cpp's server |" not in out, out
