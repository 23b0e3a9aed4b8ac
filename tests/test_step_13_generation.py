"""Step 13 · text generation against Hugging Face's sampling and ``generate``.

* ``filter_logits`` is compared with Hugging Face's own logits warpers
  (``TemperatureLogitsWarper``, ``TopKLogitsWarper``, ``TopPLogitsWarper``, in the
  order ``generate`` applies them): the same tokens are cut (set to ``-inf``) and
  the rest agree within 1e-4 + 1e-4·|expected| (float64 in NumPy vs float32 in
  torch: measured worst case 1.9e-6, at T=0.7).
* Exact ties at top-p's cut: Hugging Face keeps as many tokens, but which of the tied
  ones is left to ``torch.sort``, which on CPU orders ties by no rule for rows of
  more than 16 logits. So the count is compared with Hugging Face's, and the tokens
  kept must be the tied group's lower ids (the course's documented rule).
* Sampling is checked by statistics: 20,000 seeded draws from one row of logits
  are compared with the filtered, tempered softmax by a chi-square test. A correct
  sampler fails it with probability 1 in 1,000 (the test's false-alarm rate;
  the draws are seeded, so a given sampler passes or fails the same way every run).
  A sampler that ignores the filters or the temperature is off by far more.
* Greedy generation runs the compiled model (one graph for every length) on a
  small random GPT-2 and must be token-identical to
  ``GPT2LMHeadModel.generate(do_sample=False)`` for several prompts, 32 new tokens
  each. Where Hugging Face's two best logits are closer than the tolerance, a
  different token is a tie, not a bug, and the check says so instead of failing.

The loop itself (stopping, seeds, errors) runs on a stand-in model, a NumPy
function of the ids, so those checks take milliseconds.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from harness import assert_close, attribute, build, call, fail, greedy_agreement, load_weights, rejects, solution, todo_in
from reference import GEN, generation_model, hf_greedy, to_max_state

pytestmark = pytest.mark.step13

VOCAB = GEN["vocab_size"]
EOS = VOCAB - 1  # reference.hf_config puts eos at the end of the vocabulary

SETTINGS = {
    "plain": dict(temperature=1.0, top_k=0, top_p=1.0),
    "T=0.7": dict(temperature=0.7, top_k=0, top_p=1.0),
    "T=1.8": dict(temperature=1.8, top_k=0, top_p=1.0),
    "top-k 5": dict(temperature=1.0, top_k=5, top_p=1.0),
    "top-k larger than vocab": dict(temperature=1.0, top_k=VOCAB + 10, top_p=1.0),
    "top-p 0.8": dict(temperature=1.0, top_k=0, top_p=0.8),
    "top-p 0.3": dict(temperature=1.0, top_k=0, top_p=0.3),
    "T=1.3, top-k 10, top-p 0.6": dict(temperature=1.3, top_k=10, top_p=0.6),
}


def _rows(count: int, size: int = VOCAB, seed: int = 13) -> np.ndarray:
    """Seeded logit rows with a realistic spread (std 3)."""
    return (np.random.default_rng(seed).standard_normal((count, size)) * 3).astype(np.float32)


def hf_filtered(logits: np.ndarray, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """Hugging Face's tempered and filtered logits, in ``generate``'s order."""
    scores = torch.from_numpy(np.asarray(logits, dtype=np.float32))[None]
    warpers = [TemperatureLogitsWarper(temperature)]
    if top_k:
        warpers.append(TopKLogitsWarper(top_k))
    if top_p < 1:
        warpers.append(TopPLogitsWarper(top_p))
    for warp in warpers:
        scores = warp(None, scores)
    return scores[0].numpy()


def _tokens(n: int) -> str:
    return f"{n} token" if n == 1 else f"{n} tokens"


def _softmax(logits: np.ndarray) -> np.ndarray:
    p = np.exp(logits.astype(np.float64) - logits.max())
    return p / p.sum()


@pytest.mark.parametrize("name", list(SETTINGS))
def test_filter_matches_hugging_face(step, name):
    """filter_logits cuts the same tokens as Hugging Face's warpers and tempers the rest"""
    filter_logits = attribute(step, "filter_logits")
    settings = SETTINGS[name]
    for row in _rows(4):
        got = call(filter_logits, row.copy(), **settings, what=f"filter_logits(…, {name})")
        expected = hf_filtered(row, **settings)
        got = np.asarray(got, dtype=np.float64)
        if got.shape != expected.shape:
            fail(f"filter_logits returned shape {list(got.shape)}, expected {list(expected.shape)} — {todo_in(filter_logits)}")
        kept, should = np.isfinite(got), np.isfinite(expected)
        if (kept != should).any():
            extra, missing = int((kept & ~should).sum()), int((should & ~kept).sum())
            fail(
                f"filter_logits ({name}) keeps {_tokens(int(kept.sum()))}, Hugging Face keeps {_tokens(int(should.sum()))}: "
                f"{extra} should be cut (-inf) and {missing} should stay — {todo_in(filter_logits)}"
            )
        assert_close(got, expected, f"filter_logits ({name}) vs Hugging Face's warpers")


