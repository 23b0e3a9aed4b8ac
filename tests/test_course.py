"""Checks of the course itself: steps/ is rendered, every stub fails well, and the
checks catch planted bugs. They run on a scratch copy, never on your steps/."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from transformers.models.gpt2.modeling_gpt2 import GPT2MLP

from course.authoring import experiments, render
from course.outline import ROOT, SOLUTIONS, available, step_path
from harness import assert_close, build, forward, load_weights, solution
from reference import SMALL, hf_config, hidden_states, run, seeded, to_max_state

pytestmark = pytest.mark.course

#: Bugs planted in a copy of a solution: (step, the code as written, the buggy code, what
#: the *first* ✗ must then report). To plant several edits, give tuples of equal length.
PLANTED = {
    "exact GELU instead of tanh": (4, 'approximate="tanh"', 'approximate="none"', r"max \|Δ\| = "),
    "wrong LayerNorm epsilon": (3, "eps: float = 1e-5", "eps: float = 1e-6", r"max \|Δ\| = "),
    "causal mask off by one, too open": (
        2, "num_upper=past_len,", "num_upper=past_len + 1,", r"too open by 1: .* sees the next 1 key"
    ),
    # What a newcomer hit: -1 reads as "no limit" at past_len 0, so nothing is masked there.
    "causal mask off by one, too closed": (
        2, "num_upper=past_len,", "num_upper=past_len - 1,", r"off by one, too closed: .* its own position"
    ),
    "causal mask shifted by 2": (2, "num_upper=past_len,", "num_upper=past_len + 2,", r"too open by 2"),
    "causal mask inverted": (2, "past_len, exclude=True)", "past_len, exclude=False)", r"the mask is inverted"),
    "causal mask ignores past_len": (2, "num_upper=past_len,", "num_upper=0,", r"ignores past_len"),
    "boolean causal mask": (
        2, "past_len, exclude=True)", "past_len, exclude=True) == 0", r"is a bool tensor; the mask is \*added\*.* TODO 1, 2 in "
    ),
    "1/0 causal mask": (
        2,
        ('float("-inf"))', "past_len, exclude=True)"),
        ("1.0)", "past_len, exclude=False)"),
        r"holds the values 0, 1 — that is a 1/0 \(boolean-style\) mask; an additive mask holds only 0",
    ),
    "layer norm size as a Dim": (
        3,
        "var = F.mean((x - mean) * (x - mean), axis=-1)",
        "n = x.shape[-1]\n        var = F.sum((x - mean) * (x - mean), axis=-1) / n",
        r"Unsafe cast from si64 to f\d+.*int\(x\.shape\[-1\]\).* \(TODO 2\)",
    ),
    "layer norm over the wrong axis": (
        3,
        ("mean = F.mean(x, axis=-1)", "(x - mean), axis=-1)"),
        ("mean = F.mean(x, axis=1)", "(x - mean), axis=1)"),
        r"statistics were not taken over the last axis: .* over axis 1 instead.* TODO 2",
    ),
    # Steps 05-11.
    "positions starting at 1": (
        6,
        "F.arange(past_len, past_len + seq_len,",
        "F.arange(past_len + 1, past_len + seq_len + 1,",
        r"embeddings of 7 tokens vs Hugging Face hidden_states\[0\] \(small\): max \|Δ\| = ",
    ),
    "q, k, v split in the wrong order": (
        7, "q, k, v = F.split(", "k, q, v = F.split(", r"attention output for 2 tokens .* \(small\): max \|Δ\| = "
    ),
    "no 1/sqrt(d) scaling": (7, " / math.sqrt(self.head_dim)", "", r"attend\(q, k, v, past_len=0\) .*: max \|Δ\| = "),
    "softmax over the query axis": (
        7, "F.softmax(scores, axis=-1)", "F.softmax(scores, axis=-2)", r"attend\(q, k, v, past_len=0\) .*: max \|Δ\| = "
    ),
    "heads merged without moving the head axis back": (
        7, "y.transpose(1, 2).reshape(", "y.reshape(", r"merge_heads\(split_heads\(x\)\) vs x: max \|Δ\| = "
    ),
    "residual adds the normalized input": (
        8,
        "return x + sublayer(norm(x))",
        "return norm(x) + sublayer(norm(x))",
        r"residual\(x, ln_1, attn\) vs GPT2Block's x \+ attn\(ln_1\(x\)\) \(small\): max \|Δ\| = ",
    ),
    "untied LM head": (
        11,
        (
            "from max.experimental.nn import Module",
            "self.transformer = GPT2Model(config)\n",
            "return hidden @ self.transformer.wte.weight.T",
        ),
        (
            "from max.experimental.nn import Linear, Module",
            "self.transformer = GPT2Model(config)\n"
            "        self.lm_head = Linear(config.n_embd, config.vocab_size, bias=False)\n",
            "return self.lm_head(hidden)",
        ),
        r"has its own parameter lm_head\.weight: .*weight tying\) — TODO 1, 2, 3 in ",
    ),
    "LM head without the transpose": (
        11,
        "self.transformer.wte.weight.T",
        "self.transformer.wte.weight",
        r"logits vs Hugging Face GPT2LMHeadModel \(small, square wte\): max \|Δ\| = ",
    ),
    "block ignores the config's epsilon": (
        9,
        "self.ln_2 = LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)",
        "self.ln_2 = LayerNorm(config.n_embd)",
        r"Block output vs Hugging Face GPT2Block \(n_inner=48, eps=0\.1\): max \|Δ\| = ",
    ),
    "model skips ln_f": (10, "return self.ln_f(x)", "return x", r"comes after the last block \(ln_f\)"),
    "model skips its first block": (
        10, "for block in self.h:", "for block in self.h[1:]:", r"the blocks ran in the order \[1\]; GPT-2 runs h\[0\]"
    ),
    # Step 12.
    "BPE merges the highest-ranked pair first": (
        12,
        "rank, i = heapq.heappop(heap)",
        "rank, i = heap.pop(heap.index(max(heap)))",
        r"encode\(ascii text .*\) differs from Hugging Face's at token 0 of \d+: got \d+ .*, expected 15496 'Hello' — TODO 2, 3 in ",
    ),
    # The course's merge loop before issue 16: right ids, but it rescans the whole word for
    # each merge (100,000 letters without a space: 54-81 s). Planted in front of the heap loop,
    # which it leaves unreachable.
    "BPE merge loop rescans the whole piece": (
        12,
        "        heap = [(rank, i) for i in range(n - 1) if (rank := rank_at(i)) is not None]\n",
        "        while len(symbols) > 1:\n"
        "            pairs = [pair for pair in zip(symbols, symbols[1:]) if pair in self.ranks]\n"
        "            if not pairs:\n"
        "                break\n"
        "            best = min(pairs, key=self.ranks.__getitem__)\n"
        "            merged, i = [], 0\n"
        "            while i < len(symbols):\n"
        "                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:\n"
        "                    merged.append(symbols[i] + symbols[i + 1])\n"
        "                    i += 2\n"
        "                else:\n"
        "                    merged.append(symbols[i])\n"
        "                    i += 1\n"
        "            symbols = merged\n"
        "        return symbols\n"
        "        heap = [(rank, i) for i in range(n - 1) if (rank := rank_at(i)) is not None]\n",
        r"bpe on one word of 4,000 letters looked up [\d,]+ merge ranks, \d+× as many as on 500 letters .*: the merge "
        r"loop rescans the whole word for each merge, so its cost grows with the length squared .* — TODO 2 in ",
    ),
    "BPE merges a popped pair that has changed since": (
        12,
        "            if rank_at(i) != rank:\n",
        "            if not symbols[i] or after[i] >= n:\n",
        r"bpe\('CafÃ©'\) made the token 'Caf', which is not in vocab\.json: the merge loop joined two symbols whose "
        r"pair is no merge .* — TODO 2 in ",
    ),
    "<|endoftext|> not treated as special": (
        12,
        "enumerate(text.split(END_OF_TEXT))",
        "enumerate([text])",
        r"encode\(endoftext text .*\) differs .* at token \d+ of \d+: .*; <\|endoftext\|> \(id \d+\) is there 0 times, "
        r"expected 4 — TODO 5 in ",
    ),
    "decode with errors=strict": (
        12,
        'data.decode("utf-8", errors="replace")',
        'data.decode("utf-8", errors="strict")',
        r"\(a lone 0xff byte\) raised UnicodeDecodeError; .*errors=\"replace\" .* — TODO 6 in ",
    ),
    "no word cache": (
        12,
        "piece_ids = self.cache.get(piece)",
        "piece_ids = None",
        r"500 times looked up [\d,]+ merge ranks, 500× as many as encoding it once .* — TODO 4 in ",
    ),
    "word cache never emptied": (
        12,
        "                if len(self.cache) >= CACHE_SIZE:\n                    self.cache.clear()",
        "                if False:\n                    pass",
        r"after 25,000 different pieces, self\.cache holds 25,000, more than CACHE_SIZE = 10,000: .* — TODO 4 in ",
    ),
    "decode takes True as an id": (
        12,
        "if isinstance(i, bool) or not isinstance(i, numbers.Integral):",
        "if not isinstance(i, numbers.Integral):",
        r"decode\(\[.*, True\]\) was accepted, but True is a bool, not a token id .* — keep the given check at the top of decode",
    ),
    # Step 13.
    "temperature multiplies instead of dividing": (
        13, "/ temperature\n", "* temperature\n", r"filter_logits \(T=0\.7\) vs Hugging Face's warpers: max \|Δ\| = "
    ),
    "top-k keeps one token too many": (
        13, "np.sort(logits)[-top_k]", "np.sort(logits)[-top_k - 1]",
        r"filter_logits \(top-k 5\) keeps 6 tokens, Hugging Face keeps 5 tokens: 1 should be cut \(-inf\) and 0 should stay",
    ),
    "top-p drops the token that crosses p": (
        13, "np.cumsum(p) - p >= top_p", "np.cumsum(p) >= top_p",
        r"filter_logits \(top-p 0\.8\) keeps \d+ tokens?, Hugging Face keeps \d+ tokens?: 0 should be cut \(-inf\) and 1 should stay",
    ),
    "top-p leaves exact ties in no fixed order": (
        13, 'order = np.argsort(-logits, kind="stable")', "order = np.argsort(-logits)",
        r"filter_logits \(top-p [\d.]+, the cut inside a group of equal logits\) keeps ids .* at an exact tie the course "
        r"keeps the lower ids .* — TODO 1, 2, 3 in ",
    ),
    "filter_logits takes a batch": (
        13, "    if np.ndim(logits) != 1:  # given: one row, not a batch\n", "    if False:\n",
        r"filter_logits\(a \[2, \d+\] batch, temperature=1\.0, top_p=0\.8\) raised IndexError: .* expected a clear "
        r"ValueError saying that it takes one \[vocab_size\] row",
    ),
    "a temperature of 5e-324 let through": (
        13, "    if 0 < temperature < smallest:", "    if False:",
        r"next_token\(…, temperature=5e-324\) raised ValueError\(.*\), which does not name the temperature",
    ),
    "sampling ignores the filters": (
        13,
        "filtered = filter_logits(logits, temperature, top_k, top_p)",
        "filtered = np.asarray(logits, dtype=np.float64) / temperature",
        r"next_token\(\{'temperature': 1\.0, 'top_k': 1\}\) picked token \d+ on row \d+, but the largest logit is token \d+ — TODO 4 in ",
    ),
    "sampling ignores the temperature": (
        13,
        "probs = np.exp(filtered - filtered.max())",
        "probs = np.exp(filtered * temperature - (filtered * temperature).max())",
        r"next_token \(T=0\.7\): the frequencies of 20000 draws do not follow .*chi-square",
    ),
    "generation runs past <|endoftext|>": (
        13, "        if token == eos_id:\n            return\n", "", r"it should yield the end-of-text token and stop — TODO 5 in "
    ),
    # Step 15.
    "cached mask blocks the past": (
        15, "F.zeros([seq_len, past_len])", "F.full([seq_len, past_len], float(\"-inf\"))", r"CachedSelfAttention\.mask\(1, 7\) vs causal_mask\(1, 7\): value at"
    ),
    # (Positions that restart at 0 fail "teacher-forced, the logits with the cache …" with
    # max |Δ| ≈ 1 — verified by hand; not planted here, because the changed graph would
    # compile afresh in CI, minutes for one entry.)
    "new keys put before the past": (
        15, "k = F.concat([past_k, k], axis=2)", "k = F.concat([k, past_k], axis=2)",
        r"cached attention \(4 cached, then 3 new\) vs GPT2Attention over all 7: max \|Δ\| = "
    ),
    # Step 14.
    "config.json ignored": (
        14,
        "return GPT2Config(**{key: value for key, value in values.items() if key in names})",
        "return GPT2Config()",
        r"config_from_json\(a small config\.json\)\.vocab_size is 50257, the file says \d+ — TODO 1 in ",
    ),
    "attn.bias buffers kept": (
        14,
        'key.endswith((".attn.bias", ".attn.masked_bias")) or ',
        "",
        r"is_weight\('h\.0\.attn\.bias'\) is True, but it is the attention's causal-mask buffer.* — TODO 2 in ",
    ),
    "c_attn.bias dropped as a buffer": (
        14,
        '(".attn.bias", ".attn.masked_bias")',
        '("attn.bias", "attn.masked_bias")',
        r"is_weight\('transformer\.h\.0\.attn\.c_attn\.bias'\) is False, but it is c_attn's bias.* — TODO 2 in ",
    ),
    "prefix added twice": (
        14,
        "return key if key.startswith(PREFIX) else PREFIX + key",
        "return PREFIX + key",
        r"max_name\('transformer\.h\.0\.attn\.c_attn\.bias'\) is 'transformer\.transformer\..*; the prefix is "
        r"there twice — TODO 3 in ",
    ),
    "no prefix for the original gpt2 layout": (
        14,
        "return key if key.startswith(PREFIX) else PREFIX + key",
        "return key",
        r"max_name\('h\.0\.attn\.c_attn\.bias'\) is 'h\.0\.attn\.c_attn\.bias', expected "
        r"'transformer\.h\.0\.attn\.c_attn\.bias' \(GPT2LMHeadModel's name\) — TODO 3 in ",
    ),
    "Conv1D weights not transposed": (
        14,
        "return value.T",
        "return value",
        r"to_max_layout\('transformer\.h\.0\.attn\.c_attn\.weight', a \[4, 12\] weight\) returned it as stored; "
        r"it is a Conv1D weight.* — TODO 4 in ",
    ),
    "every 2-D weight transposed": (
        14,
        'if name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):',
        "if value.ndim == 2:",
        r"to_max_layout\('transformer\.wte\.weight', a \[10, 4\] weight\) transposed it; only c_attn, c_proj and "
        r"c_fc weights are stored \[in, out\].* — TODO 4 in ",
    ),
}


def _python(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=900, check=False, env=env
    )


def test_steps_are_rendered_from_solutions():
    """the stubs' manifest (steps/.stubs.json) records what solutions/ renders; a learner's edits are reported, not failed"""
    stale, edited = render.compare_with_manifest()
    assert not stale, "; ".join(stale) + ". Instructors: run `python -m course.authoring.render`."
    if edited and os.environ.get("COURSE_STRICT_STUBS"):  # the course's own CI: steps/ must be the stubs
        pytest.fail("; ".join(edited) + " (COURSE_STRICT_STUBS is set: steps/ must hold the rendered stubs)")
    if edited:
        warnings.warn(f"your work in steps/ is not checked here ({'; '.join(edited)}): "
                      "check it with `pixi run sNN`", stacklevel=1)


def test_a_learners_edits_are_edits_and_a_stale_stub_is_a_failure(tmp_path):
    """an edited step file is reported as an edit; a solution changed without re-rendering is reported as stale"""
    render.render_all(tmp_path)
    assert render.compare_with_manifest(tmp_path) == ([], [])
    (tmp_path / "step_04_mlp.py").write_text("# my finished MLP\n")
    assert render.compare_with_manifest(tmp_path) == ([], [f"{tmp_path.name}/step_04_mlp.py has edits"])
    manifest = tmp_path / render.MANIFEST
    manifest.write_text(manifest.read_text().replace(render._digest(render.render_text(
        (SOLUTIONS / "step_02_causal_mask.py").read_text(), "step_02_causal_mask.py")), "0" * 64))
    stale, _ = render.compare_with_manifest(tmp_path)
    assert stale == [f"solutions/step_02_causal_mask.py renders a stub that {tmp_path.name}/.stubs.json does not record"]


def test_render_keeps_a_learners_edits(tmp_path):
    """render never overwrites an edited stub unless forced, and restores a deleted one"""
    render.render_all(tmp_path)
    edited = tmp_path / "step_04_mlp.py"
    edited.write_text(edited.read_text() + "# my work\n")
    (tmp_path / "step_01_config.py").unlink()
    written, kept = render.render_all(tmp_path)
    assert kept == ["step_04_mlp.py"] and written == ["step_01_config.py"]
    assert edited.read_text().endswith("# my work\n")
    render.render_all(tmp_path, force=True)
    assert not edited.read_text().endswith("# my work\n")


@pytest.fixture(scope="module")
def stubs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("stubs")
    written, kept = render.render_all(out)
    assert written and not kept
    return out


@pytest.mark.parametrize("number", available())
def test_stub_fails_with_a_hint(stubs, number):
    """each stub fails its own check, names a TODO, and prints no traceback"""
    result = _python("-m", "course.check", str(number), "--steps-dir", str(stubs))
    output = result.stdout + result.stderr
    assert result.returncode == 1, f"exit code {result.returncode}, expected 1 (checks failed):\n{output}"
    assert "✗" in output and re.search(r"TODO \d+(, \d+)* in ", output), f"no ✗ line naming a TODO:\n{output}"
    assert "Traceback" not in output, f"a traceback reached the learner:\n{output}"
    assert "could not load" not in output and "internal error" not in output, output
    drift = experiments.compare_stub_output(number, output, stubs)
    assert not drift, "\n".join(drift)


def test_copied_solutions_pass_as_steps(tmp_path):
    """the control for the planted bugs: unchanged solutions pass when checked as steps/"""
    for path in SOLUTIONS.glob("step_*.py"):
        (tmp_path / path.name).write_text(path.read_text())
    result = _python("-m", "course.check", "all", "--steps-dir", str(tmp_path))
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "✗" not in output, output
    drift = experiments.compare_solution_output(output, tmp_path)
    assert not drift, "\n".join(drift)


@pytest.mark.parametrize("bug", list(PLANTED))
def test_planted_bug_is_caught(tmp_path, bug):
    """a known bug planted in a copy of a solution fails that step's check, for that reason"""
    number, good, bad, report = PLANTED[bug]
    original = step_path(number)
    source = original.read_text()
    edits = zip(good, bad) if isinstance(good, tuple) else [(good, bad)]
    for old, new in edits:
        assert source.count(old) == 1, f"the planted bug needs exactly one `{old}` in {original.name}"
        source = source.replace(old, new)
    (tmp_path / original.name).write_text(source)
    # -x: only the first ✗ is compared, and a planted bug in a compiled graph (step 15)
    # would otherwise compile that changed graph afresh for the later checks (minutes).
    result = _python("-m", "course.check", str(number), "--steps-dir", str(tmp_path), "-x")
    output = result.stdout + result.stderr
    assert result.returncode == 1, f"the check passed with the bug planted:\n{output}"
    lines = output.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith("✗")), None)
    assert first is not None and first + 1 < len(lines), f"no ✗ line:\n{output}"
    assert re.search(report, lines[first + 1]), f"the first ✗ does not say /{report}/:\n{output}"
    assert "Traceback" not in output, output


