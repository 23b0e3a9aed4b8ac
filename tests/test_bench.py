"""``bench``'s report from canned runs: ``course/programs/bench.py``'s ``main`` in the tests' process.

bench times each path in a process of its own (``tests/test_programs.py`` runs it so, end to end). Here
``_run_worker`` hands back made-up runs instead, so that the arithmetic of the report can be checked
exactly: the medians over rounds, the × Hugging Face and × llama.cpp columns, the perplexities, which
paths run in which order, and the lines around the table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import pytest

from course.programs import bench, llama
from harness import solution
from reference import GEN, GEN_LLAMA
from test_programs import checkpoint, llama_checkpoint  # noqa: F401 - the fixtures: a small GPT-2, a small Llama

pytestmark = pytest.mark.programs

#: decode tok/s of each path in each of 3 rounds: the medians are the last values, and no mean is a median. The
#: medians, the median prefill and the scores carry more decimals than the JSON keeps, so that its rounding shows.
#: llama.cpp's rounds run against the others' swing, so that the median of the rounds' ratios is not the ratio of
#: the medians.
SPEEDS = {"hf": (20.0, 30.0, 22.123456), "no_cache": (10.0, 15.0, 11.123456), "cache": (30.0, 45.0, 33.123456),
          "decode": (40.0, 60.0, 42.123456), "kernel": (50.0, 70.0, 53.123456), "cache_q4_0": (90.0, 120.0, 93.123456),
          "kernel_q4_0": (120.0, 150.0, 123.123456), "llama_f32": (40.0, 80.0, 63.123456),
          "llama_q4_0": (100.0, 190.0, 153.123456)}
#: The order of a round: each llama.cpp path right after the last of ours compared with it.
RUN_ORDER = ["hf", "no_cache", "cache", "decode", "kernel", "llama_f32", "cache_q4_0", "kernel_q4_0", "llama_q4_0"]
PREFILL_MS = (10.0, 19.0, 11.123456)  # each path's, round by round: the median 11.123456
ACCURACY = {"top1": 7 / 9, "max_abs_err": 0.0625123, "perplexity": 41.512345, "perplexity_fp32": 40.254321, "steps": 9,
            "logit_std": 1.5}


class Calls(list):
    """bench's worker calls as (path, scored, model, gguf_dir), and llama.files' calls as .written."""


@pytest.fixture
def canned(monkeypatch, checkpoint_dir):
    """bench's workers replaced by canned runs: each call is recorded, round by round. (The table is printed as
    wide as a terminal of 200 columns: rich reads COLUMNS.)"""
    monkeypatch.setenv("COLUMNS", "200")
    calls = Calls()

    def run(path, args, model, accuracy=False):
        round_ = sum(call[0] == path for call in calls)
        calls.append((path, accuracy, model, args.gguf_dir))
        calls.timeouts.add(args.worker_timeout)
        speed = SPEEDS[path][round_]
        out = {"prefill_ms": PREFILL_MS[round_], "decode_tok_s": speed, "step_ms": [1000 / speed * (1 + k / 10) for k in range(7)],
               "tokens": [round_, 1, 2, 3, 4, 5, 6, 7],
               "kv_cache": "float16" if path.startswith("kernel_") or path == "llama_q4_0" else "float32"}
        if accuracy and path != "hf":
            out["accuracy"] = ACCURACY
        if accuracy and path == "hf":
            out["perplexity"] = 40.012345
        return out

    monkeypatch.setattr(bench, "_run_worker", run)
    monkeypatch.setattr(llama, "files", lambda folder, scratch, formats: written.append((folder, scratch, formats)) or {})
    calls.written = written = []  # each llama.files call: the checkpoint, the scratch folder, the formats
    calls.timeouts = set()  # the --worker-timeout each call was given
    return calls


def fake_checkpoint(folder, model_type: str = "gpt2"):
    """A folder that passes for a checkpoint as far as bench's main looks: its files are there, and config.json
    names the family (the canned workers read nothing)."""
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
    for name in ("vocab.json", "merges.txt", "model.safetensors"):
        (folder / name).write_text("")
    return folder


@pytest.fixture
def checkpoint_dir(tmp_path):
    return fake_checkpoint(tmp_path / "gpt2")


def test_the_json_holds_each_paths_medians_and_both_ratios(canned, checkpoint_dir, capsys, monkeypatch):
    monkeypatch.setattr(llama, "version", lambda: "0.3.36")
    code = bench.main(["--model", str(checkpoint_dir), "--quantize", "q4_0", "--json", "--rounds", "3"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and list(out) == list(SPEEDS), list(out)
    hf = statistics.median(SPEEDS["hf"])
    for path, speeds in SPEEDS.items():
        row, speed = out[path], statistics.median(speeds)
        # two decimals for the times and speeds, three for the ratios, four for the scores
        assert (row["decode_tok_s"], row["prefill_ms"], row["vs_hf"]) == (round(speed, 2), 11.12, round(speed / hf, 3)), (path, row)
        assert row["tokens"] == [0, 1, 2, 3, 4, 5, 6, 7], (path, row["tokens"])  # the first round's
        assert {"prefill_ms", "decode_tok_s", "vs_hf", "kv_cache", "tokens"} <= set(row), row
        assert row["kv_cache"] == ("float16" if path in ("kernel_q4_0", "llama_q4_0") else "float32"), row
        peer = bench.PEERS.get(path)
        ratios = [ours / theirs for ours, theirs in zip(speeds, SPEEDS[peer])] if peer else None
        assert row.get("vs_llama_cpp") == (round(statistics.median(ratios), 3) if peer else None), row
        assert row.get("vs_llama_cpp_rounds") == ([round(ratio, 3) for ratio in ratios] if peer else None), row
    assert {path: out[path].get("perplexity") for path in ("hf", "cache", "cache_q4_0", "kernel_q4_0")} == {
        "hf": 40.0123, "cache": 40.2543, "cache_q4_0": 41.5123, "kernel_q4_0": 41.5123}
    assert (out["cache_q4_0"]["top1_vs_fp32"], out["cache_q4_0"]["max_logit_err"]) == (0.7778, 0.0625)
    assert [path for path, *_ in canned] == RUN_ORDER * 3, "the paths do not alternate round after round, in pairs"
    assert canned.timeouts == {1800}, canned.timeouts  # half an hour a process, unless told
    scored = {path for path, accuracy, *_ in canned if accuracy}
    assert scored == {"hf", "cache_q4_0", "kernel_q4_0"} and all(not a for p, a, *_ in canned[len(SPEEDS):]), scored
    assert {gguf for *_, gguf in canned} != {None}, "llama.cpp's workers were not told where the GGUF files are"
    assert {bench.Path(model).resolve() for _, _, model, _ in canned} == {checkpoint_dir.resolve()}, canned
    [(folder, scratch, formats)] = canned.written  # the checkpoint as GGUF, f32 and q4_0, where the workers look
    assert (folder.resolve(), str(scratch), formats) == (checkpoint_dir.resolve(), canned[0][3], ["q4_0"]), canned.written


def test_each_llama_cpp_path_runs_right_after_the_last_of_ours_it_is_compared_with(canned, checkpoint_dir, capsys,
                                                                                   monkeypatch):
    """a round's order puts each pair side by side (a peer with no partner in the run goes last); with one round,
    the × llama.cpp cell is that round's ratio, with no range and no word of one in the title"""
    paths = ["hf", "cache", "kernel", "cache_q4_0", "llama_f32", "llama_q4_0", "llama_q4_k"]
    assert bench.run_order(paths) == ["hf", "cache", "kernel", "llama_f32", "cache_q4_0", "llama_q4_0", "llama_q4_k"]
    assert bench.run_order(["llama_f32", "hf"]) == ["hf", "llama_f32"]
    monkeypatch.setattr(llama, "version", lambda: "0.3.36")

    def cell_and_title(rounds: int) -> tuple[str, str]:
        """the kernel row's × llama.cpp cell and the table's title, from `bench --rounds N` of kernel and llama_f32"""
        canned.clear()
        assert bench.main(["--model", str(checkpoint_dir), "--rounds", str(rounds), "--paths", "kernel", "llama_f32"]) == 0
        table = capsys.readouterr().out
        [row] = [line.split("│") for line in table.splitlines() if bench.PATHS["kernel"] in line]
        return row[6].strip(), " ".join(table.split("┏")[0].split())

    cell, title = cell_and_title(1)
    assert cell == f"{SPEEDS['kernel'][0] / SPEEDS['llama_f32'][0]:.2f}", cell  # 50 / 40
    assert title.endswith("greedy; medians of 1 rounds"), title  # nothing after it
    cell, title = cell_and_title(2)  # two rounds: the median of 50/40 and 70/80, and their range
    assert cell == "1.06 (0.88–1.25)", cell  # (1.25 + 0.875) / 2
    assert title.endswith("greedy; medians of 2 rounds; × llama.cpp: the median of each round's ratio (their range)"), title


def test_off_a_terminal_each_row_and_the_command_stay_on_one_line(canned, checkpoint_dir, capsys, monkeypatch):
    """printed to a file (no terminal, no COLUMNS), the table is not wrapped at 80 columns: each path's row is one
    line with all its figures; the command is one line, to copy; without a llama.cpp path, no llama.cpp note. Told a
    width (COLUMNS, as on a terminal), the table fits it, its rows wrapped"""
    monkeypatch.delenv("COLUMNS")
    monkeypatch.setattr(llama, "version", lambda: "0.3.36")
    argv = ["--model", str(checkpoint_dir), "--quantize", "q4_0", "--rounds", "1", "--paths", "cache", "cache_q4_0"]
    assert bench.main(argv) == 0
    printed = capsys.readouterr()
    rows = [line for line in printed.out.splitlines() if line.count("│") > 3]
    assert len(rows) == 3 and all(len(row.split("│")) == 10 and row.split("│")[1].strip() for row in rows), printed.out
    command = "Command: python -m course.programs.bench " + " ".join(argv)
    assert any(line.rstrip().endswith(command) for line in printed.err.splitlines()), printed.err
    assert "llama-cpp-python" not in printed.err, printed.err  # no llama.cpp row: nothing to say of its build
    monkeypatch.setenv("COLUMNS", "70")  # as a terminal 70 columns wide says: the table fits it
    assert bench.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 70 and sum(line.count("│") > 3 for line in lines) > 3, "\n".join(lines)


