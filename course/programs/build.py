"""The one road from a checkpoint to a compiled model: ``main``, ``gpt2``, ``bench`` and the tests take it.

    steps = import_steps("solutions", ...)                     # whose code: solutions/ or a learner's steps/
    pretrained = load(steps, "gpt2")                           # step 14: found, read, converted, vetted
    next_logits = compile_model(steps, pretrained, device,     # step 11 or 15's model, compiled: ids -> logits
                                cached=True, quantize="q4_0")

Random weights take the same road: :func:`course.weights.random_checkpoint` writes
them as a checkpoint folder first (bench does), so every check along the way (each
weight's name and shape, the vocabulary against ``vocab_size``) runs on them too.
"""

from __future__ import annotations

from course import runtime


def load(steps: dict[int, object], model: str):
    """Step 14's ``load_pretrained(model)``: a Hub id or folder, found, read, converted and vetted.

    Raises :class:`course.checkpoints.CheckpointError` (one line) for a checkpoint it cannot use.
    """
    return steps[14].load_pretrained(model)


def compile_model(steps: dict[int, object], pretrained, device, cached: bool, quantize: str | None = None,
                  decode: bool = False):
    """Step 11's model (or step 15's cached one, or with ``decode`` step 16's) with the checkpoint's
    weights, compiled into ``next_logits(ids) -> [vocab_size]``.

    ``decode``: step 16's model, whose decode graph multiplies each weight by one row as
    ``W @ xᵀ`` (float32 only).

    With ``quantize`` (q4_0, q4_k or q6_k), the model's Linear layers and its head are
    built quantized from the checkpoint's float32 arrays (``course.programs.quantize``)
    before anything is loaded, so that their float32 weights are never loaded at all.
    """
    from max.experimental import functional as F

    config, state = pretrained.config, pretrained.state
    if decode and quantize:
        raise ValueError("step 16's decode graph is float32; --quantize runs step 15's cached model")
    model_class = steps[16].DecodeGPT2LMHeadModel if decode else (
        steps[15].CachedGPT2LMHeadModel if cached else steps[11].GPT2LMHeadModel)
    with F.lazy():
        model = model_class(config)
    swapped = {}
    if quantize:
        from course.programs.quantize import quantize_model

        swapped = quantize_model(model, state, quantize)
    model.load_state_dict({name: swapped[name] if name in swapped else runtime.from_numpy(state[name])
                           for name, _ in model.parameters})
    if decode:
        return steps[16].DecodeNextLogits(model, config, device)
    if cached:
        return steps[15].CachedNextLogits(model, config, device)
    return steps[13].compile_next_logits(model, device)

