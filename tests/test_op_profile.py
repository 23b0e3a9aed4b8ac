"""Chapter 16's op profile (``course/authoring/op_profile.py``): what it reads from MAX's op log and what it prints.

The profile itself is a measurement, so these checks run it on canned logs: a child process that prints
known lines at known times (the clock is the test's), and a child whose model, graph and generation are
the test's stand-ins. What they hold is the arithmetic (an op from its LAUNCH to its COMPLETE, nested ops
inside their outer one, medians over steps), the words of the table, and what the child is asked to do.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from course.authoring import op_profile
from course.outline import ROOT

pytestmark = pytest.mark.course


def test_op_profile_splits_a_logged_step():
    """op_profile times each outermost op from its LAUNCH to its COMPLETE, and splits the rest of a step into the
    time between ops and Python's"""
    from course.authoring.op_profile import kind_of, profile

    step = [(0.000, "MARK", "", -1),
            (0.001, "LAUNCH", "Epilogue(matmul, add)", 1), (0.002, "LAUNCH", "matmulmo.matmul", 2),
            (0.004, "COMPLETE", "matmulmo.matmul", 2), (0.005, "COMPLETE", "Epilogue(matmul, add)", 1),
            (0.006, "LAUNCH", "Prologue(static.reshape, slice, concat)", 3),
            (0.007, "COMPLETE", "Prologue(static.reshape, slice, concat)", 3),
            (0.010, "MARK", "", -1)]
    seconds, counts, between, python, whole = profile(step)
    got = {name: round(1000 * t, 6) for name, t in seconds.items()}
    assert got == {"Epilogue(matmul, add)": 4.0, "Prologue(static.reshape, slice, concat)": 1.0}, got
    assert dict(counts) == {"Epilogue(matmul, add)": 1, "Prologue(static.reshape, slice, concat)": 1}, counts
    assert (round(1000 * between, 6), round(1000 * python, 6), round(1000 * whole, 6)) == (1.0, 4.0, 10.0), \
        (between, python, whole)
    assert kind_of("Epilogue(matmul, add)").endswith("(matmul)") and kind_of("Prologue(slice, concat)").startswith(
        "concat"), (kind_of("Epilogue(matmul, add)"), kind_of("Prologue(slice, concat)"))


def test_a_step_without_ops_is_all_python():
    """a step whose graph logged no op: nothing between ops, the whole step Python's"""
    seconds, counts, between, python, whole = op_profile.profile([(1.0, "MARK", "", -1), (1.5, "MARK", "", -1)])
    assert (dict(seconds), dict(counts), between, python, whole) == ({}, {}, 0.0, 0.5, 0.5)


@pytest.mark.parametrize("name, kind", [
    ("mo.matmul", "the head and the layers' products (matmul)"), ("MatMul", "the head and the layers' products (matmul)"),
    ("custom.one_row_add", "the head and the layers' products (matmul)"),
    ("custom.block_one_row", "whole blocks, one op each (--kernel, float32: products, attention and all)"),
    ("custom.attend_one", "the attention by the Mojo kernel (--kernel)"),
    ("Attend_One", "the attention by the Mojo kernel (--kernel)"),
    ("mo.concat", "concat (step 15: the cache, copied; step 16: the scores)"),
    ("CONCAT", "concat (step 15: the cache, copied; step 16: the scores)"),
    ("mo.softmax", "softmax"), ("SoftMax", "softmax"),
    ("elementwise(add, gelu)", "layer norms, GELU, adds (fused elementwise)"),
    ("Foreach", "layer norms, GELU, adds (fused elementwise)"),
    ("mo.reduce.add", "reductions (mean, max, sum)"), ("Mean", "reductions (mean, max, sum)"),
    ("SUM", "reductions (mean, max, sum)"), ("mo.max", "reductions (mean, max, sum)"),
    ("mo.gather", "gather, slices, reshapes, copies"), ("Slice", "gather, slices, reshapes, copies"),
    ("RESHAPE", "gather, slices, reshapes, copies"), ("transpose", "gather, slices, reshapes, copies"),
    ("Copy", "gather, slices, reshapes, copies"), ("view", "gather, slices, reshapes, copies"),
    ("broadcast_to", "gather, slices, reshapes, copies"), ("mo.random", "other"),
    ("matmul then softmax", "the head and the layers' products (matmul)"),  # the first kind that matches
])
def test_each_op_name_has_its_kind(name, kind):
    """every kind the table names is found by its words, in any case; the first that matches wins; the rest is
    "other\""""
    assert op_profile.kind_of(name) == kind, (name, op_profile.kind_of(name))


