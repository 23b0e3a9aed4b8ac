"""Step 16 · decoding at the memory limit, against Hugging Face's GPT-2.

* The bytes a decode step reads (TODO 1) equal Hugging Face's parameter count, less
  ``wpe`` (one row of it is read), times the bytes per weight: exact integers.
* ``one_row`` (TODO 2) equals ``x @ Wᵀ`` on a square and a non-square matrix (a
  square one shows a product with ``W`` where ``Wᵀ`` belongs).
* ``DecodeLinear`` (TODO 3) equals Hugging Face's ``Conv1D`` (``GPT2MLP.c_fc``) on one
  row and on many (step 04's shapes, whose kernels are already compiled); the head (TODO 4) equals ``hidden @ wteᵀ``. All eager.
* ``attend_in_place`` (TODO 5) equals PyTorch's ``scaled_dot_product_attention`` of the
  new query over the cached keys and values and the new ones, for 1 and 9 cached tokens.
* Then the compiled model: a prefill of 5 tokens on the prefill graph, then one token per
  call on the decode graph. The logits at every position match ``GPT2LMHeadModel``
  over the whole sequence; greedy tokens equal Hugging Face's ``generate``. Building
  compiles one graph (the prefill's), the first decode step one more, and nothing is
  compiled after that. The cache, allocated once, then holds Hugging Face's keys and
  values (``past_key_values``) of every token, written in place. With ``prefill_from``,
  a shorter prompt goes through the decode graph alone, from an empty cache, with the
  same logits; building compiles nothing, and a long prompt compiles the prefill graph once.
* Given code, where ``mojo`` compiles: the Mojo product kernel equals ``x @ Wᵀ``; the Mojo
  attention equals NumPy's over a float32 and a float16 cache; the model with both
  (``KernelGPT2LMHeadModel``) gives ``GPT2LMHeadModel``'s logits through both graphs; with
  float32 weights its decode graph writes each new key and value into the cache itself and
  returns the logits alone, and the cache holds Hugging Face's keys and values.

Tolerance: the harness default, 1e-4 + 1e-4·|expected|. Measured worst |Δ| on
solutions/: see the ✓ lines (the teacher-forced logits about 1e-5, as step 15's).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
import transformers
from transformers.models.gpt2.modeling_gpt2 import GPT2MLP

from course.check.hints import shown
from harness import (
    Mistake, assert_close, attribute, build, call, counting_compiles, fail, forward, greedy_agreement, load_weights, solution,
    todo_in, weight_reads,
)
from reference import GEN, GPT2_SMALL, SMALL, generation_model, hf_config, hf_greedy, hidden_states, seeded, to_max_state

pytestmark = pytest.mark.step16

EOS = GEN["vocab_size"] - 1
_compiled: dict[str, object] = {}


# --- TODO 1: the roofline's numerator --------------------------------------------------------


def _count_mistakes(config, bytes_per_weight: float) -> list[Mistake]:
    c, inner, layers, vocab = config.n_embd, config.inner_dim, config.n_layer, config.vocab_size
    right = layers * (4 * c + 4 * c * c + 4 * c + 2 * c * inner + inner + c) + 2 * c + vocab * c
    biases = layers * (3 * c + c + inner + c)
    norms = layers * 4 * c + 2 * c

    def wrong(count):
        return lambda: np.float64(count * bytes_per_weight)

    return [
        Mistake("wpe is counted; a decode step reads one row of it, not all n_positions rows", 1,
                wrong(right + config.n_positions * c)),
        Mistake("wte is counted twice (as the embedding and as the head); the lookup reads one row, the head all of it", 1,
                wrong(right + vocab * c)),
        Mistake("the head is left out: it reads all of wte, vocab_size × n_embd weights", 1, wrong(right - vocab * c)),
        Mistake("the MLP's width is taken as 4 * n_embd; it is config.inner_dim", 1,
                wrong(right + layers * 2 * c * (4 * c - inner) + layers * (4 * c - inner))),
        Mistake("the biases are left out: each Linear reads its bias too", 1, wrong(right - biases)),
        Mistake("the layer norms are left out: ln_1, ln_2 and ln_f read a weight and a bias each", 1, wrong(right - norms)),
        Mistake("the count is not multiplied by bytes_per_weight", 1, lambda: np.float64(right)),
    ]


@pytest.mark.parametrize("name", ["small-n_inner-3C", "gpt2-small"])
def test_bytes_per_token_counts_every_weight_read(step, name):
    """bytes_per_token equals Hugging Face's parameter count less wpe, times the bytes per weight"""
    sizes = dict(SMALL, n_inner=3 * SMALL["n_embd"]) if name.startswith("small") else GPT2_SMALL
    hf = hf_config(**sizes)
    with torch.device("meta"):  # counts parameters without allocating them
        reference = transformers.GPT2LMHeadModel(hf)
    weights = reference.num_parameters() - reference.transformer.wpe.weight.numel()  # the head is tied: counted once
    config = solution(1).GPT2Config.from_hf(hf)
    count = attribute(step, "bytes_per_token")
    for bytes_per_weight in (4, 0.5625):  # float32 (the default: not passed), and q4_0's 4.5 bits
        given = () if bytes_per_weight == 4 else (bytes_per_weight,)
        got = call(count, config, *given, what=f"bytes_per_token(config{''.join(f', {b}' for b in given)})")
        assert_close(np.float64(got), np.float64(weights * bytes_per_weight),
                     f"bytes_per_token({name}, {bytes_per_weight} bytes a weight)", atol=0.5, rtol=0,
                     mistakes=_count_mistakes(config, bytes_per_weight), step=step)