def test_a_short_worker_timeout_is_passed_on(canned, checkpoint_dir):
    assert bench.main(["--model", str(checkpoint_dir), "--rounds", "1", "--paths", "cache", "--worker-timeout", "0.5"]) == 0
    assert canned.timeouts == {0.5}, canned.timeouts


def test_the_table_shows_every_setting_and_the_command(canned, checkpoint_dir, capsys, monkeypatch):
    monkeypatch.setattr(llama, "version", lambda: "0.3.36")
    argv = ["--model", str(checkpoint_dir), "--quantize", "q4_0", "--rounds", "3", "--new-tokens", "8"]
    assert bench.main(argv) == 0
    printed = capsys.readouterr()
    table, notes = printed.out, " ".join(printed.err.split())
    assert ("12-token prompt, 8 new tokens, greedy; medians of 3 rounds; × llama.cpp: the median of each round's "
            "ratio (their range)") in " ".join(table.split()), table
    for column in ("KV cache", "prefill ms", "decode tok/s", "× Hugging Face", "× llama.cpp", "perplexity",
                   "top-1 vs fp32", "max |Δ logit|"):
        assert column in table, (column, table)
    lines = {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[2:-1]]
             for line in table.splitlines() if line.count("│") > 3}
    header = next(line for line in table.splitlines() if line.count("┃") > 3)
    assert [cell.strip() for cell in header.split("┃")[1:-1]] == [
        "path", "KV cache", "prefill ms", "decode tok/s", "× Hugging Face", "× llama.cpp", "perplexity", "top-1 vs fp32",
        "max |Δ logit|"], header
    raw = next(line for line in table.splitlines() if bench.PATHS["cache_q4_0"] in line).split("│")[1:-1]
    # the path left, figures right (× llama.cpp's cells, a median and a range, are all as wide as their column)
    assert raw[0].startswith(" " + bench.PATHS["cache_q4_0"]) and all(c.endswith(c.strip() + " ") for c in raw[1:]), raw
    assert all(c.startswith("  ") for column, c in enumerate(raw[1:]) if column != 4), raw
    assert lines[bench.PATHS["decode"]][5:] == ["", "", ""], lines  # no perplexity, no accuracy for float32's other paths
    assert f"GPT-2 ({checkpoint_dir}'s weights, cpu)" in " ".join(table.split()), table
    # × llama.cpp: each round's ratio, 90/100, 120/190, 93.1/153.1, and their median; not 93.1/153.1, the medians'
    assert lines[bench.PATHS["cache_q4_0"]] == ["float32", "11.1", "93.1", "4.21", "0.63 (0.61–0.90)", "41.51", "7/9",
                                                "0.063"], lines
    assert lines[bench.PATHS["cache"]][:6] == ["float32", "11.1", "33.1", "1.50", "0.56 (0.52–0.75)", "40.25"], lines
    assert lines[bench.PATHS["llama_f32"]][4] == "", lines  # llama.cpp's own rows: no ratio to themselves
    assert lines[bench.PATHS["hf"]] == ["float32", "11.1", "22.1", "1.00", "", "40.01", "", ""], lines
    assert f"Threads: {llama.threads()} for every engine" in notes and "llama-cpp-python 0.3.36" in notes, notes
    assert "not installed" not in notes and "A Llama checkpoint" not in notes, notes
    assert "Command: python -m course.programs.bench " + " ".join(argv) in notes, notes
    assert "Every row scores the same 9 next tokens of held-out text" in notes and "deviation of 1.50" in notes, notes
    for round_ in range(3):  # a line as each run ends
        for path, speeds in SPEEDS.items():
            assert f"round {round_ + 1}/3: {bench.PATHS[path]}: {speeds[round_]:.1f} tok/s (" in notes, (path, notes)


def test_without_llama_cpp_one_line_says_how_to_add_it_and_no_peer_column(canned, checkpoint_dir, capsys, monkeypatch):
    monkeypatch.setattr(llama, "version", lambda: None)
    assert bench.main(["--model", str(checkpoint_dir), "--rounds", "2"]) == 0  # two rounds: no word of their ratios
    printed = capsys.readouterr()
    assert "× llama.cpp" not in printed.out and "perplexity" not in printed.out, printed.out
    assert f"llama.cpp is not installed, so bench times no peer: {llama.INSTALL}." in " ".join(printed.err.split())
    assert "GGUF written" not in printed.err and "llama_model_quantize" not in printed.err, printed.err
    assert (f"Threads: {llama.threads()} for every engine (MAX's and PyTorch's default, llama.cpp's n_threads). Command: "
            "python -m course.programs.bench --model") in " ".join(printed.err.split()), printed.err  # nothing between
    assert all(line.count("│") == 6 for line in printed.out.splitlines() if "│" in line), printed.out  # 5 columns
    assert [path for path, *_ in canned] == ["hf", "no_cache", "cache", "decode", "kernel"] * 2, canned


def test_a_checkpoint_named_from_another_folder_reaches_each_worker(canned, checkpoint_dir, capsys, monkeypatch):
    """`--model gpt2` given from the folder that holds it: each path's process, which runs in the course's folder,
    is handed the checkpoint's absolute path"""
    monkeypatch.setattr(llama, "version", lambda: None)
    monkeypatch.chdir(checkpoint_dir.parent)
    assert bench.main(["--model", checkpoint_dir.name, "--rounds", "1", "--json"]) == 0
    assert {model for _, _, model, _ in canned} == {str(checkpoint_dir.resolve())}, canned


def test_paths_keep_hugging_face_and_kernels_that_cannot_compile_are_left_out(canned, checkpoint_dir, capsys,
                                                                             monkeypatch):
    from course import runtime

    monkeypatch.setattr(llama, "version", lambda: None)

    def no_kernels():
        raise runtime.KernelError("no Mojo compiler here [pixi add modular]")

    monkeypatch.setattr(runtime, "kernels", no_kernels)
    assert bench.main(["--model", str(checkpoint_dir), "--rounds", "1", "--quantize", "q4_0", "--json"]) == 0
    printed = capsys.readouterr()
    assert list(json.loads(printed.out)) == ["hf", "no_cache", "cache", "decode", "cache_q4_0"], printed.out
    said = " ".join(printed.err.split())
    assert "No Mojo kernel paths (kernel, kernel_q4_0): no Mojo compiler here [pixi add modular]." in said, said
    canned.clear()
    assert bench.main(["--model", str(checkpoint_dir), "--rounds", "1", "--paths", "cache", "--json"]) == 0
    assert list(json.loads(capsys.readouterr().out)) == ["hf", "cache"]


@pytest.mark.parametrize("argv, said", [
    (["--new-tokens", "2"], "bench: --new-tokens must be 3 or more, --prompt-tokens and --rounds 1 or more"),
    (["--prompt-tokens", "0"], "bench: --new-tokens must be 3 or more, --prompt-tokens and --rounds 1 or more"),
    (["--rounds", "0"], "bench: --new-tokens must be 3 or more, --prompt-tokens and --rounds 1 or more"),
    (["--worker-timeout", "0"], "bench: --worker-timeout must be more than 0 seconds, not 0"),
    (["--worker-timeout", "-2.5"], "bench: --worker-timeout must be more than 0 seconds, not -2.5"),
    (["--worker-timeout", "nan"], "bench: --worker-timeout must be more than 0 seconds, not nan"),
])
def test_settings_that_cannot_be_timed_are_refused(argv, said):
    with pytest.raises(SystemExit) as refused:
        bench.main(argv)
    assert str(refused.value) == said, str(refused.value)


def test_the_command_line_shown_is_the_one_that_ran(canned, checkpoint_dir, capsys, monkeypatch):
    """bench run as a program (no argv given): the note's command is its own command line"""
    monkeypatch.setattr(llama, "version", lambda: None)
    monkeypatch.setattr("sys.argv", ["bench", "--model", str(checkpoint_dir), "--rounds", "1"])
    assert bench.main() == 0
    notes = " ".join(capsys.readouterr().err.split())
    assert f"Command: python -m course.programs.bench --model {checkpoint_dir} --rounds 1" in notes, notes


def test_a_checkpoint_that_cannot_be_found_is_one_line(tmp_path):
    with pytest.raises(SystemExit) as refused:
        bench.main(["--model", str(tmp_path / "nowhere")])
    assert str(refused.value).startswith("bench: ") and "nowhere" in str(refused.value), str(refused.value)


def test_the_smallest_settings_that_can_be_timed_run(canned, checkpoint_dir, capsys, monkeypatch):
    """3 new tokens (a prefill and two decode steps), a 1-token prompt, 1 round"""
    monkeypatch.setattr(llama, "version", lambda: None)
    argv = ["--model", str(checkpoint_dir), "--new-tokens", "3", "--prompt-tokens", "1", "--rounds", "1", "--json"]
    assert bench.main(argv) == 0 and list(json.loads(capsys.readouterr().out)) == ["hf", "no_cache", "cache", "decode",
                                                                                    "kernel"]


