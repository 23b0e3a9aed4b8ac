"""Step 15 · the KV cache against Hugging Face's GPT-2, run without a cache.

Each layer is checked eagerly before anything is compiled, from the bottom up, so that a
mistake is named with its TODO in seconds:

* the cached attention's mask (TODO 1) against step 02's ``causal_mask``;
* the cached attention (TODO 2): a prefill over the first tokens, then the rest against
  its keys and values, compared with Hugging Face's ``GPT2Attention`` over the whole
  sequence under the causal mask;
* the cached block (TODO 3) the same way, against ``GPT2Block``;
* the cached model (TODO 4): a prefill of 3 tokens, then 1 decoded token, against
  ``GPT2LMHeadModel`` on all 4.

Then the compiled cached model (one graph, symbolic ``seq`` and ``past``) is
teacher-forced through a 40-token sequence: a prefill of 5 tokens, then one token per
call. The logits at every position must match ``GPT2LMHeadModel`` run on the whole
sequence at once, which uses no cache. Greedy generation with the cache must be
token-identical to generation without it (step 13's compiled graph) and to
``GPT2LMHeadModel.generate``. Decoding must not compile anything: MAX loads exactly one
graph, when the cached model is compiled, and a call that would load another fails at
once, before MAX spends seconds (minutes, cold) compiling it.

Where the logits differ, the common mistakes are recognised by their outputs, computed
from the same weights: a mask or a cache in the wrong order, positions that restart at
0 with each call, a block wired wrongly.

Tolerance: the harness default, 1e-4 + 1e-4·|expected|. Measured worst |Δ| of
the teacher-forced logits on solutions/: see the ✓ line (about 1e-6).
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
from transformers.models.gpt2.modeling_gpt2 import GPT2Attention, GPT2Block

from course.check.hints import explain_exception, shown
from course.runtime import from_numpy, to_numpy
from harness import (
    ATOL, RTOL, Mistake, assert_close, attribute, build, call, counting_compiles, fail, greedy_agreement, load_weights, matching_mistake,
    solution, todo_in,
)
from reference import (
    GEN, SMALL, generation_model, hf_config, hf_greedy, hidden_states, run, run_masked, seeded, softmax, to_max_state,
)

pytestmark = pytest.mark.step15

EOS = GEN["vocab_size"] - 1
HEAD_DIM = SMALL["n_embd"] // SMALL["n_head"]
_compiled: dict[str, object] = {}


def _empty_cache(layers: int = 1, n_head: int = SMALL["n_head"], head_dim: int = HEAD_DIM) -> list:
    return [from_numpy(np.zeros((1, n_head, 0, head_dim), dtype=np.float32)) for _ in range(layers)]


# --- TODO 1: the mask ----------------------------------------------------------------------


def _mask(seq_len: int, past_len: int, sees) -> np.ndarray:
    """An additive mask [seq_len, past_len + seq_len]: 0 where new token i sees key j, ``sees(i, j)``, else -inf."""
    i, j = np.ogrid[:seq_len, : past_len + seq_len]
    return np.where(sees(i, j), 0.0, -np.inf).astype(np.float32)


def mask_mistakes(seq_len: int, past_len: int) -> list[Mistake]:
    """The common wrong masks with a cache: new token i sits at position past_len + i."""
    p = past_len
    return [
        Mistake("the cached keys are masked (-inf); every new token sees every cached key: zeros over the past", 1,
                lambda: _mask(seq_len, p, lambda i, j: (j >= p) & (j <= p + i))),
        Mistake("the mask is not offset by past_len: new token i sees keys 0..i, but it sits at position "
                "past_len + i and sees keys 0..past_len + i", 1, lambda: _mask(seq_len, p, lambda i, j: j <= i)),
        Mistake("the two parts are in the wrong order, [causal | zeros]: the cached keys come first, so the zeros "
                "over the past go first", 1,
                lambda: _mask(seq_len, p, lambda i, j: (j <= i) | (j >= seq_len))),
        Mistake("the mask is square, [seq_len, seq_len]: it leaves out the past_len cached keys", 1,
                lambda: _mask(seq_len, 0, lambda i, j: j <= i)),
        Mistake("each new token sees the next one too (too open by one)", 1,
                lambda: _mask(seq_len, p, lambda i, j: j <= p + i + 1)),
        Mistake("each new token's own key is masked (too closed by one)", 1,
                lambda: _mask(seq_len, p, lambda i, j: j < p + i)),
    ]


def test_mask_with_a_cache(step):
    """the cached attention's mask is step 02's mask for every past_len, 0 when none is given"""
    attention = build(attribute(step, "CachedSelfAttention"), solution(1).GPT2Config.from_hf(hf_config(**SMALL)))
    for seq_len, past_len in [(5, 0), (1, 7), (3, 4), (4, None)]:
        given = () if past_len is None else (past_len,)  # None: past_len left to its default, no cache
        past_len = past_len or 0
        what = f"CachedSelfAttention.mask({', '.join(map(str, (seq_len, *given)))})"
        got = call(attention.mask, seq_len, *given, what=what)
        expected = to_numpy(solution(2).causal_mask(seq_len, past_len))
        assert_close(to_numpy(got), expected, f"{what} vs causal_mask({seq_len}, {past_len})",
                     mistakes=mask_mistakes(seq_len, past_len), step=step)


# --- TODO 2: the attention -------------------------------------------------------------------


def _heads(x: np.ndarray) -> np.ndarray:
    """[B, T, C] -> [B, H, T, D]."""
    b, t, _ = x.shape
    return x.reshape(b, t, SMALL["n_head"], HEAD_DIM).transpose(0, 2, 1, 3)


def cached_attention(state: dict, x: np.ndarray, past_len: int, new_first: bool = False) -> np.ndarray:
    """GPT-2's attention in NumPy, the first ``past_len`` tokens as a prefill and the rest against
    their cache; ``new_first`` puts the new keys and values before the cached ones."""
    x = x.astype(np.float64)
    q, k, v = np.split(x @ state["c_attn.weight"].T + state["c_attn.bias"], 3, axis=-1)
    y = attend_in_two_calls(_heads(q), _heads(k), _heads(v), past_len, new_first)
    return y.transpose(0, 2, 1, 3).reshape(x.shape) @ state["c_proj.weight"].T + state["c_proj.bias"]


def attend_in_two_calls(q: np.ndarray, k: np.ndarray, v: np.ndarray, past_len: int, new_first: bool = False) -> np.ndarray:
    """Causal attention of q, k, v ``[B, H, T, D]`` as a cached model computes it: the first ``past_len`` tokens
    as a prefill, then the rest against all the keys so far; ``new_first`` (a mistake) puts the new keys and
    values before the cached ones. Returns ``[B, H, T, D]``."""
    outputs = []
    for start, end in ((0, past_len), (past_len, q.shape[2])):
        if start == end:
            continue
        keys, values = k[:, :, :end], v[:, :, :end]
        if new_first and start:
            keys = np.concatenate([k[:, :, start:end], k[:, :, :start]], axis=2)
            values = np.concatenate([v[:, :, start:end], v[:, :, :start]], axis=2)
        mask = _mask(end - start, start, lambda i, j: j <= start + i)
        weights = softmax(q[:, :, start:end] @ keys.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1]) + mask)
        outputs.append(weights @ values)
    return np.concatenate(outputs, axis=2)


def _cached_call(step, module, x: np.ndarray, past_k, past_v, what: str):
    """Calls a cached attention or block; returns (output, k, v), or fails naming the TODO."""
    try:
        result = module(from_numpy(x), past_k, past_v)
    except Exception as error:  # noqa: BLE001 - explained, with the learner's line
        if "non-concat axis 2" in str(error):  # MAX's words for a concatenation along the wrong axis
            fail(f"{what} failed: {explain_exception(error, step.__file__)}: the past and new "
                 f"keys (and values) are joined along another axis than 2, the token axis: [B, H, P, D] and "
                 f"[B, H, T, D] make [B, H, P + T, D]")
        result = call(module, from_numpy(x), past_k, past_v, what=what)
    if result is None:
        call(module, from_numpy(x), past_k, past_v, what=what)  # "returned None — finish TODO n"
    if not isinstance(result, tuple) or len(result) != 3:
        fail(f"{what} returned {type(result).__name__}, expected (output, k, v) — {todo_in(type(module).forward)}")
    return result


def run_with_cache(step, module, x: np.ndarray, past_len: int, name: str) -> np.ndarray:
    """The module over ``x``: a prefill of ``past_len`` tokens, then the rest against its keys and values."""
    total = x.shape[1]
    k = v = _empty_cache()[0]
    outputs = []
    if past_len:
        first, k, v = _cached_call(step, module, x[:, :past_len], k, v, f"{name}: prefill of {past_len} tokens")
        k_shape = [int(d) for d in k.shape]
        if k_shape != [1, SMALL["n_head"], past_len, HEAD_DIM]:
            fail(f"after a prefill of {past_len} tokens, {name} returns keys of shape {k_shape}, expected "
                 f"[1, H, {past_len}, D] = [1, {SMALL['n_head']}, {past_len}, {HEAD_DIM}] — {todo_in(type(module).forward)}")
        outputs.append(to_numpy(first))
    rest, k, v = _cached_call(step, module, x[:, past_len:], k, v, f"{name}: {total - past_len} tokens after {past_len} cached")
    k_shape = [int(d) for d in k.shape]
    if k_shape != [1, SMALL["n_head"], total, HEAD_DIM]:
        fail(f"after {past_len} cached and {total - past_len} new tokens, {name} returns keys of shape {k_shape}, "
             f"expected [1, H, {total}, D]: the past keys, then the new ones — {todo_in(type(module).forward)}")
    outputs.append(to_numpy(rest))
    return np.concatenate(outputs, axis=1)


def check_attention(step, past_len: int) -> None:
    """The learner's CachedSelfAttention, a prefill of ``past_len`` tokens then the rest, against
    GPT2Attention over all 7."""
    hf = hf_config(**SMALL)
    reference = seeded(GPT2Attention(hf, layer_idx=0), seed=15)
    attention = build(attribute(step, "CachedSelfAttention"), solution(1).GPT2Config.from_hf(hf))
    state = to_max_state(reference)
    load_weights(attention, state)
    x = hidden_states(1, 7, SMALL["n_embd"], seed=4)
    got = run_with_cache(step, attention, x, past_len, "CachedSelfAttention")
    wrong = [Mistake("the new keys and values come before the cached ones; the mask expects the past first: "
                     "concat([past_k, k])", 2, lambda: cached_attention(state, x, past_len, new_first=True))]
    expected = run_masked(reference, x)
    if not _close(got, expected) and matching_mistake(got, wrong) is None:
        test_mask_with_a_cache(step)  # the attention adds its mask (TODO 1): a wrong one is named first
    assert_close(got, expected,
                 f"cached attention ({past_len} cached, then {7 - past_len} new) vs GPT2Attention over all 7",
                 mistakes=wrong, step=step)


@pytest.mark.parametrize("past_len", [0, 4, 6])
def test_cached_attention_matches_attention_over_the_whole_sequence(step, past_len):
    """attention over the new tokens after past_len cached ones equals attention over the whole sequence"""
    check_attention(step, past_len)


# --- TODO 3: the block -------------------------------------------------------------------------


def block_mistakes(reference: GPT2Block, x: np.ndarray) -> list[Mistake]:
    """The common wrong cached blocks, wired from the reference's own sublayers (the MLP branch as given)."""
    def attn(h):
        return run_masked(reference.attn, h)

    def then_mlp(h):
        return h + run(reference.mlp, run(reference.ln_2, h))

    return [
        Mistake("the attention's output replaces x instead of being added to it: x = x + attn_out", 3,
                lambda: then_mlp(attn(run(reference.ln_1, x)))),
        Mistake("the attention reads x, not ln_1(x)", 3, lambda: then_mlp(x + attn(x))),
        Mistake("the MLP branch is left out: after the attention, residual(x, self.ln_2, self.mlp)", 3,
                lambda: x + attn(run(reference.ln_1, x))),
    ]