def test_roofline_is_bandwidth_over_bytes_and_bandwidth_the_best_run(step, monkeypatch):
    """roofline is bandwidth ÷ bytes_per_token; measure_bandwidth is its matrix's bytes ÷ its fastest run (given code)

    GPT-2 small reads 123,653,376 weights a token. measure_bandwidth is timed by a clock whose five runs of
    W @ x take 3, 2, 4, 5 and 0.5 s: 256 MiB in 0.5 s."""
    import time

    test_bytes_per_token_counts_every_weight_read(step, "gpt2-small")  # TODO 1 first, with its named ✗
    config = solution(1).GPT2Config.from_hf(hf_config(**GPT2_SMALL))
    roofline = attribute(step, "roofline")
    for given, bytes_per_weight in (((), 4), ((0.5625,), 0.5625)):
        got = call(roofline, config, 30.0, *given, what=f"roofline(config, 30.0{''.join(f', {b}' for b in given)})")
        assert got == pytest.approx(30e9 / (123_653_376 * bytes_per_weight), rel=1e-12), (bytes_per_weight, got)
    ticks, clock = iter([0, 3, 10, 12, 20, 24, 30, 35, 40, 40.5]), time.perf_counter

    def fake_clock():  # measure_bandwidth's clock; anyone else's (a test runner timing the check) the real one
        return next(ticks) if "measure_bandwidth" in sys._getframe(1).f_code.co_name else clock()

    with monkeypatch.context() as patched:
        patched.setattr(time, "perf_counter", fake_clock)
        from course.decoding import measure_bandwidth

        got = measure_bandwidth()
    assert got == pytest.approx(256 * 2**20 / 0.5 / 1e9, rel=1e-12), f"measure_bandwidth gave {got} GB/s, not 0.537"


# --- TODO 2: one row times a matrix ----------------------------------------------------------


@pytest.mark.parametrize("out_dim", [64, 192])
def test_one_row_equals_x_times_w_transposed(step, out_dim):
    """one_row(x, W) equals x @ Wᵀ for a [1, 1, 64] row, with W square and not"""
    from course.runtime import from_numpy, to_numpy

    x = hidden_states(1, 1, 64, seed=16)
    w = hidden_states(out_dim, 64, seed=17) / 8
    got = call(attribute(step, "one_row"), from_numpy(x), from_numpy(w), what=f"one_row(x [1, 1, 64], W [{out_dim}, 64])")
    got = to_numpy(got)
    if list(got.shape) != [1, 1, out_dim]:
        fail(f"one_row(x [1, 1, 64], W [{out_dim}, 64]) has shape {list(got.shape)}, expected [1, 1, {out_dim}]: "
             f"x's shape with its last size made out_dim — TODO 2 in {shown(step.__file__)}")
    mistakes = [Mistake("the row is multiplied by W, not by Wᵀ: weight @ column needs weight [out, in] as it is", 2,
                        lambda: x @ w)] if out_dim == 64 else []
    assert_close(got, x @ w.T, f"one_row vs x @ Wᵀ (W [{out_dim}, 64])", mistakes=mistakes, step=step)


def test_one_row_reads_the_weight_as_it_lies(step):
    """one_row's graph multiplies the weight [out, in] as it lies by x made a column: no transpose of the weight, and
    the weight the matmul's left operand (W @ xᵀ), not x @ Wᵀ's right one

    Staged, not compiled (MAX's ``compilation.stage``): the graph's ops are read from its MLIR."""
    from max.driver import CPU
    from max.dtype import DType
    from max.experimental import compilation
    from max.experimental.tensor import TensorType

    test_one_row_equals_x_times_w_transposed(step, 192)  # the numbers first, with their named ✗
    one_row = attribute(step, "one_row")
    staged = call(compilation.stage(one_row), TensorType(DType.float32, [1, 1, 64], CPU()),
                  TensorType(DType.float32, [192, 64], CPU()), what="staging one_row(x [1, 1, 64], W [192, 64])")
    reads = weight_reads(str(staged.graph))
    if reads != ["left operand"]:
        how = ("transposes the weight and multiplies x by it: x @ Wᵀ, step 15's product, which reads W across its "
               "rows for one row" if "transposed" in reads or "right operand" in reads else
               f"reads the weight through {reads or 'no op at all'}")
        fail(f"one_row gives the right numbers, but its graph {how}. The step's point is the order W is read in: the "
             f"weight as it lies, [out, in], times x as a column, one pass over W — TODO 2 in {shown(step.__file__)}")


# --- TODO 3 and 4: the layer and the head ----------------------------------------------------