LONG = "one_row_" + "x" * 80  # cut to 70 characters in the table of names


def canned_log() -> list[tuple[float, str]]:
    """(the time the parent reads it, in ms; the child's line): the prefill's step, then two decode steps."""
    log = [(0, "compiling…\n"), (1, "[OP] LAUNCH before the start [id=99]\n"), (2, "@@ STEP 1\n"),  # before START: no step
           (5, "@@ START\n"), (6, "[OP] LAUNCH mo.matmul [id=1]\n"), (8, "[OP] COMPLETE mo.matmul [id=1]\n"),
           (10, "@@ STEP 5\n"),  # the prefill's step, dropped
           (11, f"[OP] LAUNCH {LONG} [id=2]\n"), (12, "[OP] LAUNCH inner softmax [id=3]\n"),
           (14, "[OP] COMPLETE inner softmax [id=3]\n"), (15, f"[OP] COMPLETE {LONG} [id=2]\n"),
           (16, "a line of the child's own\n"),
           (17, "[OP] LAUNCH mo.concat [id=4]\n"), (18, "[OP] COMPLETE mo.concat [id=4]\n"),
           (20, "@@ STEP 6\n"),
           (21, f"[OP] LAUNCH {LONG} [id=5]\n"), (27, f"[OP] COMPLETE {LONG} [id=5]\n"),
           (28, f"[OP] LAUNCH {LONG} [id=6]\n"), (30, f"[OP] COMPLETE {LONG} [id=6]\n"),
           (31, "[OP] LAUNCH MatMul_head [id=7]\n"), (32.5, "[OP] COMPLETE MatMul_head [id=7]\n")]
    # 13 more names, each 0.02 ms, so that only the --top costliest are listed
    log += [(32.6 + 0.04 * i + d, f"[OP] {what} gather_{i:02d} [id={10 + i}]\n")
            for i in range(13) for d, what in ((0, "LAUNCH"), (0.02, "COMPLETE"))]
    return log + [(36, "@@ STEP 7\n")]


class Child:
    """subprocess.Popen's stand-in: records how it was started, prints the canned log, exits with ``code``."""

    started: list = []

    def __init__(self, log, code):
        self.lines, self.code = [line for _, line in log], code

    def __call__(self, command, **options):
        Child.started.append((command, options))
        self.stdout = iter(self.lines)
        return self

    def wait(self):
        return self.code


@pytest.fixture
def child_of(monkeypatch):
    """main's child process and clock replaced: the log's lines arrive at its times; the random checkpoint is a name"""
    def install(log, code=0):
        times = iter([t / 100 for t, _ in log])  # the log's times are tenths of a millisecond here
        monkeypatch.setattr(op_profile.time, "perf_counter", lambda: next(times))
        monkeypatch.setattr(op_profile.subprocess, "Popen", Child(log, code))
        Child.started = []
        import course.weights

        made = []
        monkeypatch.setattr(course.weights, "random_checkpoint", lambda folder, n_layer: made.append((folder, n_layer))
                            or f"{folder}/written")
        return made
    return install