def test_a_llama_checkpoint_runs_part_iis_paths_and_refuses_part_is_flags(canned, tmp_path, capsys, monkeypatch):
    folder = fake_checkpoint(tmp_path / "llama", "llama")
    for flag in (["--quantize", "q4_0"], ["--roofline", str(tmp_path / "r.svg")]):
        with pytest.raises(SystemExit) as refused:
            bench.main(["--model", str(folder), *flag])
        assert str(refused.value) == (f"bench: {flag[0]} runs Part I's GPT-2 (chapters 15 and 16); {folder} is a "
                                      "Llama, which Part II runs in float32: leave it out"), str(refused.value)
    monkeypatch.setattr(llama, "version", lambda: "0.3.36")  # installed, and still no peer for a Llama
    monkeypatch.setenv("COLUMNS", "200")
    assert bench.main(["--model", str(folder), "--rounds", "1", "--json"]) == 0
    assert list(json.loads(capsys.readouterr().out)) == list(bench.LLAMA_PATHS) and not canned.written
    svg = tmp_path / "llama.svg"
    assert bench.main(["--model", str(folder), "--rounds", "1", "--plot", str(svg)]) == 0
    printed = capsys.readouterr()
    legend = [t["text"] for t in svg_parts(svg)["text"] if t["text"].startswith("— ")]
    assert legend == [f"— {label}" for label in bench.LLAMA_PATHS.values()], legend
    assert f"round 1/1: {bench.LLAMA_PATHS['no_cache']}: " in " ".join(printed.err.split()), printed.err
    rows = [line.split("│")[1].strip() for line in printed.out.splitlines() if line.count("│") > 3]
    assert rows == list(bench.LLAMA_PATHS.values()) and "Llama (" in printed.out, printed.out
    notes = " ".join(printed.err.split())
    assert ("A Llama checkpoint: Hugging Face, ours without a cache and with step 24's; step 16's decode graph and the "
            "llama.cpp peer are Part I's (GPT-2) only.") in notes and "not installed" not in notes, notes


# --- each path's worker, in the tests' process ---------------------------------------------------------------------
# bench starts `bench --worker PATH` in a process of its own for each run; these checks call that worker here, on
# the small checkpoint of tests/test_programs.py (whose graphs its checks compile too), to check what each path runs
# and how its clock is read.

NEW, PROMPT, EVAL = 8, 12, 16  # new tokens, the prompt's, held-out tokens scored


@pytest.fixture
def bench_clock(monkeypatch):
    """Every reading of the clock that bench.py's own code takes, in order (MAX's, PyTorch's and pytest's are left out)."""
    import sys
    import time

    read, real = [], time.perf_counter

    def perf_counter():
        now = real()
        if sys._getframe(1).f_globals.get("__name__") == bench.__name__:
            read.append(now)
        return now

    monkeypatch.setattr(time, "perf_counter", perf_counter)
    return read


@pytest.fixture
def runners(monkeypatch):
    """Each runner bench's worker builds, as (its type, its model's type, its cache's type, quantized or not), and the
    length of each sequence it is then called on."""
    from course.programs import build

    built, real = [], build.compile_model

    class Recorded:
        def __init__(self, runner):
            self.runner, self.calls = runner, []

        def __call__(self, ids):
            self.calls.append(len(ids))
            return self.runner(ids)

        def __getattr__(self, name):
            return getattr(self.runner, name)

    def compile_model(steps, pretrained, device, cached, quantize=None, **options):
        runner = Recorded(real(steps, pretrained, device, cached, quantize, **options))
        model = getattr(runner.runner, "model", None)
        built.append((type(runner.runner).__name__, type(model).__name__, getattr(getattr(runner.runner, "cache_dtype", None), "name", ""),
                      quantize, runner.calls))
        return runner

    monkeypatch.setattr(build, "compile_model", compile_model)
    return built


@pytest.fixture(scope="module")
def hf_tokens(checkpoint) -> list[int]:
    """Hugging Face's greedy tokens after bench's prompt, up to its end token."""
    import transformers

    from reference import hf_greedy

    model = transformers.GPT2LMHeadModel.from_pretrained(checkpoint).eval()
    prompt = bench._prompt(PROMPT, GEN["vocab_size"])
    assert len(prompt) == PROMPT and all(0 <= t < GEN["vocab_size"] for t in prompt), prompt
    return hf_greedy(model, prompt, NEW, model.config.eos_token_id)[0]


def same_tokens(ours: list[int], hf: list[int], what: str) -> None:
    """``ours`` (NEW tokens) begin with Hugging Face's greedy tokens, which stop at the end token (bench's go on)."""
    assert len(ours) == NEW and ours[:len(hf)] == hf, f"{what} generated {ours}, Hugging Face {hf}"


def timed(result: dict, clock: list[float]) -> None:
    """The worker's figures are the clock's readings around its NEW tokens (the last NEW + 1): the prefill up to the
    first token, and decode tok/s over the rest."""
    start, *at = clock[-(NEW + 1):]
    steps = [b - a for a, b in zip(at, at[1:])]
    assert result["prefill_ms"] == pytest.approx(1000 * (at[0] - start), rel=1e-12), (result, clock)
    assert result["step_ms"] == pytest.approx([1000 * s for s in steps], rel=1e-12), (result, clock)
    assert result["decode_tok_s"] == pytest.approx(len(steps) / sum(steps), rel=1e-12), (result, clock)


def hf_forwards(monkeypatch, what) -> list:
    """Each forward of Hugging Face's GPT-2 from now on, recorded as ``what(model, input_ids)``. The spy keeps
    forward's signature, which generate reads to decide whether to pass an attention mask at all."""
    import functools

    import transformers

    forwards, real = [], transformers.GPT2LMHeadModel.forward

    @functools.wraps(real)
    def forward(self, input_ids=None, **kwargs):
        forwards.append(what(self, input_ids))
        return real(self, input_ids, **kwargs)

    monkeypatch.setattr(transformers.GPT2LMHeadModel, "forward", forward)
    return forwards


def test_hugging_faces_worker_times_its_cached_generate(checkpoint, hf_tokens, bench_clock, monkeypatch):
    """`bench --worker hf`: Hugging Face's generate, warmed up, then timed at each of its tokens; greedy, with its
    cache (a one-token forward after the prompt's), without gradients, in eval mode"""
    import torch

    forwards = hf_forwards(monkeypatch, lambda model, ids: (ids.shape[1], torch.is_grad_enabled(), model.training,
                                                            ids.device.type))
    result = bench.worker("hf", NEW, PROMPT, "cpu", str(checkpoint), 0)
    same_tokens(result["tokens"], hf_tokens, "bench's hf worker")
    assert len(bench_clock) == NEW + 1, bench_clock  # the start, and one reading a token
    timed(result, bench_clock)
    assert (result["kv_cache"], "perplexity" in result) == ("float32", False), result
    timed_forwards = forwards[-NEW:]
    assert [f[0] for f in timed_forwards] == [PROMPT] + [1] * (NEW - 1), forwards  # the cache: one new token a step
    assert len(forwards) > NEW, "no warm-up before the timed run"
    assert {f[1:] for f in forwards} == {(False, False, "cpu")}, forwards


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["hf", "no_cache", "cache", "decode"])
def test_each_worker_runs_on_the_gpu_with_hugging_faces_tokens(path, checkpoint, hf_tokens, monkeypatch):
    """`bench --device gpu`: Hugging Face's worker generates on CUDA, ours on MAX's GPU, and each gives the CPU's
    greedy tokens: the check that sees a worker left on the CPU (mutation_targets.UNTESTED)"""
    import torch

    if not torch.cuda.is_available():
        pytest.skip(f"needs a CUDA build of PyTorch beside the GPU (this one is {torch.__version__}); bench refuses "
                    "--device gpu without it")
    forwards = hf_forwards(monkeypatch, lambda model, ids: ids.device.type)
    result = bench.worker(path, NEW, PROMPT, "gpu", str(checkpoint), 0)
    same_tokens(result["tokens"], hf_tokens, f"bench's {path} worker on the GPU")
    if path == "hf":
        assert set(forwards) == {"cuda"}, forwards


def test_hugging_faces_worker_times_every_token_past_the_end_token(checkpoint, hf_tokens, tmp_path):
    """`bench --worker hf` on a checkpoint whose end token is one greedy picks early: Hugging Face's generate holds
    the end token back and runs all NEW tokens (bench times the same count on every path)"""
    import shutil

    folder = tmp_path / "ends-early"
    shutil.copytree(checkpoint, folder)
    for name in ("config.json", "generation_config.json"):
        config = json.loads((folder / name).read_text())
        config["eos_token_id"] = hf_tokens[1]
        (folder / name).write_text(json.dumps(config))
    result = bench.worker("hf", NEW, PROMPT, "cpu", str(folder), 0)
    assert len(result["tokens"]) == NEW and hf_tokens[1] not in result["tokens"], (result["tokens"], hf_tokens[1])