def check_block(step) -> None:
    """The learner's CachedBlock, a prefill of 4 tokens then 3, against GPT2Block over all 7."""
    hf = hf_config(**SMALL)
    reference = seeded(GPT2Block(hf, layer_idx=0), seed=16)
    block = build(attribute(step, "CachedBlock"), solution(1).GPT2Config.from_hf(hf))
    load_weights(block, to_max_state(reference))
    x = hidden_states(1, 7, SMALL["n_embd"], seed=5)
    got, expected, wrong = run_with_cache(step, block, x, 4, "CachedBlock"), run_masked(reference, x), block_mistakes(reference, x)
    if not _close(got, expected) and matching_mistake(got, wrong) is None:
        check_attention(step, 4)  # the block calls the attention: a wrong one is named first
    assert_close(got, expected, "cached block (4 cached, then 3 new) vs GPT2Block over all 7", mistakes=wrong, step=step)


def _close(got: np.ndarray, expected: np.ndarray) -> bool:
    """Whether ``got`` matches ``expected`` within the harness's tolerance."""
    return matching_mistake(got, [Mistake("", 0, lambda: expected)]) is not None


def test_cached_block_matches_the_block(step):
    """a block over the new tokens after cached ones equals GPT2Block over the whole sequence"""
    check_block(step)


