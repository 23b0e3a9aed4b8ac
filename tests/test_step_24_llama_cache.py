"""Step 24 · the Llama's KV cache against Hugging Face's Llama, run without a cache.

As in step 15, each part is checked eagerly before anything is compiled, from the bottom
up, so that a mistake is named with its TODO in seconds:

* ``kv_bytes_per_token`` (TODO 1) at SmolLM2-135M's sizes and the small config's;
* the cached attention (TODO 2): a prefill over the first tokens, then the rest against
  its keys and values, compared with Hugging Face's ``LlamaAttention`` over the whole
  sequence (given ``LlamaModel``'s RoPE tables and mask), with 1, 2 and 4 key/value heads
  for 4 query heads and at SmolLM2's 9/3. The returned cache must hold the key/value
  heads, not their repeats;
* the cached layer (TODO 3) the same way, against ``LlamaDecoderLayer``;
* the cached model (TODO 4): a prefill of 3 tokens, then 1 decoded token, against
  ``LlamaForCausalLM`` on all 4, with the head tied and untied.

Then the compiled model (step 15's given ``CachedNextLogits`` with the Llama's cache) is
teacher-forced through 40 tokens: its logits at every position must match
``LlamaForCausalLM`` on the whole sequence, and decoding must compile nothing. Greedy
generation with the cache must equal generation without it (step 13's graph of step 22's
model) and ``LlamaForCausalLM.generate``, for 3 prompts × 32 tokens.

The common mistakes are computed from the same weights: the rotation restarting at
position 0 for the new tokens (the cache offset ignored in RoPE), the new keys put
before the cached ones, a layer wired wrongly.

Tolerance: the harness default, 1e-4 + 1e-4·|expected|. Measured worst |Δ| on solutions/:
see the ✓ lines (about 1e-6 small, 1e-5 at SmolLM2's widths).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaDecoderLayer

from course.check.hints import shown
from course.runtime import from_numpy, to_numpy
from harness import (
    Mistake, assert_close, attribute, build, call, counting_compiles, fail, llama_twin, load_weights,
    matching_mistake, solution, todo_in,
)
from reference import GEN_LLAMA, LLAMA_SMALL, SMOLLM2_135M, hidden_states, llama_hf_config, seeded
from reference import to_max_state
from test_step_15_kv_cache import (
    _cached_call, _close, attend_in_two_calls, eager_logits, greedy_three_ways, hf_logits, teacher_forced,
)
from test_step_21_gqa import heads, hf_attention, repeated
from test_step_22_llama_model import LAYER_MISTAKES, _run, context, layer_variants

pytestmark = pytest.mark.step24

#: Attention: 4 query heads with 1, 2 or 4 key/value heads; SmolLM2's 9 sharing 3.
CONFIGS = {f"small-kv{kv}": dict(LLAMA_SMALL, num_key_value_heads=kv) for kv in (1, 2, 4)}
CONFIGS["smollm2-135m"] = dict(SMOLLM2_135M, num_hidden_layers=1)
EOS = GEN_LLAMA["vocab_size"] - 1
OFFSET = ("the new tokens are rotated as if they sat at positions 0, 1, …: the cache offset is ignored in RoPE, so "
          "every new query sees the cached keys at the wrong distance; rotate them for positions P … P + T - 1 "
          "with rope_tables(…, past_len=P), P = past_k.shape[2]")
_compiled: dict[str, tuple[object, int]] = {}


# --- TODO 1: the cache's size ---------------------------------------------------------------


def test_kv_bytes_per_token(step):
    """the cache grows by 2 × layers × key/value heads × head_dim × 4 bytes a token"""
    fn = attribute(step, "kv_bytes_per_token")
    for name, sizes in {"SmolLM2-135M": SMOLLM2_135M, "the small config": GEN_LLAMA}.items():
        config = solution(17).LlamaConfig(**sizes)
        got = call(fn, config, what=f"kv_bytes_per_token({name})")
        head_dim = sizes["hidden_size"] // sizes["num_attention_heads"]
        layers, kv, h = sizes["num_hidden_layers"], sizes["num_key_value_heads"], sizes["num_attention_heads"]
        expected = 2 * layers * kv * head_dim * 4
        if got == expected:
            continue
        why = {2 * layers * h * head_dim * 4: f"it counts the {h} query heads; the cache keeps the {kv} key/value "
                                               f"heads (grouped-query attention's saving)",
               layers * kv * head_dim * 4: "it counts the keys only; the values are cached too (2 tensors a layer)",
               2 * kv * head_dim * 4: "it counts one layer; every layer has its own cache",
               2 * layers * kv * head_dim: "it counts numbers, not bytes: each float32 is bytes_per_value = 4 bytes"}
        fail(f"kv_bytes_per_token({name}) is {got!r}, expected {expected:,} (2 × {layers} layers × {kv} key/value "
             f"heads × {head_dim} × 4 bytes)" + (f": {why[got]}" if got in why else "") + f" — {todo_in(fn)}")


# --- TODO 2: the attention ---------------------------------------------------------------------


def _tables(head_dim: int, theta: float, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    frequencies = theta ** (-2.0 * np.arange(head_dim // 2) / head_dim)
    angles = positions[:, None] * frequencies[None, :]
    angles = np.concatenate([angles, angles], axis=-1)
    return np.cos(angles), np.sin(angles)


def cached_reference(x: np.ndarray, state: dict, sizes: dict, past_len: int, *, restart: bool = False,
                     new_first: bool = False) -> np.ndarray:
    """Llama's attention in float64 over x [1, T, C]: the first ``past_len`` tokens as a prefill, then the
    rest against their keys and values. ``restart``: the new tokens rotated from position 0 (a mistake);
    ``new_first``: the new keys and values put before the cached ones (a mistake)."""
    n_head, n_kv = sizes["num_attention_heads"], sizes["num_key_value_heads"]
    head_dim, total = sizes["hidden_size"] // n_head, x.shape[1]
    x = x.astype(np.float64)
    q, k, v = (heads(x @ state[f"{name}.weight"].T, head_dim) for name in ("q_proj", "k_proj", "v_proj"))
    positions = np.arange(total, dtype=np.float64)
    if restart:
        positions[past_len:] -= past_len
    cos, sin = _tables(head_dim, sizes["rope_theta"], positions)

    def rotate(t):
        t1, t2 = np.split(t, 2, axis=-1)
        return t * cos + np.concatenate([-t2, t1], axis=-1) * sin

    q, k = rotate(q), rotate(k)
    k, v = repeated(k, n_head // n_kv), repeated(v, n_head // n_kv)
    y = attend_in_two_calls(q, k, v, past_len, new_first)
    y = y.transpose(0, 2, 1, 3).reshape(*x.shape[:2], n_head * head_dim)
    return y @ state["o_proj.weight"].T


def run_with_cache(step, module, x: np.ndarray, past_len: int, sizes: dict, name: str) -> np.ndarray:
    """The module over ``x``: a prefill of ``past_len`` tokens, then the rest against its keys and values;
    the cache it returns must hold ``num_key_value_heads`` heads."""
    n_kv, head_dim = sizes["num_key_value_heads"], sizes["hidden_size"] // sizes["num_attention_heads"]
    k = v = from_numpy(np.zeros((1, n_kv, 0, head_dim), dtype=np.float32))
    outputs, total = [], x.shape[1]
    for start, end in ((0, past_len), (past_len, total)):
        if start == end:
            continue
        what = f"{name}: {end - start} tokens after {start} cached"
        out, k, v = _cached_call(step, module, x[:, start:end], k, v, what)
        shape = [int(d) for d in k.shape]
        if shape != [1, n_kv, end, head_dim]:
            more = (f": the cache holds the repeated heads; keep the {n_kv} key/value heads (cache k before "
                    f"repeat_kv), which is what grouped-query attention saves"
                    if shape == [1, sizes["num_attention_heads"], end, head_dim] else "")
            fail(f"after {what}, {name} returns keys of shape {shape}, expected [1, K, {end}, D] = "
                 f"[1, {n_kv}, {end}, {head_dim}]{more} — {todo_in(type(module).forward)}")
        outputs.append(to_numpy(out))
    return np.concatenate(outputs, axis=1)


def check_attention(step, name: str, past_len: int) -> None:
    sizes = CONFIGS[name]
    hf = llama_hf_config(**sizes)
    reference = seeded(LlamaAttention(hf, layer_idx=0), seed=24)
    mine = llama_twin(step, "CachedLlamaAttention", reference, hf)
    state, total = to_max_state(reference), 7
    x = hidden_states(1, total, sizes["hidden_size"], seed=past_len)
    got = run_with_cache(step, mine, x, past_len, sizes, "CachedLlamaAttention")
    wrong = [Mistake(OFFSET, 2, lambda: cached_reference(x, state, sizes, past_len, restart=True)),
             Mistake("the new keys and values come before the cached ones; the mask expects the past first: "
                     "concat([past_k, k])", 2, lambda: cached_reference(x, state, sizes, past_len, new_first=True))]
    assert_close(got, hf_attention(reference, hf, x),
                 f"cached attention ({past_len} cached, then {total - past_len} new; {name}) vs LlamaAttention over "
                 f"all {total}", mistakes=wrong, step=step)


@pytest.mark.parametrize(("name", "past_len"), [(name, 5) for name in CONFIGS] + [("small-kv2", 0)])
def test_cached_attention_matches_attention_over_the_whole_sequence(step, name, past_len):
    """attention over new tokens after cached ones equals LlamaAttention over the whole sequence"""
    check_attention(step, name, past_len)


# --- TODO 3: the layer --------------------------------------------------------------------------


def check_layer(step) -> None:
    hf = llama_hf_config(**LLAMA_SMALL)
    reference = seeded(LlamaDecoderLayer(hf, layer_idx=0), seed=25)
    mine = llama_twin(step, "CachedLlamaDecoderLayer", reference, hf)
    x = hidden_states(1, 7, LLAMA_SMALL["hidden_size"], seed=9)
    variants = layer_variants(reference, *context(hf, 7))
    got, expected = run_with_cache(step, mine, x, 4, LLAMA_SMALL, "CachedLlamaDecoderLayer"), _run(variants["right"], x)
    wrong = [Mistake(LAYER_MISTAKES[name], 3, lambda name=name: _run(variants[name], x))
             for name in ("no attention residual", "no mlp residual", "one norm", "norms swapped")]
    if not _close(got, expected) and matching_mistake(got, wrong) is None:
        check_attention(step, "small-kv2", 4)  # the layer calls the attention: a wrong one is named first
    assert_close(got, expected, "cached layer (4 cached, then 3 new) vs LlamaDecoderLayer over all 7",
                 mistakes=wrong, step=step)


def test_cached_layer_matches_the_layer(step):
    """a layer over new tokens after cached ones equals LlamaDecoderLayer over the whole sequence"""
    check_layer(step)


# --- TODO 4: the model, eagerly ----------------------------------------------------------------

EAGER_IDS = [5, 17, 42, 8]  # a prefill of the first 3, then the 4th decoded against their cache


def generation_llama(tied: bool = True, seed: int = 24) -> LlamaForCausalLM:
    """The small random Llama the generation checks use."""
    model = LlamaForCausalLM(llama_hf_config(**dict(GEN_LLAMA, tie_word_embeddings=tied)))
    model.generation_config.eos_token_id = model.generation_config.pad_token_id = EOS
    return seeded(model, seed=seed).eval()


def model_mistakes(reference, ids: list[int], prefill: int) -> list[Mistake]:
    """The common wrong cached models on ``ids``: a prefill of ``prefill`` tokens, then one per call."""
    import copy

    restarted = list(range(prefill)) + [0] * (len(ids) - prefill)  # each decoded token rotated as position 0
    unnormed = copy.deepcopy(reference)
    unnormed.model.norm = torch.nn.Identity()
    return [Mistake(OFFSET, 2, lambda: hf_logits(reference, ids, restarted)[prefill - 1:]),
            Mistake("the final norm is missing: apply self.model.norm to the last position before the head", 4,
                    lambda: hf_logits(unnormed, ids)[prefill - 1:])]


def compare_logits(step, got: np.ndarray, reference, ids: list[int], prefill: int, what: str) -> None:
    """Logits with the cache against Hugging Face's over all ``ids``; a mismatch names a known mistake,
    or a wrong layer or attention below, or where the error starts."""
    expected, wrong = hf_logits(reference, ids)[prefill - 1:], model_mistakes(reference, ids, prefill)
    if not _close(got, expected) and matching_mistake(got, wrong) is None:
        check_layer(step)  # the model runs the layers, which run the attention: a wrong one is named first
    assert_close(got, expected, what, mistakes=wrong, step=step)


@pytest.mark.parametrize("head", ["tied", "untied"])
def test_cached_model_eagerly(step, head):
    """the cached model, run eagerly, gives Hugging Face's logits for a prefill and a decoded token"""
    reference = generation_llama(tied=head == "tied")
    model = llama_twin(step, "CachedLlamaForCausalLM", reference, reference.config)
    config = solution(17).LlamaConfig.from_hf(reference.config)
    got = eager_logits(model, EAGER_IDS, config.num_hidden_layers, config.num_key_value_heads, config.head_dim,
                       config.vocab_size, heads_name="K")
    compare_logits(step, got, reference, EAGER_IDS, 3,
                   f"eager logits with the cache (a prefill of 3 tokens, then 1; head {head}) vs LlamaForCausalLM "
                   f"over all 4")