def test_hugging_faces_worker_is_greedy_on_the_whole_prompt_whatever_the_checkpoint_asks(checkpoint, tmp_path,
                                                                                          monkeypatch):
    """`bench --worker hf` on a checkpoint whose config asks for float16 and whose generation_config.json asks to
    sample without a cache, after a prompt that holds token 0, the pad id bench hands generate (GPT-2's "!"), with an
    end token other than 0: still float32, greedy, with its cache, and every token of the prompt is read (generate
    would take a pad id in the prompt for padding, and mask it)"""
    import shutil

    import torch
    import transformers

    from reference import hf_greedy

    folder = tmp_path / "samples"
    shutil.copytree(checkpoint, folder)
    end = GEN["vocab_size"] - 1
    sampling = {"do_sample": True, "temperature": 5.0, "top_k": 0, "use_cache": False}
    for name, asks in (("config.json", {"use_cache": False, "dtype": "float16"}), ("generation_config.json", sampling)):
        config = json.loads((folder / name).read_text())
        (folder / name).write_text(json.dumps(config | {"eos_token_id": end, "bos_token_id": end} | asks))
    prompt = [0] * (PROMPT // 2) + bench._prompt(PROMPT - PROMPT // 2, GEN["vocab_size"])  # half of it "!"
    monkeypatch.setattr(bench, "_prompt", lambda n, vocab: prompt[:n])
    model = transformers.GPT2LMHeadModel.from_pretrained(checkpoint).eval()
    greedy = hf_greedy(model, prompt, NEW, end)[0]
    assert len(greedy) == NEW, greedy  # no end token in the way
    forwards = hf_forwards(monkeypatch, lambda model, ids: (ids.shape[1], model.dtype))
    assert bench.worker("hf", NEW, PROMPT, "cpu", str(folder), 0)["tokens"] == greedy
    assert forwards[-NEW:] == [(PROMPT, torch.float32)] + [(1, torch.float32)] * (NEW - 1), forwards  # one new token a step


def test_hugging_faces_worker_scores_the_held_out_text(checkpoint):
    """`bench --worker hf --eval-tokens 80`: Hugging Face's perplexity on the held-out tokens every path scores:
    exp of the mean negative log-likelihood of each next token, in float64"""
    import transformers

    tokens = 80  # two windows of the context's 64 tokens: every window's tokens count
    result = bench.worker("hf", 3, PROMPT, "cpu", str(checkpoint), tokens)
    model = transformers.GPT2LMHeadModel.from_pretrained(checkpoint).eval()
    assert result["perplexity"] == pytest.approx(perplexity(model, checkpoint, GEN["n_positions"], tokens), rel=1e-9), result


def perplexity(model, folder, context: int, tokens: int = EVAL) -> float:
    """``model``'s perplexity on the ``tokens`` held-out tokens bench scores (windows of at most ``context``), in float64."""
    import numpy as np
    import torch

    from course.programs.quantize import held_out

    windows = held_out(folder, solution(12).Tokenizer.from_dir(folder), context, tokens)
    assert sum(len(w) - 1 for w in windows) == tokens, windows
    nll = []
    with torch.no_grad():
        for window in windows:
            logits = model(torch.tensor([window])).logits[0].double().numpy()
            top = logits.max(-1, keepdims=True)
            logp = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
            nll += [-logp[i, window[i + 1]] for i in range(len(window) - 1)]
    return float(np.exp(np.mean(nll)))


@pytest.mark.parametrize("path, runner, model, cache", [
    ("cache", "CachedNextLogits", "NoneType", ""),
    ("no_cache", "function", "NoneType", ""),
    ("decode", "DecodeNextLogits", "DecodeGPT2LMHeadModel", "float32"),
    ("kernel", "DecodeNextLogits", "KernelGPT2LMHeadModel", "float32"),
])
def test_our_workers_time_the_runner_their_path_names(path, runner, model, cache, checkpoint, hf_tokens, bench_clock,
                                                       runners, request):
    """`bench --worker PATH` for our float32 paths: the runner its label names, warmed up, then timed at each token,
    greedy (Hugging Face's tokens)"""
    if path == "kernel":
        request.getfixturevalue("mojo_kernels")
    result = bench.worker(path, NEW, PROMPT, "cpu", str(checkpoint), 0)
    same_tokens(result["tokens"], hf_tokens, f"bench's {path} worker")
    assert [r[:4] for r in runners] == [(runner, model, cache, None)], runners
    calls = runners[0][4]
    assert len(calls) > NEW and calls[-NEW] == PROMPT, calls  # a warm-up, then the timed NEW tokens from the prompt
    assert len(bench_clock) == NEW + 1, bench_clock  # the start, and one reading a token
    timed(result, bench_clock)
    assert result["kv_cache"] == ("none" if path == "no_cache" else "float32"), result


@pytest.mark.parametrize("path, model, cache", [("cache_q4_0", "DecodeGPT2LMHeadModel", "float32"),
                                                ("kernel_q4_0", "KernelGPT2LMHeadModel", "float16")])
def test_a_formats_worker_scores_it_against_float32(path, model, cache, checkpoint, runners, request):
    """`bench --worker cache_q4_0 --eval-tokens 16` (and kernel_q4_0): step 16's decode graph on q4_0 weights, timed;
    then float32 (step 15's cache) and the format score the same 16 held-out tokens, float32's perplexity being
    Hugging Face's"""
    if path.startswith("kernel"):
        request.getfixturevalue("mojo_kernels")
    result = bench.worker(path, 3, PROMPT, "cpu", str(checkpoint), EVAL)
    assert [r[:4] for r in runners] == [("DecodeNextLogits", model, cache, "q4_0"),
                                        ("CachedNextLogits", "NoneType", "", None)], runners
    accuracy = result["accuracy"]
    hf = bench.worker("hf", 3, PROMPT, "cpu", str(checkpoint), EVAL)["perplexity"]
    assert accuracy["steps"] == EVAL and accuracy["perplexity_fp32"] == pytest.approx(hf, rel=1e-4), (accuracy, hf)
    assert accuracy["perplexity"] != accuracy["perplexity_fp32"] and accuracy["max_abs_err"] > 0, accuracy
    assert result["kv_cache"] == cache and len(result["tokens"]) == 3, result
    assert "accuracy" not in bench.worker(path, 3, PROMPT, "cpu", str(checkpoint), 0), "scored without --eval-tokens"


def test_a_format_the_width_cannot_block_is_refused_before_compiling(checkpoint, runners):
    """`bench --worker cache_q4_k` on a model 64 wide: quantize.check's refusal, before anything is compiled"""
    with pytest.raises(ValueError) as refused:
        bench.worker("cache_q4_k", 3, PROMPT, "cpu", str(checkpoint), 0)
    assert str(refused.value).startswith(f"--quantize q4_k needs widths that are multiples of 256; n_embd is {GEN['n_embd']}"), str(refused.value)
    assert runners == [], runners


@pytest.mark.parametrize("path", ["hf", "no_cache", "cache"])
def test_a_llamas_workers_run_part_iis_steps_on_hugging_faces_tokens(path, llama_checkpoint, runners):
    """`bench --worker PATH --model <a Llama>`: Hugging Face's LlamaForCausalLM, ours without a cache (step 13's graph
    of step 22's model) and with step 24's, on the same greedy tokens; Hugging Face scores the held-out text with
    the Llama's context (max_position_embeddings)"""
    import transformers

    from reference import hf_greedy

    model = transformers.LlamaForCausalLM.from_pretrained(llama_checkpoint).eval()
    hf = hf_greedy(model, bench._prompt(PROMPT, model.config.vocab_size), NEW, model.config.eos_token_id)[0]
    result = bench.worker(path, NEW, PROMPT, "cpu", str(llama_checkpoint), EVAL if path == "hf" else 0)
    same_tokens(result["tokens"], hf, f"bench's {path} worker on a Llama")
    if path == "hf":
        assert result["perplexity"] == pytest.approx(perplexity(model, llama_checkpoint, GEN_LLAMA["max_position_embeddings"]),
                                                     rel=1e-9), result
    else:
        assert [r[0] for r in runners] == ["function" if path == "no_cache" else "CachedLlamaNextLogits"], runners


@pytest.mark.llama
def test_llama_cpps_worker_runs_its_gguf_file_with_the_peers_cache(checkpoint, hf_tokens, tmp_path, monkeypatch):
    """`bench --worker llama_f32 --gguf-dir DIR`: llama.cpp's f32 file of the same checkpoint gives Hugging Face's
    tokens, with a float32 cache (its peers' type; float16 for a quantized file, as the kernel paths')"""
    from course.programs import llama

    monkeypatch.chdir(tmp_path)
    opened, real_open = [], llama.open_model
    monkeypatch.setattr(llama, "open_model", lambda path, *args: opened.append((bench.Path(path), args[-1])) or real_open(path, *args))
    llama.files(checkpoint, tmp_path, ["q4_0"])
    result = bench.worker("llama_f32", NEW, PROMPT, "cpu", str(checkpoint), 0, str(tmp_path))
    same_tokens(result["tokens"], hf_tokens, "bench's llama_f32 worker")
    assert (result["kv_cache"], len(result["step_ms"])) == ("float32", NEW - 1), result
    quantized = bench.worker("llama_q4_0", NEW, PROMPT, "cpu", str(checkpoint), 0, str(tmp_path))
    assert (quantized["kv_cache"], len(quantized["tokens"])) == ("float16", NEW), quantized
    assert opened == [(tmp_path / "model-f32.gguf", "float32"), (tmp_path / "model-q4_0.gguf", "float16")], opened
    assert [bench.llama_cache(name) for name in ("f32", "q4_0", "q4_k", "q6_k")] == ["float32"] + ["float16"] * 3
    args = argparse.Namespace(new_tokens=NEW, prompt_tokens=PROMPT, device="cpu", eval_tokens=0, gguf_dir=str(tmp_path),
                              worker_timeout=600)
    assert bench._run_worker("llama_f32", args, str(checkpoint))["tokens"] == result["tokens"]  # told where the file is


def test_a_worker_runs_in_its_own_process_and_hands_back_its_figures(checkpoint, tmp_path, monkeypatch):
    """bench's `_run_worker`: `bench --worker` in a process of its own (from any working directory), its JSON line
    read back; scored only when asked; a failed one is one line naming the path and its last line of stderr"""
    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(new_tokens=3, prompt_tokens=5, device="cpu", eval_tokens=EVAL, gguf_dir=None,
                              worker_timeout=600)
    plain = bench._run_worker("hf", args, str(checkpoint))
    assert len(plain["tokens"]) == 3 and len(plain["step_ms"]) == 2 and "perplexity" not in plain, plain
    assert plain["tokens"] == bench.worker("hf", 3, 5, "cpu", str(checkpoint), 0)["tokens"], "not the same prompt"
    scored = bench._run_worker("hf", args, str(checkpoint), accuracy=True)
    assert scored["tokens"] == plain["tokens"] and scored["perplexity"] > 1, scored
    with pytest.raises(SystemExit) as failed:
        bench._run_worker("hf", args, str(tmp_path / "nowhere"))
    said = str(failed.value)
    assert said.startswith("bench: the hf process failed: OSError: ") and "nowhere" in said and "\n" not in said, said
    assert bench.worker_failed("cache", 1, " \n") == "bench: the cache process failed: (no output)"  # a silent one


def test_a_worker_that_takes_too_long_is_stopped_with_one_line(checkpoint):
    """a path's process that has given no result in --worker-timeout seconds is killed, and bench says so in one
    line, with the path and the limit (a MAX run was once seen to hang for good; bench must not wait with it)"""
    args = argparse.Namespace(new_tokens=3, prompt_tokens=5, device="cpu", eval_tokens=0, gguf_dir=None,
                              worker_timeout=0.25)  # far less than Python takes to import torch
    started = time.perf_counter()
    with pytest.raises(SystemExit) as stopped:
        bench._run_worker("hf", args, str(checkpoint))
    assert time.perf_counter() - started < 30, "bench waited for the process to finish"
    assert str(stopped.value) == (
        "bench: the hf process gave no result in 0.25 s and was stopped (--worker-timeout): a first MAX run compiles "
        "for minutes, so on a slow machine allow it more; a run that hangs is a fault: run bench again"), str(stopped.value)


def test_the_worker_command_prints_its_path_s_figures_as_one_json_line(checkpoint, capsys):
    """`bench --worker hf --new-tokens 3 --prompt-tokens 5 --model DIR`: what each path's process runs; its last line
    is the worker's result as JSON, with every setting passed on"""
    argv = ["--worker", "hf", "--new-tokens", "3", "--prompt-tokens", "5", "--model", str(checkpoint)]
    assert bench.main([*argv, "--eval-tokens", "0"]) == 0
    plain = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert plain["tokens"] == bench.worker("hf", 3, 5, "cpu", str(checkpoint), 0)["tokens"] and "perplexity" not in plain
    assert bench.main([*argv, "--eval-tokens", str(EVAL)]) == 0
    scored = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert scored["perplexity"] == pytest.approx(bench.worker("hf", 3, 5, "cpu", str(checkpoint), EVAL)["perplexity"])
    assert bench.main(["--worker", "cache", "--new-tokens", "3", "--prompt-tokens", "5", "--model", str(checkpoint)]) == 0
    ours = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (ours["tokens"], ours["kv_cache"]) == (plain["tokens"], "float32"), (ours, plain)


@pytest.mark.llama
def test_the_worker_command_finds_llama_cpps_file_where_it_is_told(checkpoint, hf_tokens, tmp_path, monkeypatch, capsys):
    from course.programs import llama as peer

    monkeypatch.chdir(tmp_path)
    peer.files(checkpoint, tmp_path, [])
    assert bench.main(["--worker", "llama_f32", "--new-tokens", str(NEW), "--model", str(checkpoint), "--gguf-dir",
                       str(tmp_path)]) == 0
    same_tokens(json.loads(capsys.readouterr().out.strip().splitlines()[-1])["tokens"], hf_tokens, "llama_f32's command")


@pytest.mark.parametrize("cuda, said", [(None, "is a CPU build"), ("12.4", "is built with CUDA, but finds no GPU")])
def test_a_gpu_race_without_cuda_is_refused(cuda, said, monkeypatch):
    """`--device gpu` with a PyTorch that has no GPU: which PyTorch, why, and what to do; `--device cpu` asks nothing"""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", cuda)
    assert bench._refuse_unfair_gpu("cpu") is None
    with pytest.raises(SystemExit) as refused:
        bench.main(["--device", "gpu", "--rounds", "1"])
    assert str(refused.value) == (
        f"bench --device gpu: this PyTorch ({torch.__version__}) {said}, so Hugging Face would run on the CPU against "
        "ours on the GPU, which is no fair race; install a CUDA build of PyTorch, or compare on the CPU (--device cpu)")


# --- the pictures ----------------------------------------------------------------------------------------------------

SVG = "{http://www.w3.org/2000/svg}"


def svg_parts(file) -> dict[str, list]:
    """An SVG's elements by tag (line, polyline, circle, text), each as its attributes, a text's words as "text"; and
    its viewBox's width and height."""
    import xml.etree.ElementTree as ET

    root = ET.parse(file).getroot()
    parts = {"viewBox": [float(v) for v in root.get("viewBox").split()]}
    stray = [text for text in (root.text, *(element.tail for element in root)) if text and text.strip()]
    assert not stray, f"text outside the SVG's elements: {stray}"
    for element in root:
        parts.setdefault(element.tag.removeprefix(SVG), []).append(dict(element.attrib, text=element.text or ""))
    return parts


def is_colour(value: str) -> bool:
    import re

    return re.fullmatch(r"#[0-9a-f]{6}", value, re.IGNORECASE) is not None


def by_height(circles: list[dict]) -> list[dict]:
    """The points from the top of the picture down: the fastest first."""
    return sorted(circles, key=lambda c: float(c["cy"]))


def test_every_path_has_a_colour_of_its_own_and_the_roofline_groups_each_formats_paths():
    """the plot tells every path apart; the roofline draws a format's paths (ours, llama.cpp's) in the colour of
    their float32 path, since the formats lie apart along its axis of bytes"""
    assert set(bench.COLOURS) == set(bench.ROOFLINE_COLOURS) == set(bench.PATHS), set(bench.PATHS) ^ set(bench.COLOURS)
    assert all(map(is_colour, bench.COLOURS.values())) and len(set(bench.COLOURS.values())) == len(bench.COLOURS)
    f32 = {"cache": "cache", "kernel": "kernel", "llama": "llama_f32"}
    grouped = {path: bench.COLOURS[f32.get(path.split("_")[0], path)] for path in bench.PATHS}
    assert bench.ROOFLINE_COLOURS == grouped, bench.ROOFLINE_COLOURS


def test_the_plot_draws_each_paths_mean_speed_so_far(canned, checkpoint_dir, tmp_path, capsys, monkeypatch):
    """`bench --plot FILE`: a line per path through its mean decode tok/s after each token (the medians over rounds
    of each step's time), on axes from 0 that hold every line, each line named in its own colour"""
    monkeypatch.setattr(llama, "version", lambda: None)
    svg = tmp_path / "speed.svg"
    assert bench.main(["--model", str(checkpoint_dir), "--quantize", "q4_0", "--plot", str(svg), "--json"]) == 0
    paths = list(json.loads(capsys.readouterr().out))
    parts = svg_parts(svg)
    _, _, width, height = parts["viewBox"]
    (x_axis, y_axis) = [{k: float(v) for k, v in line.items() if k[0] in "xy"} for line in parts["line"][:2]]
    assert x_axis["y1"] == x_axis["y2"] == y_axis["y2"] and x_axis["x1"] == y_axis["x1"] == y_axis["x2"], parts["line"]
    left, right, bottom, top = x_axis["x1"], x_axis["x2"], x_axis["y1"], y_axis["y1"]
    assert 0 < left < right < width and 0 < top < bottom < height, (left, right, top, bottom)
    lines = parts["polyline"]
    assert len(lines) == len(paths), lines
    expected = {}
    for path in paths:  # the canned step times: 1000 / speed x (1 + k / 10) for step k, in every round
        step_ms = [1000 / statistics.median(SPEEDS[path]) * (1 + k / 10) for k in range(7)]
        expected[path] = [(i + 1, 1000 * i / sum(step_ms[:i])) for i in range(1, 8)]
    x_max = max(x for points in expected.values() for x, _ in points)
    y_top = max(y for points in expected.values() for _, y in points)
    drawn = [[tuple(map(float, point.split(","))) for point in line["points"].split()] for line in lines]
    highest = min(y for points in drawn for _, y in points)
    scale = (bottom - highest) / y_top  # px a tok/s, from the highest point
    assert top < highest < top + (bottom - top) / 4, f"the highest line is at {highest}, the axis from {top} to {bottom}"
    for path, points, line in zip(paths, drawn, lines):
        want = [(left + (right - left) * x / x_max, bottom - scale * y) for x, y in expected[path]]
        assert [v for point in points for v in point] == pytest.approx([v for point in want for v in point], abs=0.06), (
            path, points, want)
    legend = [t for t in parts["text"] if t["text"].startswith("— ")]
    assert [t["text"] for t in legend] == [f"— {bench.PATHS[path]}" for path in paths], legend
    colours = [line["stroke"] for line in lines]
    assert all(map(is_colour, colours)) and len(set(colours)) == len(colours), colours
    assert [t["fill"] for t in legend] == colours, (legend, colours)
    rows = [float(t["y"]) for t in legend]
    assert all(b - a >= 12 for a, b in zip(rows, rows[1:])) and all(top <= y <= bottom for y in rows), rows
    for t in legend:  # right of the axes, and inside the picture (at CHAR_WIDTH font sizes a character)
        assert right < float(t["x"]) and float(t["x"]) + bench.CHAR_WIDTH * 12 * len(t["text"]) <= width, (t, right, width)
    ticks = [t for t in parts["text"] if t["text"].replace(".", "").isdigit()]
    y_ticks = [t for t in ticks if t.get("text-anchor") == "end"]
    x_ticks = [t for t in ticks if t.get("text-anchor") == "middle"]
    assert [float(t["text"]) for t in x_ticks] == [x_max * k / 4 for k in range(5)], x_ticks
    assert [float(t["x"]) for t in x_ticks] == pytest.approx([left + (right - left) * k / 4 for k in range(5)], abs=0.5)
    assert len(y_ticks) == 5 and float(y_ticks[0]["text"]) == 0 and float(y_ticks[0]["y"]) == pytest.approx(bottom + 4, abs=0.5)
    for tick in y_ticks:  # each label at its value's height (labels are rounded to whole tok/s)
        assert float(tick["y"]) - 4 == pytest.approx(bottom - scale * float(tick["text"]), abs=scale * 0.5 + 0.5), tick
    assert float(y_ticks[-1]["y"]) - 4 == pytest.approx(top, abs=0.5), (y_ticks, top)  # the top label at the axis' top
    assert all(bottom < float(t["y"]) < height for t in x_ticks), x_ticks  # under the axis
    assert all(float(t["x"]) < left for t in y_ticks), y_ticks  # left of it
    assert all(0 <= float(t.get("x", 0)) <= width and 0 <= float(t.get("y", 0)) <= height for t in parts["text"])
    titles = {t["text"]: t for t in parts["text"] if t["text"][0].isalpha()}
    assert set(titles) == {"tokens generated", "decode tok/s (mean so far)"}, titles
    assert float(titles["tokens generated"]["x"]) == pytest.approx((left + right) / 2, abs=0.5), titles  # centred under
    assert float(titles["tokens generated"]["y"]) > bottom + 16, titles  # and under the ticks
    y_title = titles["decode tok/s (mean so far)"]
    x, y = float(y_title["x"]), float(y_title["y"])  # turned about its own anchor, centred beside the axis
    assert y_title["transform"] == f"rotate(-90 {y_title['x']} {y_title['y']})" and x < left - 16, y_title
    assert y == pytest.approx((top + bottom) / 2, abs=0.5), (y_title, top, bottom)


@pytest.fixture
def gpt2_small_sizes(tmp_path):
    """A folder that passes for GPT-2 small's checkpoint as far as bench's roofline reads it: its config.json (the
    bytes a token), the files beside it empty (the canned workers read nothing)."""
    import transformers

    folder = fake_checkpoint(tmp_path / "gpt2-small")
    (folder / "config.json").write_text(transformers.GPT2Config().to_json_string())
    return folder


BANDWIDTH = 40.0  # GB/s: every canned speed under its memory limit at GPT-2 small's sizes (f32's: 80 tok/s)


#: A crowded roofline: the decode tok/s of a whole run on GPT-2 small's sizes (2026-11-29), five float32 points
#: within a factor of 2.2 and the quantized ones bunched by format.
CROWDED = {"hf": 38.2, "no_cache": 27.2, "cache": 46.9, "decode": 72.7, "kernel": 80.8, "cache_q4_0": 310.5,
           "cache_q4_k": 233.1, "cache_q6_k": 195.7, "kernel_q4_0": 348.3, "kernel_q4_k": 343.1, "kernel_q6_k": 284.7,
           "llama_f32": 73.6, "llama_q4_0": 302.7, "llama_q4_k": 317.3, "llama_q6_k": 228.3}


def test_a_crowded_rooflines_labels_stay_inside_the_axes_and_apart(gpt2_small_sizes, tmp_path):
    """every path of a real run: each label inside the axes, above or below its point where beside it is taken, never
    over another label, the ticks or the axis's title"""
    checkpoint = gpt2_small_sizes
    config = solution(14).config_from_json(json.loads((checkpoint / "config.json").read_text()))
    svg = tmp_path / "crowded.svg"
    bench.roofline({path: {"decode_tok_s": v} for path, v in CROWDED.items()}, svg, bench.PATHS, config, 74.7, 2)
    parts = svg_parts(svg)
    (x_axis, y_axis, *_) = [{k: float(v) for k, v in line.items() if k[0] in "xy"} for line in parts["line"]]
    bottom, top = x_axis["y1"], y_axis["y1"]
    labels = [t for t in parts["text"] if t["text"].endswith(" tok/s")]
    assert len(labels) == len(CROWDED), labels
    boxes = {t["text"]: (float(t["x"]), float(t["x"]) + bench.CHAR_WIDTH * 10 * len(t["text"]), float(t["y"]) - 10,
                         float(t["y"]) + 3) for t in labels}
    outside = {text: box[2:] for text, box in boxes.items() if box[2] < top or box[3] > bottom}
    assert not outside, f"labels outside the axes (y from {top} to {bottom}): {outside}"
    crossed = [(a, b) for a in boxes for b in boxes if a < b and boxes[a][0] < boxes[b][1] and boxes[b][0] < boxes[a][1]
               and boxes[a][2] < boxes[b][3] and boxes[b][2] < boxes[a][3]]
    assert not crossed, f"labels over each other: {crossed}"
    # a label beside its point is centred on it; one moved off it is a row or more away, with a line to its point
    leaders = {(float(line["x1"]), float(line["y1"])): float(line["y2"]) for line in parts["line"][3:]}
    moved = 0
    for circle, label in zip(parts["circle"], labels):  # each point's circle, then its label
        cx, cy, baseline = float(circle["cx"]), float(circle["cy"]), float(label["y"])
        if (cx, cy) in leaders:
            moved += 1
            assert leaders[cx, cy] == pytest.approx(baseline - 4, abs=0.1) and abs(baseline - 4 - cy) >= 13, label
        else:
            assert baseline == pytest.approx(cy + 4, abs=0.1), (label, circle)
    assert 0 < moved < len(labels), moved


def test_labels_that_cannot_sit_beside_their_point_take_the_nearest_free_row_below_then_above(gpt2_small_sizes, tmp_path):
    """five float32 paths at one speed are one point: its first label beside it (centred on it), the next one row
    (13 px, a label's height) below, then one above, two below, two above, each with a line to the point; labels
    elsewhere stay beside their own points"""
    config = solution(14).config_from_json(json.loads((gpt2_small_sizes / "config.json").read_text()))
    speeds = {"hf": 60.0, "no_cache": 60.0, "cache": 60.0, "decode": 60.0, "kernel": 60.0, "cache_q4_0": 400.0,
              "kernel_q4_0": 20.0}
    svg = tmp_path / "stacked.svg"
    bench.roofline({path: {"decode_tok_s": v} for path, v in speeds.items()}, svg, bench.PATHS, config, 30.0, 2)
    parts = svg_parts(svg)
    labels = [t for t in parts["text"] if t["text"].endswith(" tok/s")]
    placed = {label["text"].rsplit(":", 1)[0]: (float(circle["cx"]), float(circle["cy"]), float(label["x"]),
                                                 float(label["y"])) for circle, label in zip(parts["circle"], labels)}
    leaders = {(float(line["x1"]), float(line["y1"]), round(float(line["y2"]), 1)) for line in parts["line"][3:]}
    cx, cy, _, _ = placed[bench.PATHS["hf"]]
    offsets = [0, 13, -13, 26, -26]  # from beside the point, in the order the labels are placed (equal speeds: PATHS')
    for path, offset in zip(("hf", "no_cache", "cache", "decode", "kernel"), offsets):
        at = placed[bench.PATHS[path]]
        assert at[:2] == (cx, cy) and at[3] == pytest.approx(cy + 4 + offset, abs=0.15), (path, at, cy)
        if offset:  # its line, from the point to the label's middle height
            assert (cx, cy, round(at[3] - 4, 1)) in leaders, (path, at, leaders)
    for path in ("cache_q4_0", "kernel_q4_0"):  # alone: beside their points, no line
        x, y, _, baseline = placed[bench.PATHS[path]]
        assert baseline == pytest.approx(y + 4, abs=0.15) and not any(line[:2] == (x, y) for line in leaders), path
    assert len(leaders) == 4, leaders


@pytest.mark.parametrize("where", ["top", "bottom"])
def test_a_stack_of_labels_at_the_axes_edge_turns_back_inside(gpt2_small_sizes, tmp_path, where):
    """six float32 paths at one speed, the highest or the lowest of the picture: their labels take the rows nearest
    the point, 13 px apart, below first, but only rows whose label lies inside the axes (10 px above its baseline, 3
    below); where the edge stops one side, the other side goes on. The other point's speed is swept so that the
    stack's point, and its rows, fall at every height of a row's span near the edge."""
    config = solution(14).config_from_json(json.loads((gpt2_small_sizes / "config.json").read_text()))
    stacked = ("hf", "no_cache", "cache", "decode", "kernel", "llama_f32")
    stopped = 0
    for step in range(16):
        speed, other = (400.0, 3.0 * 1.06 ** step) if where == "top" else (3.0, 400.0 * 1.12 ** step)
        speeds = {**{path: speed for path in stacked}, "cache_q4_0": other}
        svg = tmp_path / "edge.svg"
        bench.roofline({path: {"decode_tok_s": v} for path, v in speeds.items()}, svg, bench.PATHS, config, 5.0, 2)
        parts = svg_parts(svg)
        x_axis, y_axis = [{k: float(v) for k, v in line.items() if k[0] in "xy"} for line in parts["line"][:2]]
        top, bottom = y_axis["y1"], x_axis["y1"]
        texts = [t for t in parts["text"] if t["text"].endswith(" tok/s")]
        labels = {t["text"].rsplit(":", 1)[0]: float(t["y"]) for t in texts}
        cy = next(float(c["cy"]) for c, t in zip(parts["circle"], texts) if t["text"].startswith(bench.PATHS["hf"] + ":"))
        rows = [cy + 4 + 13 * k * side for k in range(40) for side in ((1,) if k == 0 else (1, -1))]
        inside = [row for row in rows if top + 10 <= row <= bottom - 3]
        expected = inside[: len(stacked)]
        stopped += expected != rows[: len(stacked)]  # the edge changed where a label goes
        assert [labels[bench.PATHS[path]] for path in stacked] == pytest.approx(expected, abs=0.15), (step, labels, expected)
    assert stopped >= 8, f"the stack reached the {where} edge in only {stopped} of 16 pictures"


def test_the_roofline_puts_each_path_at_its_bytes_and_speed_under_the_memory_limit(canned, gpt2_small_sizes, tmp_path,
                                                                                     capsys, monkeypatch):
    """`bench --roofline FILE`: the bandwidth measured before any path runs; a point per path at (MB of weights a
    token, decode tok/s) on log-log axes, with ticks at 1, 2, 5, 10, … where they fall; the memory limit (bandwidth ÷
    bytes) as a line across them, above every point, named above the axes; each point labelled beside it with its
    label and speed; every word inside the picture"""
    import math

    from course.programs.generate import import_steps
    from course.programs.quantize import FORMATS

    checkpoint = gpt2_small_sizes
    monkeypatch.setattr(llama, "version", lambda: "0.3.36")
    monkeypatch.setenv("COLUMNS", "200")
    step_16 = import_steps("solutions", bench.SOLUTIONS, [16])[16]
    measured = []
    monkeypatch.setattr(step_16, "measure_bandwidth", lambda: measured.append(len(canned)) or BANDWIDTH)
    svg = tmp_path / "roofline.svg"
    assert bench.main(["--model", str(checkpoint), "--quantize", "q4_0", "--roofline", str(svg), "--rounds", "1"]) == 0
    assert measured == [0], f"the bandwidth was measured after {measured} runs, not before the first"
    notes = " ".join(capsys.readouterr().err.split())
    said = f"Roofline: {BANDWIDTH:.1f} GB/s measured by NumPy before the runs; wrote {svg}."
    assert "".join(said.split()) in "".join(notes.split()), notes  # a long scratch path may wrap, even at 200 columns
    parts = svg_parts(svg)
    _, _, width, height = parts["viewBox"]
    config = solution(14).config_from_json(json.loads((checkpoint / "config.json").read_text()))
    speeds = {path: statistics.median(SPEEDS[path][:1]) for path in SPEEDS}
    mb = {path: step_16.bytes_per_token(config, (FORMATS["q4_0"][1] if path.endswith("q4_0") else 32) / 8) / 1e6
          for path in SPEEDS}
    circles = parts["circle"]
    assert len(circles) == len(SPEEDS) and all(is_colour(c["fill"]) for c in circles), circles
    colour = {path: c["fill"] for path, c in zip(sorted(SPEEDS, key=lambda p: -speeds[p]), by_height(circles))}
    kinds = [colour[path] for path in ("hf", "no_cache", "cache", "decode", "kernel", "llama_f32")]
    assert len(set(kinds)) == len(kinds), colour  # Hugging Face, each of ours and llama.cpp apart; a format as its f32
    assert [colour[p] for p in ("cache_q4_0", "kernel_q4_0", "llama_q4_0")] == [colour[p] for p in ("cache", "kernel", "llama_f32")], colour
    at = {(float(c["cx"]), float(c["cy"])) for c in circles}
    labels = {t["text"].rsplit(": ", 1)[0]: t for t in parts["text"] if t["text"].endswith(" tok/s")}
    assert set(labels) == {bench.PATHS[path] for path in SPEEDS}, labels
    # the scales, from two points: px = a + b log(value)
    x_of = {path: float(c["cx"]) for path, c in zip(sorted(SPEEDS, key=lambda p: -speeds[p]), by_height(circles))}
    y_of = {path: float(c["cy"]) for path, c in zip(sorted(SPEEDS, key=lambda p: -speeds[p]), by_height(circles))}
    bx = (x_of["llama_q4_0"] - x_of["hf"]) / math.log(mb["llama_q4_0"] / mb["hf"])
    by = (y_of["llama_q4_0"] - y_of["hf"]) / math.log(speeds["llama_q4_0"] / speeds["hf"])
    assert bx > 0 > by, (bx, by)
    px = lambda value: x_of["hf"] + bx * math.log(value / mb["hf"])  # noqa: E731
    py = lambda value: y_of["hf"] + by * math.log(value / speeds["hf"])  # noqa: E731
    for path in SPEEDS:
        assert (px(mb[path]), py(speeds[path])) == pytest.approx((x_of[path], y_of[path]), abs=0.3), path
        label = labels[bench.PATHS[path]]
        assert label["text"] == f"{bench.PATHS[path]}: {speeds[path]:.0f} tok/s", label
        x0, x1 = float(label["x"]), float(label["x"]) + bench.CHAR_WIDTH * 10 * len(label["text"])  # font-size 10
        assert x0 == pytest.approx(x_of[path] + 8, abs=0.1) or x1 == pytest.approx(x_of[path] - 8, abs=0.1), (path, label)
        assert 0 <= x0 and x1 <= width, (path, label)
    assert {(round(float(c["cx"]), 1), round(float(c["cy"]), 1)) for c in circles} == {(round(x, 1), round(y, 1)) for x, y in at}
    (x_axis, y_axis, limit, *leaders) = [{k: float(v) for k, v in line.items() if k[0] in "xy"} for line in parts["line"]]
    left, right, bottom, top = x_axis["x1"], x_axis["x2"], x_axis["y1"], y_axis["y1"]
    # every label inside the axes (never over the ticks or the axis's title), and no two labels over each other
    boxes = {path: (float(labels[bench.PATHS[path]]["x"]),
                    float(labels[bench.PATHS[path]]["x"]) + bench.CHAR_WIDTH * 10 * len(labels[bench.PATHS[path]]["text"]),
                    float(labels[bench.PATHS[path]]["y"]) - 10, float(labels[bench.PATHS[path]]["y"]) + 3) for path in SPEEDS}
    outside = [path for path, (_, _, y0, y1) in boxes.items() if y0 < top or y1 > bottom]
    assert not outside, f"labels outside the axes ({top} to {bottom}): {[(p, boxes[p]) for p in outside]}"
    crossed = [(a, b) for a in boxes for b in boxes if a < b and boxes[a][0] < boxes[b][1] and boxes[b][0] < boxes[a][1]
               and boxes[a][2] < boxes[b][3] and boxes[b][2] < boxes[a][3]]
    assert not crossed, f"labels over each other: {crossed}"
    assert (x_axis["y2"], y_axis["x1"], y_axis["x2"], y_axis["y2"]) == (bottom, left, left, bottom), parts["line"]
    assert all(left < x < right and top < y < bottom for x, y in at), (at, left, right, top, bottom)
    # the memory limit: tok/s = GB/s x 1000 / MB, from where it enters the axes to their right end
    to_mb = lambda x: mb["hf"] * math.exp((x - x_of["hf"]) / bx)  # noqa: E731
    to_speed = lambda y: speeds["hf"] * math.exp((y - y_of["hf"]) / by)  # noqa: E731
    for x, y in ((limit["x1"], limit["y1"]), (limit["x2"], limit["y2"])):
        assert y == pytest.approx(py(BANDWIDTH * 1e3 / to_mb(x)), abs=0.5) and top - 0.2 <= y <= bottom, (limit, top, bottom)
    assert (limit["x1"], limit["x2"]) == pytest.approx((left, right), abs=0.1), limit  # the left edge to the right
    assert all(py(BANDWIDTH * 1e3 / mb[path]) < y_of[path] for path in SPEEDS), "a point above the memory limit"
    title = next(t for t in parts["text"] if t["text"].startswith("memory limit"))
    assert title["text"] == (f"memory limit: {BANDWIDTH:.1f} GB/s ÷ bytes a token (NumPy, {llama.threads()} threads "
                             "for every engine)"), title
    assert float(title["y"]) < top and float(title["x"]) == right and title["text-anchor"] == "end", title  # above, right
    joined = {}  # each label moved to clear another is joined to its point: from the point to the label's near end
    for path in SPEEDS:
        label, cx, cy = labels[bench.PATHS[path]], round(x_of[path], 1), round(y_of[path], 1)
        lx, ly = float(label["x"]), float(label["y"])
        near = lx if lx > cx else lx + bench.CHAR_WIDTH * 10 * len(label["text"])
        if abs(ly - (cy + 4)) > 0.2:
            joined[cx, cy] = (pytest.approx(near, abs=0.2), pytest.approx(ly - 4, abs=0.2))  # to its middle
    assert joined, "no label was moved: the check would see no leader line"
    assert {(leader["x1"], leader["y1"]): (leader["x2"], leader["y2"]) for leader in leaders} == joined, leaders
    ticks = [t for t in parts["text"] if t["text"].isdigit()]
    x_ticks = [t for t in ticks if t.get("text-anchor") == "middle"]
    y_ticks = [t for t in ticks if t.get("text-anchor") == "end"]
    decades = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000]
    assert [int(t["text"]) for t in x_ticks] == [v for v in decades if to_mb(left) <= v <= to_mb(right)], x_ticks
    assert all(float(t["x"]) == pytest.approx(px(int(t["text"])), abs=0.6) for t in x_ticks), x_ticks
    assert [int(t["text"]) for t in y_ticks] == [v for v in decades if to_speed(bottom) <= v <= to_speed(top)], y_ticks
    assert x_ticks and all(float(t["x"]) == pytest.approx(px(int(t["text"])), abs=0.6) for t in x_ticks), x_ticks
    assert y_ticks and all(float(t["y"]) - 4 == pytest.approx(py(int(t["text"])), abs=0.6) for t in y_ticks), y_ticks
    assert all(top - 1 <= float(t["y"]) - 4 <= bottom + 1 for t in y_ticks), y_ticks
    assert all(bottom < float(t["y"]) < height for t in x_ticks), x_ticks  # under the axis
    assert all(float(t["x"]) < left for t in y_ticks), y_ticks  # left of it
    titles = {t["text"]: t for t in parts["text"] if t["text"][0].isalpha() and not t["text"].endswith(" tok/s")
              and not t["text"].startswith("memory limit")}
    assert set(titles) == {"MB of weights read per token (log)", "decode tok/s (log)"}, titles
    x_title, y_title = titles["MB of weights read per token (log)"], titles["decode tok/s (log)"]
    assert float(x_title["x"]) == pytest.approx((left + right) / 2, abs=0.5) and float(x_title["y"]) > bottom + 16, x_title
    assert y_title["transform"] == f"rotate(-90 {y_title['x']} {y_title['y']})" and float(y_title["x"]) < left - 16, y_title
    assert float(y_title["y"]) == pytest.approx((top + bottom) / 2, abs=0.5), (y_title, top, bottom)
    assert all(0 <= float(t["x"]) <= width and 0 <= float(t["y"]) <= height for t in parts["text"]), parts["text"]