@pytest.mark.parametrize("rows", ["one row", "2x5 rows"])
def test_decode_linear_matches_conv1d(step, rows):
    """DecodeLinear equals Hugging Face's Conv1D (GPT2MLP.c_fc) on one row, and on many as step 04's Linear"""
    hf = hf_config(**SMALL)
    mlp = seeded(GPT2MLP(4 * hf.n_embd, hf), seed=16)
    reference = mlp.c_fc
    state = {k.removeprefix("c_fc."): v for k, v in to_max_state(mlp).items() if k.startswith("c_fc.")}
    decode_linear, products = attribute(step, "DecodeLinear"), []

    class Counted(decode_linear):  # the learner's layer, each call of its one-row product counted
        @staticmethod
        def one_row(x, weight):
            products.append(x.shape)
            return decode_linear.one_row(x, weight)

    layer = build(Counted, hf.n_embd, 4 * hf.n_embd)
    load_weights(layer, state)
    x = hidden_states(1, 1, hf.n_embd, seed=18) if rows == "one row" else hidden_states(2, 5, hf.n_embd)
    with torch.no_grad():
        expected = reference(torch.from_numpy(x)).numpy()
    got = forward(layer, x, what=f"DecodeLinear.forward on {rows}")
    no_bias = x @ state["weight"].T
    mistakes = [Mistake("the bias is left out: one_row(...) + self.bias", 3, lambda: no_bias)]
    assert_close(got, expected, f"DecodeLinear vs Conv1D on {rows}", mistakes=mistakes, step=step)
    if rows == "one row" and len(products) != 1:
        fail(f"DecodeLinear.forward on one row [1, 1, {hf.n_embd}] called self.one_row {len(products)} times, not once: "
             f"the right numbers, by step 04's matmul, which reads W the slow way for one row — {todo_in(decode_linear)}")
    if rows != "one row" and products:
        fail(f"DecodeLinear.forward on 2x5 rows called self.one_row: many rows keep step 04's matmul, "
             f"super().forward(x) — {todo_in(decode_linear)}")


def decode_model(step, reference):
    """The learner's DecodeGPT2LMHeadModel with ``reference``'s weights (the names of step 15's model)."""
    config = solution(1).GPT2Config.from_hf(reference.config)
    model = build(attribute(step, "DecodeGPT2LMHeadModel"), config)
    load_weights(model, to_max_state(reference))
    return model, config


def test_head_scores_every_token(step):
    """the head on one hidden vector equals hidden @ wteᵀ, the logits of every token, through the model's one_row"""
    reference = generation_model()
    model, config = decode_model(step, reference)
    hidden = hidden_states(1, config.n_embd, seed=19)
    products, one_row = [], model.one_row
    model.one_row = lambda x, weight: products.append(list(weight.shape)) or one_row(x, weight)  # each call counted
    try:
        got = forward(model.head, hidden, what="DecodeGPT2LMHeadModel.head")
    finally:
        del model.one_row
    wte = reference.transformer.wte.weight.detach().numpy()
    if list(got.shape) != [1, config.vocab_size]:
        fail(f"the head gives shape {list(got.shape)} for one hidden vector, expected [1, {config.vocab_size}] "
             f"(a logit for every token: the rows of wte) — TODO 4 in {shown(step.__file__)}")
    assert_close(got, hidden @ wte.T, "DecodeGPT2LMHeadModel.head vs hidden @ wteᵀ", step=step)
    if products != [list(wte.shape)]:
        fail(f"the head gives the right logits, but called self.one_row {len(products)} times on weights {products}, "
             f"not once on wte {list(wte.shape)}: a matmul of step 11's kind reads the table across its rows, where "
             f"the one-row product reads it as it lies — TODO 4 in {shown(step.__file__)}")


# --- TODO 5: attention over the cache as it lies --------------------------------------------


def _attention(q, keys, values, scale):
    """Softmax attention of one query per head over ``keys``/``values`` [T, H, D] (NumPy), -> [1, H, D]."""
    scores = np.einsum("hd,thd->th", q[0], keys) * scale
    weights = np.exp(scores - scores.max(0))
    weights /= weights.sum(0)
    return np.einsum("th,thd->hd", weights, values)[None]


@pytest.mark.parametrize("past", [1, 9], ids=["1 cached token", "9 cached tokens"])
def test_attend_in_place_matches_torch(step, past):
    """attend_in_place equals PyTorch's scaled_dot_product_attention over the cached and the new keys and values"""
    from course.runtime import from_numpy, to_numpy

    heads, head_dim = 4, 16
    q, k, v = (hidden_states(1, heads, head_dim, seed=20 + i) for i in range(3))
    past_k, past_v = hidden_states(past, heads, head_dim, seed=23), hidden_states(past, heads, head_dim, seed=24)
    keys, values = np.concatenate([past_k, k]), np.concatenate([past_v, v])
    with torch.no_grad():  # [1, H, 1, D] over [1, H, past + 1, D]
        expected = torch.nn.functional.scaled_dot_product_attention(
            *(torch.from_numpy(t).transpose(0, 1)[None] for t in (q, keys, values)))[0].transpose(0, 1).numpy()
    what = f"attend_in_place(q [1, {heads}, {head_dim}], …, past_k [{past}, {heads}, {head_dim}], …)"
    got = call(attribute(step, "attend_in_place"), *(from_numpy(t) for t in (q, k, v, past_k, past_v)), what=what)
    got = to_numpy(got)
    if list(got.shape) != [1, heads, head_dim]:
        fail(f"{what} has shape {list(got.shape)}, expected [1, {heads}, {head_dim}]: one output per head, the "
             f"weighted sum over the tokens — TODO 5 in {shown(step.__file__)}")
    scale = 1 / np.sqrt(head_dim)
    across_heads = np.einsum("hd,thd->th", q[0], keys) * scale
    across_heads = np.exp(across_heads - across_heads.max(1, keepdims=True))
    across_heads /= across_heads.sum(1, keepdims=True)
    mistakes = [
        Mistake("the scores are not scaled by 1 / sqrt(D)", 5, lambda: _attention(q, keys, values, 1.0)),
        Mistake("the scores are scaled by 1 / D, not 1 / sqrt(D)", 5, lambda: _attention(q, keys, values, 1 / head_dim)),
        Mistake("the new token's own key and value are left out: it attends to itself too", 5,
                lambda: _attention(q, past_k, past_v, scale)),
        Mistake("the softmax runs over the heads (axis 1), not over the tokens (axis 0)", 5,
                lambda: np.einsum("th,thd->hd", across_heads, values)[None]),
        Mistake("the new value is left out of the sum: add v weighted by the last weight", 5,
                lambda: _attention(q, keys, np.concatenate([past_v, 0 * v]), scale)),
    ]
    assert_close(got, expected, f"attend_in_place vs scaled_dot_product_attention ({past} cached token{'s' * (past > 1)})",
                 mistakes=mistakes, step=step)