def _tied_rows() -> list[tuple[np.ndarray, float]]:
    """(row, top_p) pairs whose top-p cut falls inside a group of exactly tied logits (four
    levels, so every group is large), at least 1e-4 away from where the cut changes size."""
    rng = np.random.default_rng(16)
    found = []
    while len(found) < 6:
        row = rng.integers(0, 4, VOCAB).astype(np.float32)
        top_p = float(rng.uniform(0.1, 0.9))
        ranked = np.sort(row)[::-1]
        p = _softmax(ranked)
        before = np.cumsum(p) - p
        stay = int((before < top_p).sum())
        if stay < VOCAB and ranked[stay - 1] == ranked[stay] and np.abs(before - top_p).min() > 1e-4:
            found.append((row, top_p))
    return found


def test_top_p_ties_keep_the_lower_ids(step):
    """where top-p cuts a group of exactly tied logits, as many stay as with Hugging Face, the lower ids"""
    filter_logits = attribute(step, "filter_logits")
    for row, top_p in _tied_rows():
        what = f"filter_logits (top-p {top_p:.3f}, the cut inside a group of equal logits)"
        got = np.isfinite(np.asarray(call(filter_logits, row.copy(), 1.0, 0, top_p, what=what), dtype=np.float64))
        expected = np.isfinite(hf_filtered(row, 1.0, 0, top_p))
        if got.shape != expected.shape or got.sum() != expected.sum():
            fail(f"{what} keeps {_tokens(int(got.sum()))}, Hugging Face keeps {_tokens(int(expected.sum()))} — {todo_in(filter_logits)}")
        tied = np.flatnonzero(row == row[expected].min())  # the group the cut falls in, in id order
        stays = int(got[tied].sum())
        if not got[tied[:stays]].all():
            fail(
                f"{what} keeps ids {tied[got[tied]][:4].tolist()}… of the tied group {tied[:4].tolist()}…; at an "
                f"exact tie the course keeps the lower ids ({stays} of {tied.size}): sort with "
                f"np.argsort(-logits, kind=\"stable\") — {todo_in(filter_logits)}"
            )