def rows(text: str, border: str = "│") -> list[list[str]]:
    """A rich table's rows of cells: its data lines, or with border "┃" its header's."""
    found = [[cell.strip() for cell in line.split(border)[1:-1]] for line in text.splitlines() if line.startswith(border)]
    return [cells for cells in found if cells]  # (a line cut where the text was split holds none)


def test_the_profile_of_two_logged_steps(child_of, capsys, monkeypatch):
    """`op_profile --model M --tokens 3 --top 2 --quantize q6_k --kernel`: the command, every setting shown; the child
    is this module again with the op log on, from the course's folder; its prefill and anything before its start are
    left out; each op name's time is its median over the decode steps (0 where a step lacks it), its count the most a
    step ran; the kinds, the time between ops and Python's as milliseconds and shares of the median step; the
    costliest names, cut to 70 characters"""
    monkeypatch.setenv("COURSE_SEEN_BY_THE_CHILD", "yes")
    made = child_of(canned_log())
    assert op_profile.main(["--model", "M", "--tokens", "3", "--top", "2", "--quantize", "q6_k", "--kernel"]) == 0
    assert made == [], "a checkpoint was written although --model names one"
    [(command, options)] = Child.started
    assert command == [sys.executable, "-u", "-m", "course.authoring.op_profile", "--child", "--path", "decode",
                       "--model", "M", "--tokens", "3", "--quantize", "q6_k", "--kernel"], command
    env = options.pop("env")
    assert env["MODULAR_MAX_DEBUG_OP_LOG_LEVEL"] == "TRACE" and env["COURSE_SEEN_BY_THE_CHILD"] == "yes", env
    assert {k: v for k, v in options.items() if k != "bufsize"} == dict(
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), options
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "$ python -m course.authoring.op_profile --path decode --tokens 3 --top 2 --model M --quantize q6_k --kernel"
    # the two decode steps: 100 and 160 ms; between ops 20 and 23.4 ms; Python 30 (100 - 70 inside) and 39 (160 - 121)
    assert lines[1] == ("step 16's decode graph, q6_k weights, the course's Mojo kernel, 2 logged decode steps, medians; "
                        "a logged step takes 130.0 ms"), lines[1]
    table, top = out.split("the 2 costliest op names")
    assert rows(table, "┃") == [["where a decode step's time goes", "ops per step", "ms per step", "share"]], table
    assert rows(table) == [
        # LONG: 40 ms, then 60 + 20 (median 60, twice a step); MatMul_head: 0, then 15 (median 7.5)
        ["the head and the layers' products (matmul)", "3", "67.50", "52%"],
        ["concat (step 15: the cache, copied; step 16: the scores)", "1", "5.00", "4%"],  # 10 ms, then 0
        ["gather, slices, reshapes, copies", "13", "1.30", "1%"],  # 13 names of 0.2 ms, halved by the median
        ["between ops, inside the graph (the runtime's own work)", "", "21.70", "17%"],
        ["Python: into the graph and back, the argmax", "", "34.50", "27%"],
    ], rows(table)
    header = next(line for line in lines if "costliest op names" in line)
    assert rows(header, "┃") == [["the 2 costliest op names", "ops per step", "ms per step", "µs each"]], header
    assert rows(top) == [[LONG[:70], "2", "60.00", "30000"], ["MatMul_head", "1", "7.50", "7500"]], rows(top)


def test_the_defaults_profile_step_16s_graph_on_bench_s_random_gpt2(child_of, capsys):
    """without options: step 16's decode graph, 24 tokens, the 12 costliest names, on GPT-2 small's sizes with
    random weights written to a scratch folder (12 layers), whose path the child is given and the header is not"""
    made = child_of(canned_log())
    assert op_profile.main([]) == 0
    [(folder, n_layer)] = made
    assert folder.name == "random-gpt2" and folder.parent.name.startswith("op-profile-") and n_layer == 12, made
    [(command, _)] = Child.started
    assert command[4:] == ["--child", "--path", "decode", "--model", f"{folder}/written", "--tokens", "24"], command
    out = capsys.readouterr().out
    assert out.splitlines()[:2] == ["$ python -m course.authoring.op_profile --path decode --tokens 24 --top 12",
                                    "step 16's decode graph, 2 logged decode steps, medians; a logged step takes 130.0 ms"]
    listed = rows(out.split("the 12 costliest op names")[1])
    names = [row[0] for row in listed]  # the gathers' times differ in the clock's last bits
    assert names[:3] == [LONG[:70], "MatMul_head", "mo.concat"] and len(names) == 12, names
    assert all(name.startswith("gather_") for name in names[3:]), names