# --- the compiled model ----------------------------------------------------------------------


@pytest.fixture(autouse=True, scope="module")
def _a_fresh_model_each_run():
    """Each run of this module builds its own DecodeNextLogits: a runner (mutmut) may run it twice in one process."""
    _compiled.clear()


def the_todos_first(step) -> None:
    """The eager checks of TODOs 2-5, each with its named ✗, before a check compiles the learner's model."""
    test_one_row_equals_x_times_w_transposed(step, 192)
    test_decode_linear_matches_conv1d(step, "one row")
    test_head_scores_every_token(step)
    test_attend_in_place_matches_torch(step, 9)


def compiled(step, reference) -> tuple[object, int]:
    """DecodeNextLogits on ``reference``'s weights, after the eager checks of TODOs 2-5 pass, once per run;
    and the number of graphs building it compiled."""
    if step.__file__ not in _compiled:
        the_todos_first(step)
        model, config = decode_model(step, reference)
        with counting_compiles() as loads:
            next_logits = call(attribute(step, "DecodeNextLogits"), model, config)
        _compiled[step.__file__] = (next_logits, len(loads))
    return _compiled[step.__file__]


def test_logits_match_the_whole_sequence_and_decode_compiles_once(step):
    """teacher-forced through both graphs, the logits equal GPT2LMHeadModel's; the decode graph compiles once"""
    reference = generation_model()
    next_logits, built = compiled(step, reference)
    if built != 1:
        fail(f"building DecodeNextLogits compiled {built} graphs, expected 1 (the prefill graph; the decode graph "
             f"waits for the first decode step) — DecodeNextLogits is given code in {shown(step.__file__)}")
    ids = np.random.default_rng(16).integers(0, GEN["vocab_size"], size=40).tolist()
    expected_compiles = int(getattr(next_logits, "decode", None) is None)  # 0 where a check before compiled it
    with counting_compiles() as compiles:
        got = [call(next_logits, ids[:5], what="the prefill of 5 tokens")]
        for end in range(6, len(ids) + 1):
            got.append(call(next_logits, ids[:end], what=f"the decode step with {end - 1} cached tokens"))
            if len(compiles) > 1:
                fail(f"the decode step with {end - 1} cached tokens compiled a graph again ({len(compiles)} so far): "
                     f"the decode graph is compiled once — DecodeNextLogits is given code in {shown(step.__file__)}")
    if len(compiles) != expected_compiles or getattr(next_logits, "decode", None) is None:
        fail(f"decoding compiled {len(compiles)} graphs, expected {expected_compiles}: the decode graph, for one new token "
             f"— DecodeNextLogits is given code in {shown(step.__file__)}")
    with torch.no_grad():
        expected = reference(torch.tensor([ids])).logits[0, 4:].numpy()
    assert_close(np.stack(got), expected,
                 "logits through the prefill graph (5 tokens), then the decode graph (1 per step), vs GPT2LMHeadModel over all 40")


def test_a_short_prompt_goes_through_the_decode_graph_alone(step):
    """a prompt shorter than prefill_from goes through the decode graph alone, one token at a time from an empty cache

    With prefill_from 6: prompts of 5, 3, 1 and 4 tokens, none the one before plus a token, give GPT2LMHeadModel's
    logits and compile only the decode graph; the first prompt of 6 compiles the prefill graph, the next (12 tokens)
    nothing. With prefill_from 2, building compiles nothing either."""
    the_todos_first(step)
    reference = generation_model()
    model, config = decode_model(step, reference)
    given = f"DecodeNextLogits is given code in {shown(step.__file__)}"
    for prefill_from in (2, 6):  # the runner of 6 is the one the prompts go through
        with counting_compiles() as compiles:
            next_logits = call(attribute(step, "DecodeNextLogits"), model, config, prefill_from=prefill_from)
        if compiles:
            fail(f"building DecodeNextLogits with prefill_from={prefill_from} compiled {len(compiles)} graphs, expected "
                 f"none: each graph waits for its first use — {given}")
    rng = np.random.default_rng(20)
    prompts = [rng.integers(0, GEN["vocab_size"], size=size).tolist() for size in (5, 3, 1, 4, 6, 12)]
    with torch.no_grad():
        expected = [reference(torch.tensor([prompt])).logits[0, -1].numpy() for prompt in prompts]
    with counting_compiles() as compiles:
        got = [call(next_logits, prompt, what=f"a prompt of {len(prompt)} tokens") for prompt in prompts[:4]]
    if len(compiles) != 1 or getattr(next_logits, "run", None) is not None:
        fail(f"prompts of 5, 3, 1 and 4 tokens compiled {len(compiles)} graphs, expected 1 (the decode graph; the "
             f"prefill graph waits for a prompt of prefill_from tokens) — {given}")
    assert_close(np.stack(got), np.stack(expected[:4]), "logits of prompts of 5, 3, 1 and 4 tokens, each fed one token "
                 "at a time through the decode graph from an empty cache, vs GPT2LMHeadModel")
    with counting_compiles() as compiles:
        got = [call(next_logits, prompts[4], what="a prompt of 6 tokens")]
        if len(compiles) != 1:
            fail(f"a prompt of 6 tokens, with prefill_from 6, compiled {len(compiles)} graphs, expected 1: the prefill "
                 f"graph — {given}")
        got.append(call(next_logits, prompts[5], what="a prompt of 12 tokens"))
    if len(compiles) != 1:
        fail(f"a prompt of 12 tokens after one of 6 compiled a graph again: the prefill graph is compiled once — {given}")
    assert_close(np.stack(got), np.stack(expected[4:]),
                 "logits of prompts of 6 and 12 tokens through the prefill graph, vs GPT2LMHeadModel")