def test_a_point_above_the_memory_limit_stays_inside_the_roofline(tmp_path):
    """a path faster than the bandwidth allows (a slow NumPy measure, a cache that held the weights): the axes still
    hold its point, above the memory limit's line, which runs from the left edge to the right"""
    import transformers

    config = solution(14).config_from_json(transformers.GPT2Config().to_dict())
    svg = tmp_path / "roofline.svg"
    bench.roofline({"cache": {"decode_tok_s": 500.0}, "cache_q4_0": {"decode_tok_s": 100.0}}, svg, bench.PATHS, config,
                   2.0, 2)
    parts = svg_parts(svg)
    (x_axis, y_axis, limit) = [{k: float(v) for k, v in line.items() if k[0] in "xy"} for line in parts["line"][:3]]
    left, right, bottom, top = x_axis["x1"], x_axis["x2"], x_axis["y1"], y_axis["y1"]
    assert all(left < float(c["cx"]) < right and top < float(c["cy"]) < bottom for c in parts["circle"]), parts["circle"]
    assert (limit["x1"], limit["x2"]) == pytest.approx((left, right), abs=0.1) and top < limit["y1"] < bottom, limit
    fast = by_height(parts["circle"])[0]  # the 500 tok/s point
    assert float(fast["cy"]) < limit["y1"], (fast, limit)  # above the line, even at the line's highest