def test_one_row_at_a_time(step):
    """filter_logits and next_token refuse a 2-D batch of logits with a clear ValueError"""
    from course.check.hints import explain_exception

    batch = _rows(2)
    for name, kwargs in (
        ("filter_logits", dict(temperature=1.0, top_p=0.8)),
        ("filter_logits", dict(temperature=1.0)),
        ("next_token", dict(rng=np.random.default_rng(0), temperature=0.0)),
    ):
        fn = attribute(step, name)
        shown = ", ".join(f"{key}={value}" for key, value in kwargs.items() if key != "rng")
        what = f"{name}(a [2, {VOCAB}] batch, {shown})"
        try:
            fn(batch, **kwargs)
        except ValueError as error:
            if "row" not in str(error):
                fail(f"{what} raised ValueError({str(error)!r}), which does not say that it takes one row")
            continue
        except Exception as error:  # noqa: BLE001 - reported, with the line that raised it
            fail(f"{what} raised {explain_exception(error, step.__file__)}; expected a clear ValueError saying that "
                 f"it takes one [vocab_size] row — keep the given check at the top of {name}")
        fail(f"{what} was accepted, but {name} takes one [vocab_size] row — keep the given check at the top of {name}")


def test_greedy_choices(step):
    """temperature 0 and top-k 1 both pick the largest logit"""
    next_token = attribute(step, "next_token")
    rng = np.random.default_rng(0)
    for i, row in enumerate(_rows(40, seed=5)):
        best = int(np.argmax(row))
        for settings in (dict(temperature=0.0), dict(temperature=1.0, top_k=1)):
            got = call(next_token, row, rng, **settings, what=f"next_token(…, {settings})")
            if not isinstance(got, int | np.integer):
                fail(f"next_token returned {type(got).__name__} {got!r}, expected an int token id — {todo_in(next_token)}")
            if got != best:
                fail(f"next_token({settings}) picked token {got} on row {i}, but the largest logit is token {best} — {todo_in(next_token)}")


@pytest.mark.parametrize("name", ["top-k 5", "top-p 0.3", "T=1.3, top-k 10, top-p 0.6"])
def test_filtered_tokens_are_never_sampled(step, name):
    """a token cut by top-k or top-p is never drawn"""
    next_token = attribute(step, "next_token")
    settings = SETTINGS[name]
    rng = np.random.default_rng(1)
    for row in _rows(5, seed=7):
        allowed = np.isfinite(hf_filtered(row, **settings))
        for _ in range(400):
            token = call(next_token, row, rng, **settings)
            if not allowed[token]:
                fail(
                    f"next_token ({name}) drew token {token}, which the filter cuts: only {int(allowed.sum())} "
                    f"tokens may be drawn — {todo_in(next_token)}"
                )


#: The chi-square test's false-alarm rate: how often a correct sampler fails it.
FALSE_ALARM = 1e-3
DRAWS = 20_000


@pytest.mark.parametrize("name", ["plain", "T=0.7", "T=1.3, top-k 10, top-p 0.6"])
def test_sampled_frequencies_match_the_distribution(step, name, record_property):
    """over 20,000 seeded draws the frequencies match the tempered, filtered softmax (chi-square)"""
    next_token = attribute(step, "next_token")
    settings = SETTINGS[name]
    row = _rows(1, size=12, seed=3)[0] / 2  # 12 tokens, so every expected count is large
    expected = _softmax(hf_filtered(row, **settings))
    rng = np.random.default_rng(2024)
    counts = np.zeros(row.size)
    for _ in range(DRAWS):
        counts[call(next_token, row, rng, **settings)] += 1
    kept = expected > 0
    if counts[~kept].any():
        fail(f"next_token ({name}) drew tokens that the filter cuts — {todo_in(next_token)}")
    expected_counts = expected[kept] * DRAWS
    chi2 = float(((counts[kept] - expected_counts) ** 2 / expected_counts).sum())
    dof = int(kept.sum()) - 1
    p_value = float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(chi2 / 2)))
    record_property("chi2", f"{chi2:.1f} on {dof} degrees of freedom, p = {p_value:.3g}")
    if p_value < FALSE_ALARM:
        worst = int(np.argmax(np.abs(counts - expected * DRAWS)))
        fail(
            f"next_token ({name}): the frequencies of {DRAWS} draws do not follow the tempered, filtered softmax "
            f"(chi-square {chi2:.0f} on {dof} degrees of freedom, p = {p_value:.2g} < {FALSE_ALARM:g}); token {worst} "
            f"came {int(counts[worst])} times, expected {expected[worst] * DRAWS:.0f} — {todo_in(next_token)}"
        )