def test_step_15s_graph_is_named_as_such(child_of, capsys):
    """--path cache: step 15's cached graph, in the child's command and the header"""
    child_of(canned_log())
    assert op_profile.main(["--path", "cache", "--model", "M"]) == 0
    assert Child.started[0][0][4:8] == ["--child", "--path", "cache", "--model"], Child.started
    assert capsys.readouterr().out.splitlines()[1].startswith("step 15's cached graph, 2 logged decode steps"), "header"


@pytest.mark.parametrize("code, log", [(1, canned_log()), (0, canned_log()[:9])], ids=["a failed child", "no decode step"])
def test_a_child_that_fails_or_logs_no_step_is_one_line(child_of, code, log):
    """a child that exits nonzero, or whose log holds no decode step: one line that says how to see why"""
    child_of(log, code)
    with pytest.raises(SystemExit, match=r"^op_profile: the decoding process failed \(run it with --child to see why\)$"):
        op_profile.main(["--model", "M"])


def test_the_child_decodes_with_the_asked_graph_and_marks_each_step(monkeypatch, capsys):
    """--child: step 16's decode graph (or step 15's, for --path cache) of the checkpoint, on the CPU, with the
    quantized weights and kernel asked for; four greedy tokens to compile and warm up, then a mark before the
    timed tokens and one after each"""
    import course.programs.build as build
    import course.programs.generate as generate
    from course import runtime

    calls = []

    class Generation:
        def generate(self, next_logits, ids, count, **kwargs):
            calls.append(("generate", next_logits, list(ids), count, kwargs))
            yield from range(500, 500 + count)

    steps = {13: Generation()}
    monkeypatch.setattr(runtime, "setup", lambda: calls.append("setup"))
    monkeypatch.setattr(generate, "import_steps", lambda *args: calls.append(("import_steps", *args)) or steps)
    pretrained = type("Pretrained", (), {"config": type("Config", (), {"n_positions": 77})()})()
    monkeypatch.setattr(build, "load", lambda *args: calls.append(("load", *args)) or pretrained)
    monkeypatch.setattr(build, "compile_model", lambda *args, **kwargs: calls.append(("compile", args, kwargs)) or "run")
    for argv, decode in ((["--path", "decode", "--quantize", "q6_k", "--kernel"], True), (["--path", "cache"], False)):
        calls.clear()
        assert op_profile.main(["--child", "--model", "M", "--tokens", "3", *argv]) == 0
        ids = list(range(100, 112))
        kwargs = {"n_positions": 77, "temperature": 0.0}
        (name, args, options) = calls[3]
        assert calls[:3] == ["setup", ("import_steps", "solutions", ROOT / "solutions", [11, 13, 14, 15, 16]),
                             ("load", steps, "M", "gpt2")], calls[:3]
        assert name == "compile" and args[:2] == (steps, pretrained) and type(args[2]).__name__ == "CPU", args
        assert options == dict(cached=True, decode=decode, quantize="q6_k" if decode else None, kernel=decode), options
        assert calls[4:] == [("generate", "run", ids, 4, kwargs), ("generate", "run", ids, 3, kwargs)], calls[4:]
        assert capsys.readouterr().out == "@@ START\n@@ STEP 500\n@@ STEP 501\n@@ STEP 502\n"