def test_missing_transpose_is_caught():
    """weights loaded without the Conv1D transpose fail the MLP check, even when square"""
    hf = hf_config(**SMALL, n_inner=SMALL["n_embd"])
    reference = seeded(GPT2MLP(hf.n_inner, hf), seed=4)
    untransposed = {
        name: np.ascontiguousarray(value.T) if value.ndim == 2 else value
        for name, value in to_max_state(reference).items()
    }
    mlp = build(solution(4).MLP, solution(1).GPT2Config.from_hf(hf))
    load_weights(mlp, untransposed)
    x = hidden_states(2, 5, hf.n_embd)
    with pytest.raises(pytest.fail.Exception, match=r"max \|Δ\|"):
        assert_close(forward(mlp, x), run(reference, x), "MLP with untransposed weights")


BREAK_REFERENCE = '''
def pytest_runtest_setup(item):
    import reference

    def broken(*args, **kwargs):
        raise TypeError("create_causal_mask() got an unexpected keyword argument 'allow_is_causal_skip'")

    reference.create_causal_mask = broken
'''


def test_a_broken_reference_is_the_courses_fault(tmp_path):
    """an exception inside the Hugging Face reference is reported as the course's, never as a ✗ on a TODO"""
    (tmp_path / "break_reference.py").write_text(BREAK_REFERENCE)
    result = _python(
        "-m", "course.check", "2", "--target", "solutions", "-p", "break_reference",
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, f"exit code {result.returncode}:\n{output}"
    broken = [line for line in output.splitlines() if line.startswith("!")]
    assert broken, f"no check was marked as the course's failure:\n{output}"
    assert "✗" not in output, f"the reference's failure was blamed on the learner:\n{output}"
    assert re.search(
        r"the course's Hugging Face reference failed \(transformers [\d.]+.*\): TypeError: create_causal_mask"
        r".* — not your code", output
    ), output
    assert "could not run because the course itself failed" in output and "Traceback" not in output, output