def test_tiny_temperatures(step):
    """a tiny temperature (1e-250) samples the largest logit; one too small to divide by (5e-324) is refused"""
    next_token = attribute(step, "next_token")
    rng = np.random.default_rng(0)
    for i, row in enumerate(_rows(10, seed=5)):
        got = call(next_token, row, rng, temperature=1e-250, what="next_token(…, temperature=1e-250)")
        if got != int(np.argmax(row)):
            fail(f"next_token(…, temperature=1e-250) picked token {got} on row {i}, but at a temperature this close to 0 "
                 f"sampling is greedy: the largest logit is token {int(np.argmax(row))} — {todo_in(next_token)}")
    what = "next_token(…, temperature=5e-324)"  # logits / 5e-324 overflows to inf, and inf - inf is NaN
    try:
        next_token(_rows(1)[0], rng, temperature=5e-324)
    except ValueError as error:
        if "temperature" not in str(error):
            fail(f"{what} raised ValueError({str(error)!r}), which does not name the temperature; dividing by it "
                 "overflows, so check_sampling should refuse it — keep the given check at the top of next_token")
        return
    except Exception as error:  # noqa: BLE001 - reported, with the line that raised it
        from course.check.hints import explain_exception

        fail(f"{what} raised {explain_exception(error, step.__file__)}; expected a clear ValueError naming the "
             "temperature — keep the given check at the top of next_token")
    fail(f"{what} was accepted, but dividing a logit by it overflows — keep the given check at the top of next_token")


# --- the loop, on a stand-in model ---------------------------------------------------------


def stand_in(ids: list[int]) -> np.ndarray:
    """A 'model' whose logits depend on every id so far: NumPy, instant, deterministic."""
    seed = hash(tuple(int(i) for i in ids)) % 2**32
    logits = np.random.default_rng(seed).standard_normal(VOCAB).astype(np.float32)
    logits[EOS] = -10.0  # never chosen unless a test says so
    return logits


def _generate(step, *args, **kwargs) -> list[int]:
    generate = attribute(step, "generate")
    kwargs.setdefault("n_positions", GEN["n_positions"])
    tokens = call(generate, *args, what="generate(…)", **kwargs)
    try:
        return [int(t) for t in tokens]
    except pytest.fail.Exception:
        raise
    except Exception as error:  # noqa: BLE001 - the learner's loop raised while iterating
        from course.check.hints import explain_exception

        fail(f"generate(…) failed: {explain_exception(error, step.__file__)}")


def test_stops_at_max_new_tokens_and_at_end_of_text(step):
    """the loop yields max_new_tokens tokens, or stops right after <|endoftext|>"""
    got = _generate(step, stand_in, [3, 1, 4], 9, eos_id=EOS)
    if len(got) != 9:
        fail(f"generate(…, max_new_tokens=9) yielded {len(got)} tokens — {todo_in(step.generate)}")
    greedy = [int(np.argmax(stand_in([3, 1, 4])))]
    for _ in range(8):
        greedy.append(int(np.argmax(stand_in([3, 1, 4, *greedy]))))
    if got != greedy:
        fail(f"greedy generate gave {got}, but the argmax at each step gives {greedy} — {todo_in(step.generate)}")

    def ends_at_step_4(ids):
        logits = stand_in(ids)
        if len(ids) == 3 + 3:
            logits[EOS] = 100.0
        return logits

    got = _generate(step, ends_at_step_4, [3, 1, 4], 20, eos_id=EOS)
    if got[-1:] != [EOS] or len(got) != 4:
        fail(
            f"with <|endoftext|> (id {EOS}) the most likely 4th token, generate yielded {len(got)} tokens ending "
            f"in {got[-1:]}; it should yield the end-of-text token and stop — {todo_in(step.generate)}"
        )