# --- bench's command line and what it says while it runs ---------------------------------------------------------

def test_help_names_the_command_and_each_option_with_its_default(capsys):
    """`bench --help`: the command, what it does (the docstring's first line and what it runs), and every option with
    its help, its choices and the default the docstring documents (64 new tokens after 12, 3 rounds, 12 layers)"""
    import re

    with pytest.raises(SystemExit) as done:
        bench.main(["--help"])
    shown = capsys.readouterr().out
    flat = " ".join(shown.split())
    assert done.value.code == 0 and flat.startswith("usage: pixi run bench [-h] [--device {cpu,gpu}]"), shown
    assert " ".join(bench.__doc__.splitlines()[0].split()) + " Runs solutions/; offline," in flat, flat
    options = [" ".join(block.split()) for block in re.split(r"\n  (?=-)", shown)]
    for option, default in (("--device {cpu,gpu}", "cpu"), ("--new-tokens NEW_TOKENS", "64"),
                            ("--prompt-tokens PROMPT_TOKENS", "12"), ("--rounds ROUNDS", "3"), ("--layers LAYERS", "12"),
                            ("--model MODEL", "None"), ("--quantize {q4_0,q4_k,q6_k} [{q4_0,q4_k,q6_k} ...]", "[]"),
                            ("--json", "False"), ("--eval-tokens EVAL_TOKENS", "1024"),
                            ("--worker-timeout WORKER_TIMEOUT", "1800")):
        block = next(b for b in options if b.startswith(option + " "))  # its help after it, to the next option
        said = block.removeprefix(option + " ")
        assert said.endswith(f"(default: {default})") and len(said) > len(f"(default: {default})") + 10, (option, said)
    assert "--paths {" + ",".join(bench.PATHS) + "} [{" in flat and "--worker " not in flat and "--gguf-dir" not in flat
    for option in ("--paths {", "--plot PLOT", "--roofline ROOFLINE"):  # no default to show: a help of their own
        block = next(b for b in options if b.startswith(option))
        said = block.split(" ...] ", 1)[1] if option == "--paths {" else block.removeprefix(option)
        assert len(said) > 20, (option, said)