def test_decoding_fills_every_position_and_refuses_one_more(step):
    """decoding reaches the last of n_positions and refuses the next one with step 06's message, on both roads"""
    the_todos_first(step)
    reference = generation_model()
    model, config = decode_model(step, reference)
    ids = np.random.default_rng(21).integers(0, GEN["vocab_size"], size=GEN["n_positions"] + 1).tolist()
    for prefill_from, start in ((1, GEN["n_positions"] - 2), (GEN["n_positions"] + 1, 1)):
        next_logits = call(attribute(step, "DecodeNextLogits"), model, config, prefill_from=prefill_from)
        for end in range(start, GEN["n_positions"] + 1):  # a prompt of `start` tokens, then decode steps
            last = call(next_logits, ids[:end], what=f"the call with {end} tokens (prefill_from {prefill_from})")
        with torch.no_grad():
            expected = reference(torch.tensor([ids[:-1]])).logits[0, -1].numpy()
        assert_close(last, expected, f"logits at the last position, {GEN['n_positions'] - 1}, prefill_from "
                     f"{prefill_from}, vs GPT2LMHeadModel")
        with pytest.raises(ValueError) as refused:
            next_logits(ids)
        message = (f"positions {GEN['n_positions']}..{GEN['n_positions']} do not fit: GPT-2 learned "
                   f"n_positions={GEN['n_positions']} positions")
        assert message in str(refused.value), f"one more token than n_positions: {refused.value}"


def test_greedy_matches_hugging_face(step, record_property):
    """greedy tokens through both graphs equal Hugging Face's generate, with nothing compiled while decoding"""
    reference = generation_model()
    next_logits, _ = compiled(step, reference)
    next_logits(list(range(3)))  # a prefill and a decode step: both graphs are compiled
    next_logits(list(range(4)))
    for prompt in ([7, 1, 30], [11, 52, 3, 90, 17, 4, 60]):
        with counting_compiles() as compiles:
            got = list(solution(13).generate(next_logits, prompt, 32, n_positions=GEN["n_positions"], eos_id=EOS,
                                             temperature=0.0))
        if compiles:
            fail(f"greedy decoding after the prompt {prompt} compiled {len(compiles)} new graphs — DecodeNextLogits is "
                 f"given code in {shown(step.__file__)}")
        expected, scores = hf_greedy(reference, prompt, 32, eos_id=EOS)
        if note := greedy_agreement(got, expected, scores, f"prompt {prompt}"):
            print(note)
    record_property("greedy", "2 prompts × 32 tokens: = Hugging Face")


def test_cache_holds_the_keys_and_values_written_in_place(step):
    """the cache, allocated once, holds Hugging Face's keys and values of every token after decoding"""
    reference = generation_model()
    next_logits, _ = compiled(step, reference)
    _decode_and_compare_the_cache(step, next_logits, reference, "")


def _decode_and_compare_the_cache(step, next_logits, reference, model: str) -> None:
    """A prefill of 3 tokens and 17 decode steps through ``next_logits``; then its cache's buffers are the ones
    allocated in __init__, and hold ``reference``'s keys and values of all 20 tokens (``model``: named in the
    message)."""
    buffers = [*next_logits.key_cache, *next_logits.value_cache]
    ids = np.random.default_rng(17).integers(0, GEN["vocab_size"], size=20).tolist()
    for end in range(3, len(ids) + 1):  # a prefill of 3, then 17 decode steps
        call(next_logits, ids[:end], what=f"the call with {end} tokens")
    if [*next_logits.key_cache, *next_logits.value_cache] != buffers:
        fail(f"decoding replaced the cache's buffers: they are allocated once, in __init__, and written in place "
             f"— DecodeNextLogits is given code in {shown(step.__file__)}")
    with torch.no_grad():
        cache = reference(torch.tensor([ids]), use_cache=True).past_key_values
    for name, ours in (("keys", next_logits.key_cache), ("values", next_logits.value_cache)):
        got = np.stack([buffer.to_numpy()[: len(ids)] for buffer in ours])  # [layers, T, H, D]
        expected = np.stack([getattr(layer, name)[0].transpose(0, 1).numpy() for layer in cache.layers])
        assert_close(got, expected, f"the cache's {name}{model}, every layer, after 3 + 17 tokens, vs "
                     "past_key_values", step=step)


# --- given code: the same products by the course's Mojo kernel -------------------------------


