"""``bench``'s report from canned runs: ``course/programs/bench.py``'s ``main`` in the tests' process.

bench times each path in a process of its own (``tests/test_programs.py`` runs it so, end to end). Here
``_run_worker`` hands back made-up runs instead, so that the arithmetic of the report can be checked
exactly: the medians over rounds, the × Hugging Face and × llama.cpp columns, the perplexities, which
paths run in which order, and the lines around the table.
"""

from __future__ import annotations

import json
import statistics

import pytest

from course.programs import bench, llama

pytestmark = pytest.mark.programs

#: decode tok/s of each path in each of 3 rounds: the medians are the last values, and no mean is a median.
SPEEDS = {"hf": (20.0, 30.0, 22.0), "no_cache": (10.0, 15.0, 11.0), "cache": (30.0, 45.0, 33.0),
          "decode": (40.0, 60.0, 42.0), "kernel": (50.0, 70.0, 53.0), "cache_q4_0": (90.0, 120.0, 93.0),
          "kernel_q4_0": (120.0, 150.0, 123.0), "llama_f32": (60.0, 80.0, 63.0), "llama_q4_0": (150.0, 190.0, 153.0)}
PREFILL_MS = (10.0, 19.0, 11.0)  # each path's, round by round: the median 11
ACCURACY = {"top1": 0.875, "max_abs_err": 0.0625, "perplexity": 41.5, "perplexity_fp32": 40.25, "steps": 8,
            "logit_std": 1.5}


@pytest.fixture
def canned(monkeypatch, checkpoint_dir):
    """bench's workers replaced by canned runs: each call is recorded, round by round. (The table is printed as
    wide as a terminal of 200 columns: rich reads COLUMNS.)"""
    monkeypatch.setenv("COLUMNS", "200")
    calls = []

    def run(path, args, model, accuracy=False):
        round_ = sum(call[0] == path for call in calls)
        calls.append((path, accuracy, model, args.gguf_dir))
        speed = SPEEDS[path][round_]
        out = {"prefill_ms": PREFILL_MS[round_], "decode_tok_s": speed, "step_ms": [1000 / speed] * 7,
               "tokens": [round_, 1, 2, 3, 4, 5, 6, 7], "compile_s": 1.0,
               "kv_cache": "float16" if path.startswith("kernel_") or path == "llama_q4_0" else "float32"}
        if accuracy and path != "hf":
            out["accuracy"] = ACCURACY
        if accuracy and path == "hf":
            out["perplexity"] = 40.0
        return out

    monkeypatch.setattr(bench, "_run_worker", run)
    monkeypatch.setattr(llama, "files", lambda folder, scratch, formats: {})
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
        assert (row["decode_tok_s"], row["prefill_ms"], row["vs_hf"]) == (speed, 11.0, round(speed / hf, 3)), (path, row)
        assert row["tokens"] == [0, 1, 2, 3, 4, 5, 6, 7], (path, row["tokens"])  # the first round's
        peer = bench.PEERS.get(path)
        assert row.get("vs_llama_cpp") == (round(speed / statistics.median(SPEEDS[peer]), 3) if peer else None), row
    assert {path: out[path].get("perplexity") for path in ("hf", "cache", "cache_q4_0", "kernel_q4_0")} == {
        "hf": 40.0, "cache": 40.25, "cache_q4_0": 41.5, "kernel_q4_0": 41.5}
    assert (out["cache_q4_0"]["top1_vs_fp32"], out["cache_q4_0"]["max_logit_err"]) == (0.875, 0.0625)
    assert [path for path, *_ in canned] == list(SPEEDS) * 3, "the paths do not alternate round after round"
    scored = {path for path, accuracy, *_ in canned if accuracy}
    assert scored == {"hf", "cache_q4_0", "kernel_q4_0"} and all(not a for p, a, *_ in canned[len(SPEEDS):]), scored
    assert {gguf for *_, gguf in canned} != {None}, "llama.cpp's workers were not told where the GGUF files are"


def test_the_table_shows_every_setting_and_the_command(canned, checkpoint_dir, capsys, monkeypatch):
    monkeypatch.setattr(llama, "version", lambda: "0.3.36")
    argv = ["--model", str(checkpoint_dir), "--quantize", "q4_0", "--rounds", "3", "--new-tokens", "8"]
    assert bench.main(argv) == 0
    printed = capsys.readouterr()
    table, notes = printed.out, " ".join(printed.err.split())
    assert "12-token prompt, 8 new tokens, greedy; medians of 3 rounds" in " ".join(table.split()), table
    for column in ("KV cache", "prefill ms", "decode tok/s", "× Hugging Face", "× llama.cpp", "perplexity",
                   "top-1 vs fp32", "max |Δ logit|"):
        assert column in table, (column, table)
    lines = {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[2:-1]]
             for line in table.splitlines() if line.count("│") > 3}
    assert lines[bench.PATHS["cache_q4_0"]] == ["float32", "11.0", "93.0", "4.23", "0.61", "41.50", "7/8", "0.062"], lines
    assert lines[bench.PATHS["cache"]][:6] == ["float32", "11.0", "33.0", "1.50", "0.52", "40.25"], lines
    assert lines[bench.PATHS["hf"]] == ["float32", "11.0", "22.0", "1.00", "", "40.00", "", ""], lines
    assert f"Threads: {llama.threads()} for every engine" in notes and "llama-cpp-python 0.3.36" in notes, notes
    assert "Command: python -m course.programs.bench " + " ".join(argv) in notes, notes
    assert "Every row scores the same 8 next tokens of held-out text" in notes and "deviation of 1.50" in notes, notes


def test_without_llama_cpp_one_line_says_how_to_add_it_and_no_peer_column(canned, checkpoint_dir, capsys, monkeypatch):
    monkeypatch.setattr(llama, "version", lambda: None)
    assert bench.main(["--model", str(checkpoint_dir), "--rounds", "1"]) == 0
    printed = capsys.readouterr()
    assert "× llama.cpp" not in printed.out and "perplexity" not in printed.out, printed.out
    assert f"llama.cpp is not installed, so bench times no peer: {llama.INSTALL}." in " ".join(printed.err.split())
    assert [path for path, *_ in canned] == ["hf", "no_cache", "cache", "decode", "kernel"], canned


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
])
def test_settings_that_cannot_be_timed_are_refused(argv, said):
    with pytest.raises(SystemExit) as refused:
        bench.main(argv)
    assert str(refused.value) == said, str(refused.value)


def test_a_llama_checkpoint_runs_part_iis_paths_and_refuses_part_is_flags(canned, tmp_path, capsys):
    folder = fake_checkpoint(tmp_path / "llama", "llama")
    for flag in (["--quantize", "q4_0"], ["--roofline", str(tmp_path / "r.svg")]):
        with pytest.raises(SystemExit) as refused:
            bench.main(["--model", str(folder), *flag])
        assert str(refused.value) == (f"bench: {flag[0]} runs Part I's GPT-2 (chapters 15 and 16); {folder} is a "
                                      "Llama, which Part II runs in float32: leave it out"), str(refused.value)
    assert bench.main(["--model", str(folder), "--rounds", "1", "--json"]) == 0
    assert list(json.loads(capsys.readouterr().out)) == list(bench.LLAMA_PATHS)