def test_help_names_every_option(capsys, monkeypatch):
    """--help: the command as typed, the module's first line, and each option with its choices and a line of help;
    --child, the parent's own, is not shown"""
    monkeypatch.setenv("COLUMNS", "200")  # argparse's width: one line an option
    with pytest.raises(SystemExit) as exit_:
        op_profile.main(["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: python -m course.authoring.op_profile [-h]"), text
    assert "\nA per-op profile of decode steps, read from MAX's own op log (the appendix \"Past the roofline\", \"Where MAX stops\").\n" in text, text
    lines = text.splitlines()
    for option in ("--path {decode,cache}", "--model MODEL", "--tokens TOKENS", "--top TOP",
                   "--quantize {q4_0,q4_k,q6_k}", "--kernel"):
        at = next((i for i, line in enumerate(lines) if line.strip().startswith(option)), None)
        assert at is not None, (option, text)
        words = lines[at].strip()[len(option):].strip() or lines[at + 1].strip()  # its help, beside it or below
        assert words and not words.startswith("-"), (option, text)
    assert "--child" not in text, text


@pytest.mark.parametrize("argv, wrong", [(["--path", "decoder"], "argument --path: invalid choice: 'decoder'"),
                                         (["--quantize", "q8_0"], "argument --quantize: invalid choice: 'q8_0'")])
def test_an_unknown_path_or_format_is_refused(argv, wrong, capsys):
    """a graph or a format op_profile cannot profile is refused before anything runs"""
    with pytest.raises(SystemExit) as exit_:
        op_profile.main(argv)
    assert exit_.value.code == 2 and wrong in capsys.readouterr().err


@pytest.mark.parametrize("name", ["q4_0", "q4_k", "q6_k"])
def test_each_format_reaches_the_child(name, child_of, capsys):
    """--quantize q4_0, q4_k or q6_k: the child is asked for that format, and the header names it"""
    child_of(canned_log())
    assert op_profile.main(["--model", "M", "--quantize", name]) == 0
    assert Child.started[0][0][-2:] == ["--quantize", name], Child.started
    assert f", {name} weights, 2 logged" in capsys.readouterr().out


def test_read_splits_the_log_into_decode_steps(child_of):
    """read: each line timestamped as it arrives; a step from one mark to the next, both kept; the events between,
    as (time, LAUNCH or COMPLETE, op name, id); lines before the start, other lines and the prefill's step left out"""
    log = canned_log()
    child_of(log)
    steps = op_profile.read(op_profile.subprocess.Popen(["child"]))

    def event(t, line):
        found = op_profile.EVENT.search(line)
        return (t / 100, found[1], found[2], int(found[3])) if found else (t / 100, "MARK", "", -1)

    def step(start, end):  # the marks at start and end (the child's @@ STEP lines), the events between
        return [event(t, line) for t, line in log if start <= t <= end and (t in (start, end) or "[OP]" in line)]

    assert steps == [step(10, 20), step(20, 36)], steps
    assert [len(step) for step in steps] == [8, 34] and steps[0][1] == (0.11, "LAUNCH", LONG, 2), steps[0][:2]


def test_ops_in_flight_together_do_not_stop_the_profile():
    """two outermost ops whose LAUNCH and COMPLETE interleave (not nested): the profile goes on, and counts only the
    ops it can time from their own LAUNCH"""
    step = [(0.0, "MARK", "", -1), (0.001, "LAUNCH", "a", 1), (0.002, "LAUNCH", "b", 2), (0.003, "COMPLETE", "a", 1),
            (0.004, "COMPLETE", "b", 2), (0.005, "LAUNCH", "c", 3), (0.007, "COMPLETE", "c", 3), (0.010, "MARK", "", -1)]
    seconds, counts, _, _, whole = op_profile.profile(step)
    assert {name: round(1000 * t, 6) for name, t in seconds.items()} == {"c": 2.0} and dict(counts) == {"c": 1}, seconds
    assert whole == 0.010