@pytest.mark.parametrize("shape", [(67, 70), (192, 64)], ids=["W [67, 70]", "W [192, 64]"])
def test_mojo_kernel_equals_x_times_w_transposed(step, shape, mojo_kernels):
    """the Mojo kernel (one_row_kernel, given code) equals x @ Wᵀ, leftover rows and columns included

    67 rows = 16 groups of four + 3; 70 columns = 4 loads of 16 + 6. Compiled with W, as in the model."""
    from max.driver import CPU
    from max.dtype import DType
    from max.experimental.nn import Module
    from max.experimental.tensor import Tensor, TensorType

    from course.runtime import from_numpy, to_numpy

    out_dim, in_dim = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal((1, 1, in_dim), dtype=np.float32)
    w = rng.standard_normal((out_dim, in_dim), dtype=np.float32)
    from course.decoding import one_row_kernel as kernel

    class Product(Module):  # a graph of the one product (an eager custom op would compile a graph per call)
        def __init__(self):
            self.weight = Tensor.from_dlpack(w)

        def forward(self, row):
            return kernel(row, self.weight)

    run = call(Product().compile, TensorType(DType.float32, [1, 1, in_dim], CPU()),
               what=f"compiling one_row_kernel with W [{out_dim}, {in_dim}]")
    got = to_numpy(run(from_numpy(x)))
    assert_close(got, x @ w.T, f"the Mojo kernel vs x @ Wᵀ (W [{out_dim}, {in_dim}])")


@pytest.mark.parametrize("op", ["norm", "norm and GELU", "residual"])
def test_mojo_fused_ops_equal_numpy(step, op, mojo_kernels):
    """the fused kernels (given code) equal NumPy's layer norm, product, bias, GELU and residual add

    norm_one_row_kernel and one_row_add_kernel on W [67, 70] (leftover rows and columns), the layer norm's eps
    0.1 (a fixed 1e-5 would be off by about 5%)."""
    from max.driver import CPU
    from max.dtype import DType
    from max.experimental.nn import Linear, Module
    from max.experimental.tensor import Tensor, TensorType

    from course.runtime import from_numpy, to_numpy

    out_dim, in_dim = 67, 70
    rng = np.random.default_rng(16)
    x = rng.standard_normal((1, in_dim), dtype=np.float32)
    w = rng.standard_normal((out_dim, in_dim), dtype=np.float32) / in_dim**0.5
    b = rng.standard_normal(out_dim, dtype=np.float32)
    gamma, beta = 1 + rng.standard_normal(in_dim, dtype=np.float32) / 2, rng.standard_normal(in_dim, dtype=np.float32) / 2
    stream = rng.standard_normal((1, out_dim), dtype=np.float32)
    norm = solution(3).LayerNorm(in_dim, eps=0.1)
    norm.weight, norm.bias = Tensor.from_dlpack(gamma), Tensor.from_dlpack(beta)
    linear = Linear(in_dim, out_dim)
    linear.weight, linear.bias = Tensor.from_dlpack(w), Tensor.from_dlpack(b)
    normed = (x - x.mean()) / np.sqrt(x.var() + 0.1) * gamma + beta
    from course import decoding

    if op == "residual":
        kernel, expected = decoding.one_row_add_kernel, stream + x @ w.T + b
    else:
        kernel, expected = decoding.norm_one_row_kernel, normed @ w.T + b
        if op == "norm and GELU":
            expected = 0.5 * expected * (1 + np.tanh(np.sqrt(2 / np.pi) * (expected + 0.044715 * expected**3)))

    class Fused(Module):  # one graph of the one op, its weights as the model holds them
        def __init__(self):
            self.norm, self.linear, self.stream = norm, linear, Tensor.from_dlpack(stream)

        def forward(self, row):
            if op == "residual":
                return kernel(row, self.linear, self.stream)
            return kernel(row, self.norm, self.linear.weight, self.linear.bias, gelu=op == "norm and GELU")

    run = call(Fused().compile, TensorType(DType.float32, [1, in_dim], CPU()), what=f"compiling the {op} kernel")
    assert_close(to_numpy(run(from_numpy(x))), expected, f"the fused Mojo kernel ({op}) vs NumPy, W [67, 70]")


def _kernel_runner(step, **sizes) -> tuple[object, object]:
    """A Hugging Face GPT-2 of ``sizes`` and DecodeNextLogits over KernelGPT2LMHeadModel on its weights. The
    model's own TODOs are checked first, each with its named ✗."""
    test_decode_linear_matches_conv1d(step, "one row")
    test_head_scores_every_token(step)
    reference = generation_model(**sizes)
    config = solution(1).GPT2Config.from_hf(reference.config)
    model = build(attribute(step, "KernelGPT2LMHeadModel"), config)
    load_weights(model, to_max_state(reference))
    return reference, call(attribute(step, "DecodeNextLogits"), model, config)


def _kernel_model_against_hf(step, length: int, seed: int, **sizes) -> tuple[np.ndarray, np.ndarray]:
    """KernelGPT2LMHeadModel's logits through both graphs (a prefill of 5 random tokens, then one decode step a
    token up to ``length``), and GPT2LMHeadModel's at the same positions, on the same weights."""
    reference, next_logits = _kernel_runner(step, **sizes)
    ids = np.random.default_rng(seed).integers(0, GEN["vocab_size"], size=length).tolist()
    got = [call(next_logits, ids[:end], what=f"the call with {end} tokens") for end in range(5, length + 1)]
    with torch.no_grad():
        expected = reference(torch.tensor([ids])).logits[0, 4:].numpy()
    return np.stack(got), expected


def test_mojo_kernel_model_matches_the_whole_sequence(step, mojo_kernels):
    """with the Mojo kernel (KernelGPT2LMHeadModel), through both graphs, the logits equal GPT2LMHeadModel's

    Every one-row product and the head by the kernel; a prefill of 5 tokens, then 19 decode steps."""
    got, expected = _kernel_model_against_hf(step, 24, seed=18)
    assert_close(got, expected,
                 "logits with the Mojo kernel (a prefill of 5, then 19 decode steps) vs GPT2LMHeadModel over all 24")