# --- the compiled model ---------------------------------------------------------------------------


def _cached(step) -> tuple[object, int]:
    """The learner's cached Llama, compiled once per run by the step's given code (after the eager
    check: a wrong model is never compiled); and the number of graphs MAX loaded to build it."""
    if step.__file__ not in _compiled:
        reference = generation_llama()
        test_cached_model_eagerly(step, "tied")
        model = llama_twin(step, "CachedLlamaForCausalLM", reference, reference.config)
        config = solution(17).LlamaConfig.from_hf(reference.config)
        with counting_compiles() as loads:
            next_logits = call(attribute(step, "CachedLlamaNextLogits"), model, config)
        _compiled[step.__file__] = next_logits, len(loads)
    return _compiled[step.__file__]


def test_cached_logits_match_the_whole_sequence(step):
    """teacher-forced, the compiled model's logits with the cache equal Hugging Face's at every position"""
    reference, (next_logits, _) = generation_llama(), _cached(step)
    ids = np.random.default_rng(24).integers(0, GEN_LLAMA["vocab_size"], size=40).tolist()
    compare_logits(step, teacher_forced(step, next_logits, ids, 5), reference, ids, 5,
                   "logits with the cache (prefill 5, then 1 token per step) vs LlamaForCausalLM over all 40")