# --- TODO 4: the model, eagerly -------------------------------------------------------------------

EAGER_IDS = [1, 2, 3, 4]  # a prefill of the first 3, then the 4th decoded against their cache
_eager: dict[str, str | None] = {}


def eager_logits(model, ids: list[int], layers: int, heads: int, head_dim: int, vocab_size: int,
                 heads_name: str = "H") -> np.ndarray:
    """A learner's cached model run eagerly: a prefill of all of ``ids`` but the last, then the last decoded
    against their cache; the two logit rows. Its cache is ``layers`` key (and value) tensors
    ``[1, heads, P, head_dim]``: step 15's GPT-2 (H heads) and step 24's Llama (K key/value heads) alike."""
    what = f"{type(model).__name__}.forward(ids, past_keys, past_values)"
    keys = values = _empty_cache(layers, heads, head_dim)
    prefill, rows = len(ids) - 1, []
    for new, cached in ((ids[:prefill], 0), (ids[prefill:], prefill)):
        result = call(model, from_numpy(np.array([new], dtype=np.int64)), keys, values, what=what)
        if not isinstance(result, tuple | list) or len(result) != 3:
            fail(f"{what} returned {type(result).__name__}, expected (logits, keys, values) — {todo_in(type(model).forward)}")
        logits, keys, values = result
        shape = [int(d) for d in logits.shape]
        if shape != [1, vocab_size]:
            fail(f"{what} gave logits of shape {shape}, expected [batch, vocab_size] = [1, {vocab_size}] "
                 f"(the last position only) — {todo_in(type(model).forward)}")
        total = cached + len(new)
        expected = [1, heads, total, head_dim]
        if len(keys) != layers or [int(d) for d in keys[0].shape] != expected:
            fail(f"{what} should return one [1, {heads_name}, {total}, D] = {expected} key tensor per layer after "
                 f"{total} tokens — {todo_in(type(model).forward)}")
        rows.append(to_numpy(logits)[0])
    return np.stack(rows)