@pytest.mark.parametrize("model", ["DecodeGPT2LMHeadModel", "KernelGPT2LMHeadModel"])
def test_a_one_layer_model_decodes_as_hugging_faces(step, model, mojo_kernels):
    """a model of one block decodes too, on the plain decode graph and on the kernels' alike: its logits equal
    GPT2LMHeadModel's (its cache has layer 0's keys and values only; prompts of 5 to 9 tokens, each fed through the
    decode graph alone, so that only that graph compiles)"""
    if model == "DecodeGPT2LMHeadModel":
        the_todos_first(step)
    else:
        test_decode_linear_matches_conv1d(step, "one row")
        test_head_scores_every_token(step)
    reference = generation_model(n_layer=1)
    config = solution(1).GPT2Config.from_hf(reference.config)
    built = build(attribute(step, model), config)
    load_weights(built, to_max_state(reference))
    next_logits = call(attribute(step, "DecodeNextLogits"), built, config, prefill_from=10)
    ids = np.random.default_rng(21).integers(0, GEN["vocab_size"], size=9).tolist()
    got = [call(next_logits, ids[:end], what=f"the call with {end} tokens of a one-layer model") for end in range(5, 10)]
    with torch.no_grad():
        expected = reference(torch.tensor([ids])).logits[0, 4:].numpy()
    assert_close(np.stack(got), expected, f"logits of a one-layer {model} (5 to 9 tokens, through the decode graph) "
                 "vs GPT2LMHeadModel over all 9")


def test_mojo_kernel_model_matches_past_128_cached_tokens(step, mojo_kernels):
    """past 128 cached tokens, where every core attends to its band of them and the bands merge, the kernel model's
    logits still equal GPT2LMHeadModel's (float32: a block as one op)

    A model of 256 positions; a prefill of 5 tokens, then decode steps to 140 tokens; the logits compared from the
    120th on."""
    got, expected = _kernel_model_against_hf(step, 140, seed=19, n_positions=256)
    assert_close(got[115:], expected[115:],
                 "logits with the Mojo kernel at 120-140 tokens (a prefill of 5, then decode steps) vs GPT2LMHeadModel")


def test_the_float32_kernel_model_writes_its_new_cache_rows_in_the_graph(step, mojo_kernels):
    """the float32 kernel model's decode graph writes each new key and value into the cache itself and returns the
    logits alone; the cache then holds Hugging Face's keys and values

    block_one_row is handed each layer's first P + 1 rows as buffers and writes row P: nothing comes back to be
    copied (given code: writes_cache, block_kernel, DecodeNextLogits)."""
    reference, next_logits = _kernel_runner(step)
    _decode_and_compare_the_cache(step, next_logits, reference, " (the kernel model's)")
    outputs = len(next_logits.decode_graph().engine_model.output_metadata)
    if outputs != 1:
        fail(f"the float32 kernel model's decode graph returns {outputs} outputs; its blocks write each new key "
             f"and value into the cache, so it returns the logits alone — given code in {shown(step.__file__)}")


def test_every_linear_of_the_decode_model_is_a_decode_linear(step):
    """DecodeGPT2LMHeadModel (given code) swaps each of step 04's Linears for a DecodeLinear, and the kernel model
    each for a KernelDecodeLinear: a Linear left as it was would give the same numbers by x @ Wᵀ"""
    from max.experimental.nn import Linear

    config = solution(1).GPT2Config.from_hf(generation_model().config)
    for model_name, linear_name in (("DecodeGPT2LMHeadModel", "DecodeLinear"),
                                    ("KernelGPT2LMHeadModel", "KernelDecodeLinear")):
        model = build(attribute(step, model_name), config)
        kinds = sorted({type(child).__name__ for _, module in model.descendants for _, child in module.children
                        if isinstance(child, Linear)})
        assert kinds == [linear_name], f"{model_name}'s Linears are {kinds}, not all {linear_name}"


def test_a_float32_kernel_decode_step_is_one_op_a_block(step, mojo_kernels, monkeypatch):
    """the float32 kernel model's decode graph runs each block as one op, and ln_f with the head as one more

    Recorded while the decode graph is built: block_kernel once a block (ln_1, c_attn, the attention, the
    projections, the residual adds, ln_2, c_fc and GELU in the Mojo kernel block_one_row), none of the five ops a
    quantized block takes; then norm_one_row for ln_f and the head."""
    the_todos_first(step)  # the prefill graph, built first, runs the learner's DecodeLinear
    reference = generation_model()
    config = solution(1).GPT2Config.from_hf(reference.config)
    calls = []

    def recording(name, kernel):
        def record(*args, **kwargs):
            calls.append((name, kwargs.get("gelu", False)))
            return kernel(*args, **kwargs)
        return record

    from course import decoding

    for name in ("block_kernel", "norm_one_row_kernel", "one_row_add_kernel"):
        monkeypatch.setattr(decoding, name, recording(name, getattr(decoding, name)))
    model = build(attribute(step, "KernelGPT2LMHeadModel"), config)
    load_weights(model, to_max_state(reference))
    next_logits = call(attribute(step, "DecodeNextLogits"), model, config)
    call(next_logits.decode_graph, what="compiling the decode graph")
    expected = [("block_kernel", False)] * config.n_layer + [("norm_one_row_kernel", False)]
    assert calls == expected, (f"building the float32 decode graph called {calls or 'no fused op'} (kernel, gelu); "
                               f"expected block_kernel for each of the {config.n_layer} blocks, then norm_one_row_kernel "
                               "for ln_f and the head")


