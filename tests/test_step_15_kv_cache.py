"""Step 15 · the KV cache against Hugging Face's GPT-2, run without a cache.

* The cached attention runs eagerly first: a prefill over the first tokens, then
  the rest against its keys and values, compared with Hugging Face's
  ``GPT2Attention`` over the whole sequence under the causal mask.
* Then the compiled cached model (one graph, symbolic ``seq`` and ``past``) is
  teacher-forced through a 40-token sequence: a prefill of 5 tokens, then one
  token per call. The logits at every position must match
  ``GPT2LMHeadModel`` run on the whole sequence at once, which uses no cache.
* Greedy generation with the cache must be token-identical to generation without
  it (step 13's compiled graph) and to ``GPT2LMHeadModel.generate``.
* Decoding must not compile anything: MAX loads exactly one graph, when the cached
  model is compiled, and none while tokens are generated.

Tolerance: the harness default, 1e-4 + 1e-4·|expected|. Measured worst |Δ| of
the teacher-forced logits on solutions/: see the ✓ line (about 1e-6).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

from course.runtime import from_numpy, to_numpy
from harness import assert_close, attribute, build, call, fail, greedy_agreement, load_weights, solution, todo_in
from reference import GEN, SMALL, generation_model, hf_config, hf_greedy, hidden_states, run_masked, seeded, to_max_state

pytestmark = pytest.mark.step15

EOS = GEN["vocab_size"] - 1
_compiled: dict[str, object] = {}


def test_mask_with_a_cache(step):
    """the cached attention's mask is step 02's mask for every past_len"""
    attention = build(attribute(step, "CachedSelfAttention"), solution(1).GPT2Config.from_hf(hf_config(**SMALL)))
    for seq_len, past_len in [(5, 0), (1, 7), (3, 4)]:
        what = f"CachedSelfAttention.mask({seq_len}, {past_len})"
        got = call(attention.mask, seq_len, past_len, what=what)
        expected = to_numpy(solution(2).causal_mask(seq_len, past_len))
        assert_close(to_numpy(got), expected, f"{what} vs causal_mask({seq_len}, {past_len})")


def _attention_output(step, attention, x, past_k, past_v, what):
    result = call(attention, from_numpy(x), past_k, past_v, what=what)
    if not isinstance(result, tuple) or len(result) != 3:
        fail(f"{what} returned {type(result).__name__}, expected (output, k, v) — {todo_in(type(attention))}")
    return result


@pytest.mark.parametrize("past_len", [0, 4, 6])
def test_cached_attention_matches_attention_over_the_whole_sequence(step, past_len):
    """attention over the new tokens after past_len cached ones equals attention over the whole sequence"""
    hf = hf_config(**SMALL)
    reference = seeded(GPT2Attention(hf, layer_idx=0), seed=15)
    attention = build(attribute(step, "CachedSelfAttention"), solution(1).GPT2Config.from_hf(hf))
    load_weights(attention, to_max_state(reference))
    x = hidden_states(1, 7, SMALL["n_embd"], seed=4)
    head_dim = SMALL["n_embd"] // SMALL["n_head"]
    empty = from_numpy(np.zeros((1, SMALL["n_head"], 0, head_dim), dtype=np.float32))
    k = v = empty
    if past_len:
        first, k, v = _attention_output(step, attention, x[:, :past_len], empty, empty, f"prefill of {past_len} tokens")
        k_shape = [int(d) for d in k.shape]
        if k_shape != [1, SMALL["n_head"], past_len, head_dim]:
            fail(f"after a prefill of {past_len} tokens the keys have shape {k_shape}, expected [1, H, {past_len}, D] — {todo_in(type(attention).forward)}")
    rest, k, v = _attention_output(step, attention, x[:, past_len:], k, v, f"{7 - past_len} tokens after {past_len} cached")
    expected = run_masked(reference, x)
    got = np.concatenate([to_numpy(first), to_numpy(rest)], axis=1) if past_len else to_numpy(rest)
    assert_close(got, expected, f"cached attention ({past_len} cached, then {7 - past_len} new) vs GPT2Attention over all 7")


def eager_prefill(model, config) -> None:
    """Runs the model once eagerly on 3 tokens, so that a missing piece is named before compiling."""
    head_dim = config.n_embd // config.n_head
    empty = [from_numpy(np.zeros((1, config.n_head, 0, head_dim), dtype=np.float32)) for _ in range(config.n_layer)]
    what = "CachedGPT2LMHeadModel.forward(ids, past_keys, past_values)"
    result = call(model, from_numpy(np.array([[1, 2, 3]], dtype=np.int64)), empty, empty, what=what)
    if not isinstance(result, tuple | list) or len(result) != 3:
        fail(f"{what} returned {type(result).__name__}, expected (logits, keys, values) — {todo_in(type(model).forward)}")
    logits, keys, values = result
    shape = [int(d) for d in logits.shape]
    if shape != [1, config.vocab_size]:
        fail(f"{what} gave logits of shape {shape}, expected [batch, vocab_size] = [1, {config.vocab_size}] (the last position only) — {todo_in(type(model).forward)}")
    if len(keys) != config.n_layer or [int(d) for d in keys[0].shape] != [1, config.n_head, 3, head_dim]:
        fail(f"{what} should return one [1, H, 3, D] key tensor per layer after 3 tokens — {todo_in(type(model).forward)}")


def compile_cached(step, reference):
    """The learner's cached model with ``reference``'s weights, compiled by the step's given code."""
    config = solution(1).GPT2Config.from_hf(reference.config)
    model = build(attribute(step, "CachedGPT2LMHeadModel"), config)
    load_weights(model, to_max_state(reference))
    eager_prefill(model, config)
    return call(attribute(step, "CachedNextLogits"), model, config)


