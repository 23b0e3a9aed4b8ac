# Your file for step 13: fill in its TODOs, then run `pixi run s13`.
# (Rendered from solutions/step_13_generation.py by `python -m course.authoring.render`.)
"""Step 13 · Text generation.

The model (step 11) scores every possible next token. Generating text is a loop
around it: score, pick one token, append it, score again.

    ids       [t0, t1, ..., tn]                  the prompt, from the tokenizer (step 12)
    logits    [vocab_size]                       the model's scores for token n + 1
    filtered  [vocab_size]                       logits / temperature, the tail set to -inf
    probs     [vocab_size]                       softmax of the filtered logits
    next id   one int                            the argmax (greedy) or a draw from probs
    ids       [t0, ..., tn, next id]             and around again

How to pick:

* **greedy**: always the highest logit (``temperature = 0``). Deterministic,
  and for GPT-2 small soon repetitive.
* **temperature** ``T > 0``: sample from ``softmax(logits / T)``. Below 1 the
  distribution sharpens toward greedy; above 1 it flattens toward uniform.
* **top-k**: sample only among the ``k`` highest logits.
* **top-p** (nucleus): sample only among the smallest set of top tokens whose
  probabilities add up to at least ``p``.

These are applied in that order (temperature, then top-k, then top-p), as in
Hugging Face's ``generate``. A seeded random generator makes a run repeatable.

Generation stops after ``max_new_tokens``, or after ``<|endoftext|>``, which
GPT-2 writes where a document ends. The prompt plus the new tokens must fit in
the ``n_positions`` the model learned (step 06).

The model runs as a **compiled** MAX graph, built once for every prompt length
(given code, at the end of this file): each new token reruns the whole sequence.
Step 15 removes that rerun with a KV cache.

Check this step with ``pixi run s13``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

#: What a generator needs from a model: the token ids so far in, the next
#: token's logits ([vocab_size] floats) out.
NextLogits = Callable[[list[int]], np.ndarray]


def check_sampling(temperature: float, top_k: int, top_p: float) -> None:
    """Raises a clear ValueError for a sampling setting that means nothing (given code)."""
    if not temperature >= 0:  # also catches NaN
        raise ValueError(f"temperature must be 0 (greedy) or more, got {temperature}")
    smallest = float(np.finfo(np.float32).max / np.finfo(np.float64).max)  # ≈ 1.9e-270
    if 0 < temperature < smallest:  # a float32 logit / temperature could overflow: inf - inf is NaN
        raise ValueError(
            f"temperature {temperature!r} is too small to divide by (below {smallest:.1e}, logits / temperature "
            "can overflow); use 0 for greedy decoding"
        )
    if isinstance(top_k, bool) or not isinstance(top_k, int | np.integer) or top_k < 0:
        raise ValueError(f"top-k must be a whole number, 0 (off) or more, got {top_k}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top-p must be in (0, 1] (1 is off), got {top_p}")


def filter_logits(logits: np.ndarray, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> np.ndarray:
    """Tempered logits with every token that may not be sampled set to ``-inf``.

    ``logits`` is one ``[vocab_size]`` row and ``temperature > 0``. ``top_k = 0``
    and ``top_p = 1`` switch those filters off. Returns a new float array.

    Exact ties: top-k keeps every token tied with the k-th largest, as Hugging
    Face does. Where top-p's cut falls inside a group of exactly tied logits, the
    lower token ids stay. Hugging Face keeps as many, but which of them is left
    to ``torch.sort``, which puts ties in no fixed order (on CPU, in rows of more
    than 16 logits).
    """
    if np.ndim(logits) != 1:  # given: one row, not a batch
        raise ValueError(
            f"filter_logits takes one [vocab_size] row of logits, got shape {list(np.shape(logits))}; "
            "call it once per row"
        )
    # TODO 1: Divide the logits by the temperature (as floats: float64 is fine).
    logits = None

    # TODO 2: Top-k: when 0 < top_k < vocab size, set every logit below the k-th
    #   largest to -inf (ties with the k-th largest stay).
    # Hint: np.sort sorts ascending: where does the k-th largest sit? np.where picks
    #   elementwise between two choices, one of them -inf.
    pass

    # TODO 3: Top-p: when top_p < 1, keep the smallest set of most likely tokens
    #   whose probabilities add up to at least top_p; set the rest to -inf.
    # Hint: visit the tokens from most to least likely with their softmax probabilities.
    #   np.argsort only ascends (how do you sort descending?); kind="stable" keeps exact
    #   ties in id order, so that at a tie the lower id stays. A token stays when the
    #   tokens *before* it add up to less than top_p, so the most likely token always
    #   stays. np.cumsum gives running totals; how do you leave the token itself out?
    pass
    return logits




def next_token(
    logits: np.ndarray, rng: np.random.Generator, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> int:
    """Picks the next token id from one ``[vocab_size]`` row of logits."""
    check_sampling(temperature, top_k, top_p)
    if np.ndim(logits) != 1:  # given: np.argmax of a batch gives an index into all its rows
        raise ValueError(f"next_token takes one [vocab_size] row of logits, got shape {list(np.shape(logits))}")
    # TODO 4: Temperature 0 means greedy: return the index of the largest logit.
    #   Otherwise filter the logits (TODO 1-3), turn them into probabilities with a
    #   softmax, and draw one index with rng. Return a Python int.
    # Hint: subtract the largest logit before np.exp so that nothing overflows;
    #   exp(-inf) is 0, so the filtered tokens get probability 0.
    #   rng.choice(n, p=probs) draws one of 0 .. n-1 with those probabilities.
    return None




def generate(
    next_logits: NextLogits,
    prompt_ids: list[int],
    max_new_tokens: int,
    *,
    n_positions: int,
    eos_id: int | None = None,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int | None = None,
) -> Iterator[int]:
    """Yields new token ids one at a time, as soon as each is chosen.

    ``next_logits(ids)`` gives the next token's logits for the ids so far. The
    loop stops after ``max_new_tokens`` tokens, or right after yielding
    ``eos_id``. Same seed, same prompt, same model: same tokens.
    """
    check_sampling(temperature, top_k, top_p)
    check_lengths(len(prompt_ids), max_new_tokens, n_positions)
    rng = np.random.default_rng(seed)
    ids = [int(i) for i in prompt_ids]
    # TODO 5: Up to max_new_tokens times: get the logits for ids, pick the next
    #   token with next_token (passing rng and the sampling settings), yield it,
    #   stop if it is eos_id, else append it to ids.
    # Hint: a function with `yield` in it is a generator: the caller receives each
    #   token while the next one is being computed, which is how text streams.
    return




def check_lengths(prompt_len: int, max_new_tokens: int, n_positions: int) -> None:
    """Raises a clear ValueError when the prompt is empty or the text would outgrow the context (given code)."""
    if prompt_len == 0:
        raise ValueError("the prompt is empty: give the model at least one token to continue")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be 0 or more, got {max_new_tokens}")
    if prompt_len > n_positions:
        raise ValueError(f"the prompt has {prompt_len} tokens, more than the {n_positions} positions the model can read")
    if prompt_len + max_new_tokens > n_positions:
        raise ValueError(
            f"{prompt_len} prompt tokens + {max_new_tokens} new tokens is more than the {n_positions} "
            f"positions the model can read; ask for at most {n_positions - prompt_len} new tokens"
        )


# --- given code: the model as one compiled graph for every length ------------------------


def compile_next_logits(model, device=None) -> NextLogits:
    """Compiles a GPT2LMHeadModel (step 11), or Part II's LlamaForCausalLM (step 22), into
    ``next_logits(ids) -> [vocab_size]``.

    Eager MAX runs one op at a time; a compiled graph runs the whole forward as
    one optimized program. ``"seq"`` is a *symbolic* length, so a single graph
    serves every prompt length and every step (compiled once per machine, then
    cached by MAX). Only the last position's logits are computed: the others are
    not needed to pick the next token.
    """
    from max.driver import CPU
    from max.dtype import DType
    from max.experimental.nn import Module
    from max.experimental.tensor import Tensor, TensorType

    device = device or CPU()

    class LastPositionLogits(Module):
        def __init__(self, lm):
            self.lm = lm

        def forward(self, input_ids: Tensor) -> Tensor:
            body = self.lm.transformer if hasattr(self.lm, "transformer") else self.lm.model  # GPT-2's; Llama's
            hidden = body(input_ids)  # [1, seq, n_embd]
            return self.lm.head(hidden[:, -1, :])  # [1, vocab_size]: step 11's head, last position only

    model.to(device)
    run = LastPositionLogits(model).compile(TensorType(DType.int64, [1, "seq"], device))

    def next_logits(ids: list[int]) -> np.ndarray:
        logits = run(Tensor.from_dlpack(np.asarray([ids], dtype=np.int64)).to(device))
        return np.asarray(logits.to(CPU()).to_numpy())[0]

    return next_logits