def test_greedy_with_the_cache_matches_without_it(step, record_property):
    """greedy tokens with the cache equal those without it and Hugging Face's generate, 3 prompts × 32 tokens"""
    reference, (cached, loads) = generation_llama(), _cached(step)
    if loads != 1:
        fail(f"building CachedLlamaNextLogits loaded {loads} graphs, expected 1 (one graph for prefill and decode) "
             f"— it is given code in {shown(step.__file__)}: keep it as the stub has it")
    model = build(solution(22).LlamaForCausalLM, solution(17).LlamaConfig.from_hf(reference.config))
    load_weights(model, to_max_state(reference), model="Llama")
    uncached = solution(13).compile_next_logits(model)
    greedy_three_ways(step, cached, uncached, reference, ([7, 1, 30], [11, 52, 3, 90, 17, 4, 60], [2]),
                      n_positions=GEN_LLAMA["max_position_embeddings"], eos_id=EOS)
    record_property("greedy", "3 prompts × 32 tokens: cached = uncached = Hugging Face")


def test_overflowing_the_context_is_a_clear_error(step):
    """max_position_embeddings tokens are read, and one more raises the course's ValueError, naming the limit

    One more in a prefill or in a decode step: the ValueError names the positions and the limit."""
    next_logits, _ = _cached(step)
    limit = GEN_LLAMA["max_position_embeddings"]
    full = list(range(2, 2 + limit))
    next_logits.reset()
    call(next_logits, full, what=f"next_logits of {limit} tokens, as many as the model learned")
    for doing, past in ((f"a decode step after {limit} tokens", limit), (f"a prefill of {limit + 1} tokens", 0)):
        if not past:
            next_logits.reset()
        try:
            next_logits([*full, 5])
        except ValueError as error:
            says = f"positions {past}..{limit} do not fit"
            if says not in str(error) or f"max_position_embeddings={limit}" not in str(error):
                fail(f"{doing} raised ValueError({str(error)!r}), which does not say {says!r} and name "
                     f"max_position_embeddings={limit} — CachedLlamaNextLogits is given code in "
                     f"{shown(step.__file__)}: keep it as the stub has it")
            continue
        fail(f"{doing} was accepted by a model that learned {limit} positions")