@pytest.mark.parametrize("argv, wrong", [(["--device", "tpu"], "--device: invalid choice: 'tpu'"),
                                         (["--quantize", "q8_0"], "--quantize: invalid choice: 'q8_0'"),
                                         (["--paths", "cache", "fast"], "--paths: invalid choice: 'fast'"),
                                         (["--layers", "two"], "--layers: invalid int value: 'two'")])
def test_an_option_bench_cannot_take_is_refused_by_name(argv, wrong, capsys):
    with pytest.raises(SystemExit) as refused:
        bench.main(argv)
    assert refused.value.code == 2 and wrong in capsys.readouterr().err


def test_without_a_model_bench_times_gpt2_smalls_sizes_with_random_weights(canned, capsys, monkeypatch):
    """`bench --layers 1`: GPT-2 small's sizes with one layer of random weights, written once as the checkpoint every
    path reads (llama.cpp's too), and named in the table's title"""
    monkeypatch.setattr(llama, "version", lambda: "0.3.36")
    configs = []
    real = bench._run_worker

    def run(path, args, model, accuracy=False):
        configs.append(json.loads((bench.Path(model) / "config.json").read_text()))
        return real(path, args, model, accuracy)

    monkeypatch.setattr(bench, "_run_worker", run)
    assert bench.main(["--layers", "1", "--rounds", "1", "--paths", "cache", "llama_f32"]) == 0
    assert [(c["n_layer"], c["n_embd"], c["vocab_size"]) for c in configs] == [(1, 768, 50257)] * 3, configs
    assert [path for path, *_ in canned] == ["hf", "cache", "llama_f32"] and len(canned.written) == 1, canned
    assert "GPT-2 (1 layers, random weights, cpu), 12-token prompt, 64 new tokens" in " ".join(capsys.readouterr().out.split())
    assert {model for *_, model, _ in canned} != {None} and len({model for *_, model, _ in canned}) == 1, canned


