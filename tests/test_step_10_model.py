"""Step 10 · GPT2Model against Hugging Face's GPT2Model.

Compares the last hidden state (``ln_f`` applied) with Hugging Face's
``last_hidden_state``. When they differ, the check finds the first place that
does: it records what each of the learner's blocks ``h[i]`` reads and returns (by
wrapping their ``forward``) and compares that with Hugging Face's blocks (forward
hooks; Hugging Face's last ``hidden_states`` entry already has ``ln_f`` applied, so
block outputs come from the hooks instead).

Depth: the small config has 2 blocks; a second variant has 3 blocks with
``n_inner`` and a large ``layer_norm_epsilon`` (0.1), so that a hard-coded
``ln_f`` epsilon, a block used twice or a block skipped shows. GPT-2 small's real
dimensions are checked through the whole model in step 11 (at reduced depth:
MAX runs each op eagerly, about 1 s per block at that width on 2 cores).

The parameter count is compared with Hugging Face's ``num_parameters()`` for the
four GPT-2 sizes (124M, 355M, 774M, 1558M), both built without computing a weight
(MAX inside ``F.lazy()``, PyTorch on the meta device). The head adds no parameter
(it is tied to ``wte``, step 11), so these are the whole models' counts too.

Tolerance: the harness default, 1e-4 + 1e-4·|expected|. Measured worst case |Δ| on
solutions/: 2.1e-6 for 2 blocks, 1.5e-6 for 3 (``ln_f`` renormalizes, so depth barely
shows at this size; before ``ln_f`` the stream is of size ~20). A missing ``ln_f`` is
off by 11, a skipped first block by 6.4. ``mistakes`` runs the reference's own parts
in the common wrong ways, so that a ✗ can name the mistake; when none matches, the
first divergence is reported.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

from course.runtime import to_numpy
from harness import (
    Mistake, assert_close, attribute, build, fail, forward, load_weights, matching_mistake, missing_parameter, solution,
    todo_in
)
from reference import DEFAULT_EPS, SMALL, hf_config, run_layer_norm, run_masked, seeded, to_max_state, token_ids

pytestmark = pytest.mark.step10

VARIANTS = {
    "small": SMALL,
    "3 blocks, n_inner=48, eps=0.1": dict(SMALL, n_layer=3, n_inner=48, layer_norm_epsilon=0.1),
}


#: GPT-2's four released sizes (the rest as GPT-2 small).
SIZES = {
    "gpt2 (124M)": dict(n_embd=768, n_layer=12, n_head=12),
    "gpt2-medium (355M)": dict(n_embd=1024, n_layer=24, n_head=16),
    "gpt2-large (774M)": dict(n_embd=1280, n_layer=36, n_head=20),
    "gpt2-xl (1558M)": dict(n_embd=1600, n_layer=48, n_head=25),
}


def mistakes(reference: transformers.GPT2Model, ids: np.ndarray, mine=None) -> list[Mistake]:
    """The common wrong bodies, run with the reference's own embeddings, blocks and ln_f on the check's ids.

    ``mine``, the learner's model, only words a mistake: the epsilon its ln_f was built with.
    """
    with torch.no_grad():
        tokens = reference.wte(torch.from_numpy(ids)).numpy()
        positions = reference.wpe.weight[: ids.shape[1]].numpy()
    blocks = list(reference.h)

    def ln_f(h, eps=None):
        return run_layer_norm(reference.ln_f, h, eps)

    def body(x=tokens + positions, order=blocks, each=lambda h: h, last=ln_f):
        """``last(each(block(…each(block(x)))))`` over ``order``: the body, wired some way. ``x`` is the
        blocks' input, or a function that computes it (only when the mistake is compared)."""
        def wired():
            h = x() if callable(x) else x
            for block in order:
                h = each(run_masked(block, h))
            return last(h)
        return wired

    found = [
        Mistake("ln_f is not applied: return self.ln_f(x) after the last block", 2, body(last=lambda h: h)),
        Mistake("the position embeddings are missing: h[0] reads wte(ids) alone; super().forward(input_ids) "
                "(step 06) gives wte + wpe", 2, body(x=tokens)),
        Mistake("ln_f runs after every block; it runs once, after the last", 2, body(each=ln_f, last=lambda h: h)),
        Mistake("ln_f normalizes the embeddings, before h[0]; it runs once, after the last block", 2,
                body(x=lambda: ln_f(tokens + positions), last=lambda h: h)),
        Mistake("ln_f runs twice: on the embeddings, before h[0], and after the last block; it runs once, after "
                "the last block", 2, body(x=lambda: ln_f(tokens + positions))),
    ]
    if len(blocks) > 1:
        last = len(blocks) - 1
        found.append(Mistake(f"ln_f runs before the last block, h[{last}]; GPT-2 runs every block first, then "
                             f"ln_f once, on h[{last}]'s output", 2,
                             body(x=body(order=blocks[:-1]), order=blocks[-1:], last=lambda h: h)))
        found.append(Mistake(f"the blocks run in reverse order, h[{len(blocks) - 1}] first; GPT-2 runs h[0] first",
                             2, body(order=blocks[::-1])))
        found += [
            Mistake(f"every block has h[{i}]'s weights: h holds one Block {len(blocks)} times ([Block(config)] * n "
                    f"repeats one object), so the checkpoint's blocks all load into it and the last one wins; make a "
                    f"new Block for each layer", 1, body(order=[blocks[i]] * len(blocks)))
            for i in (len(blocks) - 1, 0)
        ]
    if reference.ln_f.eps != DEFAULT_EPS:
        # An epsilon near GPT-2's 1e-5 gives the same numbers to the tolerance: the message quotes the
        # learner's own ln_f's eps, where it has one.
        eps, its = getattr(getattr(mine, "ln_f", None), "eps", None), ""
        if isinstance(eps, (int, float)):
            its = f"its eps is {eps:g}" + (" (LayerNorm's default), " if eps == DEFAULT_EPS else ", ")
        found.append(Mistake(f"ln_f is built without the config's epsilon: {its}this config's layer_norm_epsilon "
                             f"is {reference.ln_f.eps:g}", 1,
                             body(last=lambda h: ln_f(h, DEFAULT_EPS))))
    return found