def hf_logits(reference, ids: list[int], positions: list[int] | None = None) -> np.ndarray:
    """Hugging Face's logits at every position, for ``ids`` at ``positions`` (0, 1, … by default)."""
    kwargs = {} if positions is None else dict(position_ids=torch.tensor([positions]))
    with torch.no_grad():
        return reference(torch.tensor([ids]), **kwargs).logits[0].numpy()


def model_mistakes(reference, ids: list[int], prefill: int) -> list[Mistake]:
    """The common wrong cached models on ``ids``: a prefill of ``prefill`` tokens, then one per call."""
    restarted = list(range(prefill)) + [0] * (len(ids) - prefill)  # each decoded token at position 0
    return [
        Mistake("the positions restart at 0 with every call, so the prefill is right and every decoded token is "
                "wrong: a decoded token sits after the cached ones; embed it at past_len = past_keys[0].shape[2]", 4,
                lambda: hf_logits(reference, ids, restarted)[prefill - 1:]),
    ]


def compare_logits(step, got: np.ndarray, reference, ids: list[int], prefill: int, what: str) -> None:
    """Logits with the cache (the prefill's last row, then one per decoded token) against Hugging Face's
    over all ``ids``. A mismatch names a common mistake, or a wrong layer below (the block, the
    attention), or says where the error starts."""
    expected, wrong = hf_logits(reference, ids)[prefill - 1:], model_mistakes(reference, ids, prefill)
    if _close(got, expected) or matching_mistake(got, wrong) is not None:
        assert_close(got, expected, what, mistakes=wrong, step=step)
        return
    check_block(step)  # the model runs the blocks, which run the attention: a wrong one is named first
    tolerance = ATOL + RTOL * np.abs(expected)
    first = int(np.flatnonzero(~(np.abs(got - expected) <= tolerance).all(axis=1))[0])
    starts = ("the error starts at the prefill" if first == 0 else f"the prefill's logits agree, and the error starts "
              f"at decoded token {first} (position {prefill + first - 1}, with {prefill + first - 1} cached)")
    try:
        assert_close(got, expected, what)
    except pytest.fail.Exception as mismatch:
        fail(f"{mismatch}; {starts} — {todo_in(attribute(step, 'CachedGPT2LMHeadModel').forward)}")