@pytest.mark.parametrize("cache", ["float32", "float16"])
@pytest.mark.parametrize("past", [1, 200], ids=["1 cached token", "200 cached tokens"])
def test_mojo_attention_matches_numpy(step, cache, past, mojo_kernels):
    """the Mojo attention (attend_kernel, given code) equals NumPy's over a float32 or a float16 cache

    The cached and the new keys and values; the new key and value come back in the cache's type (float16 on the
    quantized kernel paths). 200 + 1 tokens split unevenly between the cores (past 127 the kernel uses every core),
    1 + 1 on one core."""
    _check_attention(step, cache, past, 32)


@pytest.mark.parametrize("cache", ["float32", "float16"])
def test_mojo_attention_keeps_maxs_ops_for_a_head_size_it_does_not_take(step, cache, mojo_kernels):
    """attend_kernel with a head size that is no multiple of 16 gives NumPy's attention by MAX's ops, in the cache's type

    Heads of 8 (the kernel reads 16 floats a load): TODO 5's attend over float32 copies of the cache."""
    test_attend_in_place_matches_torch(step, 9)  # TODO 5 first, with its named ✗
    _check_attention(step, cache, 9, 8)


def _check_attention(step, cache: str, past: int, head_dim: int) -> None:
    from max.driver import CPU
    from max.dtype import DType
    from max.experimental.nn import Module
    from max.experimental.tensor import TensorType

    from course.runtime import from_numpy

    heads = 3
    q, k, v = (hidden_states(1, heads, head_dim, seed=30 + i) for i in range(3))
    past_k, past_v = (hidden_states(past, heads, head_dim, seed=33 + i).astype(cache) for i in range(2))
    qkv = np.concatenate([t.reshape(1, 1, -1) for t in (q, k, v)], axis=-1)  # c_attn's output, [1, 1, 3C]
    kernel = attribute(step, "KernelGPT2LMHeadModel").attend  # the kernel, or for other head sizes TODO 5's attend

    class Attention(Module):  # a graph of the one op (an eager custom op would compile a graph per call)
        def forward(self, *inputs):
            return kernel(*inputs)

    from max.experimental import functional

    rows, ops, custom = TensorType(getattr(DType, cache), ["past", heads, head_dim], CPU()), [], functional.custom

    def recorded(name, *args, **kwargs):
        ops.append(name)
        return custom(name, *args, **kwargs)

    functional.custom = recorded  # which custom ops the graph is built from
    try:
        run = call(Attention().compile, TensorType(DType.float32, list(qkv.shape), CPU()), rows, rows,
                   what=f"compiling attend_kernel with a {cache} cache")
    finally:
        functional.custom = custom
    expected = ["attend_one"] if head_dim % 16 == 0 else []
    assert ops == expected, f"heads of {head_dim}: the graph was built from the custom ops {ops}, expected {expected}"
    got_y, got_k, got_v = (np.asarray(t.to_numpy()) for t in run(*(from_numpy(t) for t in (qkv, past_k, past_v))))
    keys = np.concatenate([past_k.astype(np.float32), k])
    values = np.concatenate([past_v.astype(np.float32), v])
    assert_close(got_y, _attention(q, keys, values, 1 / np.sqrt(head_dim)),
                 f"the Mojo attention vs NumPy's ({past} cached tokens, {cache} cache, heads of {head_dim})")
    for name, got, new in (("key", got_k, k), ("value", got_v, v)):
        assert got.dtype == np.dtype(cache), f"the new {name} comes back as {got.dtype}, not the cache's {cache}"
        assert_close(got.astype(np.float32), new.astype(cache).astype(np.float32), f"the new {name} in {cache}")


def test_two_decodes_at_once_in_two_threads_give_hugging_faces_tokens(step, mojo_kernels):
    """two kernel-model decodes running at once, each in its own thread with its own runner, give Hugging Face's
    greedy tokens, as a server's two requests would; a hang fails the check after 300 s instead of freezing the suite

    The float32 block op's bands meet at barriers, and runtime.py keeps a count of the graphs in flight: both are
    shared by every thread of the process (given code: KernelGPT2LMHeadModel, DecodeNextLogits)."""
    import threading

    runners = [_kernel_runner(step) for _ in range(2)]  # the same weights (generation_model is seeded), two caches
    reference = runners[0][0]
    prompts = ([7, 1, 30], [11, 52, 3, 90, 17, 4, 60])
    for (_, next_logits), prompt in zip(runners, prompts):  # both graphs compiled before the threads start
        next_logits(prompt)
        next_logits([*prompt, 1])
    got, errors = {}, []

    def decode(index):
        try:
            got[index] = list(solution(13).generate(runners[index][1], prompts[index], 24,
                                                    n_positions=GEN["n_positions"], eos_id=EOS, temperature=0.0))
        except Exception as error:  # noqa: BLE001 - reported below, with its thread
            errors.append((index, error))

    threads = [threading.Thread(target=decode, args=(index,), daemon=True) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    if any(thread.is_alive() for thread in threads):
        fail("two decodes at once in two threads did not finish in 300 s: a hang between them — given code in "
             "course/decoding.py and course/kernels/block.mojo")
    assert not errors, f"a decode failed in its thread: {errors}"
    for index, prompt in enumerate(prompts):
        expected, scores = hf_greedy(reference, prompt, 24, eos_id=EOS)
        if note := greedy_agreement(got[index], expected, scores, f"thread {index}, prompt {prompt}"):
            print(note)