def cached_next_logits(step, reference):
    """:func:`compile_cached`, once per test run (compiling costs seconds)."""
    if step.__file__ not in _compiled:
        _compiled[step.__file__] = compile_cached(step, reference)
    return _compiled[step.__file__]


def test_cached_logits_match_the_whole_sequence(step):
    """teacher-forced, the logits with the cache equal the logits without it at every position"""
    reference = generation_model()
    next_logits = cached_next_logits(step, reference)
    ids = np.random.default_rng(15).integers(0, GEN["vocab_size"], size=40).tolist()
    with torch.no_grad():
        expected = reference(torch.tensor([ids])).logits[0].numpy()
    got = [call(next_logits, ids[:5], what="the prefill of 5 tokens")]
    for end in range(6, len(ids) + 1):
        got.append(call(next_logits, ids[:end], what=f"decode step with {end - 1} cached tokens"))
    assert_close(np.stack(got), expected[4:], "logits with the cache (prefill 5, then 1 token per step) vs GPT2LMHeadModel over all 40")


def test_greedy_with_the_cache_matches_without_it(step, record_property):
    """greedy tokens with the cache equal those without it and Hugging Face's generate"""
    reference = generation_model()
    cached = cached_next_logits(step, reference)
    generation = solution(13)
    model = build(solution(11).GPT2LMHeadModel, solution(1).GPT2Config.from_hf(reference.config))
    load_weights(model, to_max_state(reference))
    uncached = generation.compile_next_logits(model)
    for prompt in ([7, 1, 30], [11, 52, 3, 90, 17, 4, 60]):
        kwargs = dict(n_positions=GEN["n_positions"], eos_id=EOS, temperature=0.0)
        with_cache = list(generation.generate(cached, prompt, 32, **kwargs))
        without = list(generation.generate(uncached, prompt, 32, **kwargs))
        if with_cache != without:
            at = next(i for i, (a, b) in enumerate(zip(with_cache, without)) if a != b)
            fail(f"prompt {prompt}: with the cache the greedy tokens part from those without it at token {at}: {with_cache[at:at + 4]} vs {without[at:at + 4]}")
        expected, scores = hf_greedy(reference, prompt, 32, eos_id=EOS)
        if note := greedy_agreement(with_cache, expected, scores, f"prompt {prompt}"):
            print(note)
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


def test_decoding_does_not_recompile(step, monkeypatch):
    """one graph is compiled for the cached model, and none while decoding"""
    from max.engine import InferenceSession

    loads = []  # each graph MAX compiles goes through this method (Module.compile -> CompiledCallable)
    original = InferenceSession.compile_reusing_mefs
    monkeypatch.setattr(InferenceSession, "compile_reusing_mefs", lambda self, *a, **k: loads.append(1) or original(self, *a, **k))
    next_logits = compile_cached(step, generation_model(seed=99))  # new weights: built and compiled again
    compiled = len(loads)
    tokens = list(solution(13).generate(next_logits, [1, 2, 3], 20, n_positions=GEN["n_positions"], temperature=0.0))
    prompt_again = list(solution(13).generate(next_logits, [4, 5, 6, 7, 8, 9], 20, n_positions=GEN["n_positions"], temperature=0.0))
    if compiled != 1:
        fail(f"compiling the cached model loaded {compiled} graphs, expected 1 (one graph for prefill and decode)")
    if len(loads) != compiled:
        fail(f"decoding {len(tokens) + len(prompt_again)} tokens loaded {len(loads) - compiled} more graphs: a symbolic size became fixed")