def test_a_terminal_sees_what_bench_is_doing(canned, checkpoint_dir, monkeypatch):
    """on a terminal, a spinner line says what runs now: each path's round, in its own process, and that a first MAX
    run compiles for minutes; then a line as each run ends, with its speed and seconds"""
    import io
    import re

    from rich.console import Console

    monkeypatch.setattr(llama, "version", lambda: None)
    screen = io.StringIO()
    monkeypatch.setattr(bench, "err", Console(file=screen, force_terminal=True, width=300, highlight=False))
    assert bench.main(["--model", str(checkpoint_dir), "--rounds", "2", "--paths", "cache"]) == 0
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())
    for round_ in (1, 2):
        for path in ("hf", "cache"):
            assert (f"round {round_}/2: {bench.PATHS[path]} (its own process; a first MAX run compiles for minutes) …"
                    in text), text
            ended = re.search(rf"round {round_}/2: {re.escape(bench.PATHS[path])}: ([\d.]+) tok/s \((\d+) s\)", text)
            assert ended and float(ended[1]) == SPEEDS[path][round_ - 1] and int(ended[2]) < 60, text
    monkeypatch.setattr(llama, "version", lambda: "0.3.36")
    assert bench.main(["--layers", "1", "--rounds", "1", "--paths", "cache"]) == 0  # random weights, and llama.cpp's file
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())
    assert "Writing GPT-2 small's sizes (1 layers) with random weights as a checkpoint …" in text, text
    assert "Writing the checkpoint as GGUF for llama.cpp (f32, then its own quantizer) …" in text, text


def test_a_label_that_would_half_cover_another_point_moves_down(tmp_path):
    """the roofline's labels clear every point, even one a label would cover only in part: q4_0's label (to the right
    of its point) ending in the left half of float32's point, and float32's (to the left of its own) beginning in
    the right half of q4_0's (labels of made-up lengths, both paths at one speed, each placed first in turn)"""
    import transformers

    config = solution(14).config_from_json(transformers.GPT2Config().to_dict())
    svg = tmp_path / "roofline.svg"
    char = bench.CHAR_WIDTH * 10
    tail = len(": 60 tok/s")
    for first, second in (("cache_q4_0", "cache"), ("cache", "cache_q4_0")):
        results = {first: {"decode_tok_s": 60.0}, second: {"decode_tok_s": 60.0}}
        bench.roofline(results, svg, bench.PATHS, config, 100.0, 2)
        q4, f32 = sorted(float(c["cx"]) for c in svg_parts(svg)["circle"])
        assert q4 < svg_parts(svg)["viewBox"][2] / 2 < f32, (q4, f32)  # q4_0's label to its right, float32's to its left
        length = round((f32 - 8 - q4 - 2) / char)  # from 8 px beside one point to 2 px short of the other's centre
        bench.roofline(results, svg, dict(bench.PATHS, **{first: "x" * (length - tail)}), config, 100.0, 2)
        parts = svg_parts(svg)
        label = next(t for t in parts["text"] if t["text"].startswith("x"))
        box = (float(label["x"]), float(label["x"]) + char * len(label["text"]), float(label["y"]) - 10, float(label["y"]) + 3)
        end = box[1] if first == "cache_q4_0" else box[0]
        assert end == pytest.approx(f32 - 2 if first == "cache_q4_0" else q4 + 2, abs=char), (box, q4, f32)
        points = [(float(c["cx"]), float(c["cy"])) for c in parts["circle"]]
        covered = [p for p in points if box[0] - 4 < p[0] < box[1] + 4 and box[2] - 4 < p[1] < box[3] + 4]
        assert not covered, f"{first}'s label {box} covers the point at {covered}"