def check_model_eagerly(step, reference) -> None:
    """The learner's cached model, eagerly, against Hugging Face's on 4 tokens; checked once per run."""
    if step.__file__ in _eager:
        if _eager[step.__file__]:
            fail(_eager[step.__file__])
        return
    config = solution(1).GPT2Config.from_hf(reference.config)
    model = build(attribute(step, "CachedGPT2LMHeadModel"), config)
    load_weights(model, to_max_state(reference))
    try:
        got = eager_logits(model, EAGER_IDS, config.n_layer, config.n_head, config.n_embd // config.n_head,
                           config.vocab_size)
        compare_logits(step, got, reference, EAGER_IDS, 3, "eager logits with the cache (a prefill of 3 tokens, "
                       "then 1) vs GPT2LMHeadModel over all 4")
    except pytest.fail.Exception as failure:
        _eager[step.__file__] = str(failure)
        raise
    _eager[step.__file__] = None


def test_cached_model_eagerly(step):
    """the cached model, run eagerly, gives Hugging Face's logits for a prefill and a decoded token"""
    check_model_eagerly(step, generation_model())


def test_cached_model_of_one_layer_eagerly(step):
    """a cached model of one block, run eagerly, gives Hugging Face's logits too: layer 0's cache is the only one"""
    check_model_eagerly(step, generation_model())  # the model of two layers first, with its named ✗
    reference = generation_model(n_layer=1)
    config = solution(1).GPT2Config.from_hf(reference.config)
    model = build(attribute(step, "CachedGPT2LMHeadModel"), config)
    load_weights(model, to_max_state(reference))
    got = eager_logits(model, EAGER_IDS, 1, config.n_head, config.n_embd // config.n_head, config.vocab_size)
    compare_logits(step, got, reference, EAGER_IDS, 3, "eager logits with the cache of a one-layer model (a prefill "
                   "of 3 tokens, then 1) vs GPT2LMHeadModel over all 4")


# --- the compiled model ------------------------------------------------------------------------------


class NoNewGraphs:
    """While active, MAX compiling or loading any graph fails the check at once, naming ``doing``.

    Every graph MAX compiles or loads (``Module.compile``, or an eager op MAX cannot
    interpret) goes through ``InferenceSession.compile_reusing_mefs``. The failure comes
    before the compile, which would take seconds warm and minutes cold, for every call.
    """

    def __init__(self, step):
        self.step, self.doing = step, "a call"

    @contextlib.contextmanager
    def watching(self):
        from max.engine import InferenceSession

        original = InferenceSession.compile_reusing_mefs

        def refuse(session, *args, **kwargs):
            fail(f"{self.doing} compiled a new MAX graph: the cached model is compiled once, when CachedNextLogits is "
                 f"built, and every call must reuse that graph, self.run (a new graph takes seconds, or minutes "
                 f"cold, on every token) — CachedNextLogits is given code in {shown(self.step.__file__)}: keep it "
                 f"as the stub has it")

        InferenceSession.compile_reusing_mefs = refuse
        try:
            yield self
        finally:
            InferenceSession.compile_reusing_mefs = original


def compile_cached(step, reference) -> tuple[object, int]:
    """The learner's cached model with ``reference``'s weights, compiled by the step's given code,
    once it passes the eager check (a wrong model is never compiled: that would take minutes);
    and the number of graphs MAX compiled or loaded to build it."""
    check_model_eagerly(step, generation_model())
    config = solution(1).GPT2Config.from_hf(reference.config)
    model = build(attribute(step, "CachedGPT2LMHeadModel"), config)
    load_weights(model, to_max_state(reference))
    with counting_compiles() as loads:
        next_logits = call(attribute(step, "CachedNextLogits"), model, config)
    return next_logits, len(loads)


def cached_next_logits(step, reference):
    """:func:`compile_cached`'s model, built once per test run (compiling costs seconds)."""
    return _cached(step, reference)[0]


def _cached(step, reference) -> tuple[object, int]:
    if step.__file__ not in _compiled:
        _compiled[step.__file__] = compile_cached(step, reference)
    return _compiled[step.__file__]


def teacher_forced(step, next_logits, ids: list[int], prefill: int) -> np.ndarray:
    """The compiled ``next_logits`` fed ``ids``: a prefill of ``prefill`` tokens, then one token per call; the
    logit rows, stacked. Any graph compiled along the way fails the check at once."""
    guard = NoNewGraphs(step)
    with guard.watching():
        guard.doing = f"the prefill of {prefill} tokens"
        got = [call(next_logits, ids[:prefill], what=guard.doing)]
        for end in range(prefill + 1, len(ids) + 1):
            guard.doing = f"the decode step with {end - 1} cached tokens"
            got.append(call(next_logits, ids[:end], what=guard.doing))
    return np.stack(got)


def greedy_three_ways(step, cached, uncached, reference, prompts, *, n_positions: int, eos_id: int) -> None:
    """Greedy tokens, 32 after each prompt: with the cache (compiling nothing), without it (step 13's graph), and
    Hugging Face's ``generate`` on ``reference`` must agree."""
    generation, guard = solution(13), NoNewGraphs(step)
    for prompt in prompts:
        kwargs = dict(n_positions=n_positions, eos_id=eos_id, temperature=0.0)
        guard.doing = f"greedy decoding after the prompt {prompt}"
        with guard.watching():
            with_cache = list(generation.generate(cached, prompt, 32, **kwargs))
        without = list(generation.generate(uncached, prompt, 32, **kwargs))
        if with_cache != without:
            at = next(i for i, (a, b) in enumerate(zip(with_cache, without)) if a != b)
            fail(f"prompt {prompt}: with the cache the greedy tokens part from those without it at token {at}: "
                 f"{with_cache[at:at + 4]} vs {without[at:at + 4]}")
        expected, scores = hf_greedy(reference, prompt, 32, eos_id=eos_id)
        if note := greedy_agreement(with_cache, expected, scores, f"prompt {prompt}"):
            print(note)


def test_cached_logits_match_the_whole_sequence(step):
    """teacher-forced, the logits with the cache equal the logits without it at every position"""
    reference = generation_model()
    next_logits = cached_next_logits(step, reference)
    ids = np.random.default_rng(15).integers(0, GEN["vocab_size"], size=40).tolist()
    compare_logits(step, teacher_forced(step, next_logits, ids, 5), reference, ids, 5,
                   "logits with the cache (prefill 5, then 1 token per step) vs GPT2LMHeadModel over all 40")


def test_greedy_with_the_cache_matches_without_it(step, record_property):
    """greedy tokens with the cache equal those without it and Hugging Face's generate"""
    reference = generation_model()
    cached = cached_next_logits(step, reference)
    generation = solution(13)
    model = build(solution(11).GPT2LMHeadModel, solution(1).GPT2Config.from_hf(reference.config))
    load_weights(model, to_max_state(reference))
    uncached = generation.compile_next_logits(model)
    greedy_three_ways(step, cached, uncached, reference, ([7, 1, 30], [11, 52, 3, 90, 17, 4, 60]),
                      n_positions=GEN["n_positions"], eos_id=EOS)
    record_property("greedy", "2 prompts × 32 tokens: cached = uncached = Hugging Face")


def test_overflowing_the_context_is_a_clear_error(step):
    """feeding more than n_positions tokens raises a clear ValueError"""
    next_logits = cached_next_logits(step, generation_model())
    ids = list(range(GEN["n_positions"] + 1))
    try:
        next_logits(ids)
    except ValueError as error:
        if "n_positions" not in str(error):
            fail(f"{GEN['n_positions'] + 1} tokens raised ValueError({str(error)!r}), which does not name n_positions")
        return
    except Exception as error:  # noqa: BLE001
        fail(f"{GEN['n_positions'] + 1} tokens raised {type(error).__name__}: {error}; expected a clear ValueError")
    fail(f"{GEN['n_positions'] + 1} tokens were accepted by a model that learned {GEN['n_positions']} positions")


def test_decoding_does_not_recompile(step):
    """one graph is compiled for the cached model, and none while decoding"""
    next_logits, loads = _cached(step, generation_model())
    if loads != 1:
        fail(f"building CachedNextLogits loaded {loads} graphs, expected 1 (one graph for prefill and decode) — "
             f"CachedNextLogits is given code in {shown(step.__file__)}: keep it as the stub has it")
    guard = NoNewGraphs(step)
    for prompt in ([1, 2, 3], [4, 5, 6, 7, 8, 9]):  # the second one starts over: a prefill of another length
        guard.doing = f"decoding 20 tokens after the prompt {prompt}"
        with guard.watching():
            list(solution(13).generate(next_logits, prompt, 20, n_positions=GEN["n_positions"], temperature=0.0))


def test_a_decode_step_feeds_only_its_new_token(step):
    """a call that adds one id to the last call's runs the graph on that id alone, with the cache

    Anything else (the same ids again, fewer, or others) starts over with a prefill of them all."""
    next_logits = cached_next_logits(step, generation_model())
    run, fed = next_logits.run, []

    class Recording:  # the compiled graph, noting the new ids and cached tokens of each run
        engine_model = None

        @staticmethod
        def execute(ids, *cache):
            fed.append((ids.shape[1], cache[0].shape[2]))
            return run.engine_model.execute(ids, *cache)

    Recording.engine_model, next_logits.run = Recording, Recording
    calls = [[1, 2, 3], [1, 2, 3, 9], [1, 2, 3, 9, 5], [1, 2, 3, 9, 5], [1, 2, 3], [4, 2]]
    expected = [(3, 0), (1, 3), (1, 4), (5, 0), (3, 0), (2, 0)]  # (new ids, cached tokens) for each call
    try:
        next_logits.reset()
        for at, (ids, (new, past)) in enumerate(zip(calls, expected)):
            call(next_logits, ids, what=f"the call with ids {ids}")
            ran = fed[at:] or [("no", "no")]
            if ran != [(new, past)]:
                fail(f"after the calls {calls[:at]}, the call with ids {ids} ran the graph on {ran[0][0]} new ids with "
                     f"{ran[0][1]} cached, expected {new} with {past} — CachedNextLogits is given code in "
                     f"{shown(step.__file__)}: keep it as the stub has it")
    finally:
        next_logits.run = run