def _record_blocks(model) -> list[tuple[int, object, object]]:
    """Wraps each of ``model.h``'s blocks so every call appends (index, input, output)."""
    calls: list[tuple[int, object, object]] = []
    blocks = getattr(model, "h", None)
    if not isinstance(blocks, (list, tuple)):
        return calls
    for index, block in enumerate(blocks):
        original = block.forward

        def recorded(x, *args, _index=index, _original=original, **kwargs):
            y = _original(x, *args, **kwargs)
            calls.append((_index, x, y))
            return y

        object.__setattr__(block, "forward", recorded)  # on this instance only
    return calls


def _hf_block_outputs(reference, ids: np.ndarray) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """Hugging Face's embeddings, each block's output, and the last hidden state."""
    outputs: list[np.ndarray] = []

    def keep(module, args, output):
        outputs.append((output[0] if isinstance(output, tuple) else output).detach().numpy())

    hooks = [block.register_forward_hook(keep) for block in reference.h]
    try:
        with torch.no_grad():
            out = reference(torch.from_numpy(ids), output_hidden_states=True)
    finally:
        for hook in hooks:
            hook.remove()
    return out.hidden_states[0].numpy(), outputs, out.last_hidden_state.numpy()


def _first_divergence(calls, embeddings, block_outputs, n_layer: int) -> str:
    """Where the learner's model first departs from Hugging Face's, in words."""
    order = [index for index, _, _ in calls]
    if order != list(range(n_layer)):
        return f"the blocks ran in the order {order}; GPT-2 runs h[0] … h[{n_layer - 1}], each once, in order"
    close = lambda a, b: np.allclose(to_numpy(a), b, atol=1e-4, rtol=1e-4)  # noqa: E731
    if not close(calls[0][1], embeddings):
        return "h[0] does not read the embeddings wte(ids) + wpe(positions) (step 06's forward)"
    for index, x, y in calls:
        if index and not close(x, block_outputs[index - 1]):
            return f"h[{index}] does not read h[{index - 1}]'s output"
        if not close(y, block_outputs[index]):
            return f"h[{index}]'s output is the first that differs from Hugging Face's"
    return "every block's output agrees with Hugging Face's, so the difference comes after the last block (ln_f)"


@pytest.mark.parametrize("name", list(VARIANTS))
def test_matches_gpt2_model(step, name):
    """GPT2Model's last hidden state matches Hugging Face GPT2Model"""
    hf = hf_config(**VARIANTS[name])
    reference = seeded(transformers.GPT2Model(hf), seed=10)
    mine = build(attribute(step, "GPT2Model"), solution(1).GPT2Config.from_hf(hf))
    load_weights(mine, to_max_state(reference))
    calls = _record_blocks(mine)
    ids = token_ids(2, 7, hf.vocab_size)
    got = forward(mine, ids)
    embeddings, block_outputs, expected = _hf_block_outputs(reference, ids)
    wrong = mistakes(reference, ids, mine)
    try:
        assert_close(got, expected, f"last hidden state vs Hugging Face GPT2Model ({name})", mistakes=wrong, step=step)
    except pytest.fail.Exception as failure:
        if matching_mistake(got, wrong) is not None:
            raise
        where = _first_divergence(calls, embeddings, block_outputs, hf.n_layer)
        fail(f"{failure.msg}. Where it starts: {where} — {todo_in(type(mine).forward)}")


def test_parameter_count_matches_gpt2_sizes(step):
    """parameter count equals Hugging Face's for GPT-2 small, medium, large and XL"""
    cls = attribute(step, "GPT2Model")
    config_class = solution(1).GPT2Config
    for name, sizes in SIZES.items():
        mine = build(cls, config_class(**sizes))  # lazily: no weight is computed
        total = sum(int(np.prod([int(d) for d in value.shape])) for _, value in mine.parameters)
        with torch.device("meta"):  # nor here
            reference = transformers.GPT2Model(hf_config(**sizes))
        theirs = reference.num_parameters()
        if total != theirs:
            names = dict(mine.parameters)
            lacking = [key for key, _ in reference.named_parameters() if key not in names]
            why = f": {missing_parameter(mine, lacking[0])}" if lacking else ""
            fail(f"{name}: your GPT2Model has {total:,} parameters, Hugging Face's {theirs:,}{why}")