def test_same_seed_same_tokens(step):
    """the same seed gives the same tokens; another seed, others"""
    kwargs = dict(temperature=1.0, top_k=0, top_p=1.0, eos_id=EOS)
    first = _generate(step, stand_in, [5, 9], 16, seed=7, **kwargs)
    again = _generate(step, stand_in, [5, 9], 16, seed=7, **kwargs)
    other = _generate(step, stand_in, [5, 9], 16, seed=8, **kwargs)
    if first != again:
        fail(f"seed 7 gave {first} and then {again}: use one np.random.default_rng(seed) for the whole run — {todo_in(step.generate)}")
    if first == other:
        fail(f"seeds 7 and 8 gave the same 16 sampled tokens {first}: is the seed used? — {todo_in(step.generate)}")


BAD_INPUT = {
    "negative temperature": (dict(temperature=-0.5), "temperature"),
    "negative top-k": (dict(temperature=1.0, top_k=-1), "top-k"),
    "top-p 0": (dict(temperature=1.0, top_p=0.0), "top-p"),
    "top-p above 1": (dict(temperature=1.0, top_p=1.5), "top-p"),
    "empty prompt": (dict(prompt=[]), "prompt"),
    "longer than the context": (dict(max_new_tokens=GEN["n_positions"]), "positions"),
}


@pytest.mark.parametrize("name", list(BAD_INPUT))
def test_rejects_bad_input(step, name):
    """a bad sampling setting, an empty prompt, or too many tokens raise a clear ValueError"""
    settings, word = BAD_INPUT[name]
    settings = dict(settings)
    prompt = settings.pop("prompt", [1, 2, 3])
    new = settings.pop("max_new_tokens", 4)
    generate = attribute(step, "generate")
    message = rejects(
        lambda: list(generate(stand_in, prompt, new, n_positions=GEN["n_positions"], **settings)),
        error=ValueError,
        what=f"generate with {name}",
        why=f"{name} cannot generate anything meaningful",
    )
    if word not in message:
        fail(f"generate with {name} raised ValueError({message!r}), which does not name the {word}")


# --- the compiled model against Hugging Face's generate -------------------------------------

PROMPTS = [[7, 1, 30], [11, 52, 3, 90, 17, 4, 60], [2, 71, 5, 5, 5, 38, 12, 9, 61, 20, 8, 44]]
NEW_TOKENS = 32
_compiled: dict[str, object] = {}


def compiled_next_logits(step, reference):
    """The learner's compile_next_logits around the finished model, once per test run (compiling costs seconds)."""
    if step.__file__ not in _compiled:
        model = build(solution(11).GPT2LMHeadModel, solution(1).GPT2Config.from_hf(reference.config))
        load_weights(model, to_max_state(reference))
        _compiled[step.__file__] = call(attribute(step, "compile_next_logits"), model)
    return _compiled[step.__file__]


def test_greedy_matches_hugging_face_generate(step, record_property):
    """greedy generation with the compiled model is token-identical to GPT2LMHeadModel.generate"""
    _generate(step, stand_in, [1, 2], 1)  # an unfinished loop fails here, before minutes of compiling
    reference = generation_model()
    next_logits = compiled_next_logits(step, reference)
    notes, distinct = [], set()
    for prompt in PROMPTS:
        got = _generate(step, next_logits, prompt, NEW_TOKENS, eos_id=EOS, temperature=0.0)
        distinct.update(got)
        expected, scores = hf_greedy(reference, prompt, NEW_TOKENS, eos_id=EOS)
        if note := greedy_agreement(got, expected, scores, f"prompt {prompt}"):
            notes.append(note)
    assert len(distinct) > 8, f"the reference model is degenerate ({len(distinct)} distinct tokens): a weak test"
    record_property("greedy", f"{len(PROMPTS)} prompts × {NEW_TOKENS} tokens, {len(distinct)} distinct tokens")
    for note in notes:
        print(note)
