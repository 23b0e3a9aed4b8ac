"""The one road from a checkpoint to a compiled model: ``main``, ``gpt2``, ``bench`` and the tests take it.

    steps = import_steps("solutions", ...)                     # whose code: solutions/ or a learner's steps/
    pretrained = load(steps, "gpt2")                           # step 14: found, read, converted, vetted
    next_logits = compile_model(steps, pretrained, device,     # step 11 or 15's model, compiled: ids -> logits
                                cached=True, quantize="q4_0")

A Llama checkpoint (Part II) takes the same road through its own steps: ``family(model)`` reads
config.json's model_type, ``load(steps, model, "llama")`` is step 23's loader, and
``compile_model`` builds step 22's model (no cache) or step 24's cached one.

Random weights take the same road: :func:`course.weights.random_checkpoint` writes
them as a checkpoint folder first (bench does), so every check along the way (each
weight's name and shape, the vocabulary against ``vocab_size``) runs on them too.
"""

from __future__ import annotations

from course import runtime


#: The steps each family's programs import: everything up to its loader, and its cache.
NEEDED = {"gpt2": (list(range(1, 15)), 15), "llama": ([*range(1, 15), *range(17, 24)], 24)}
#: Each family's name in messages.
NAMES = {"gpt2": "GPT-2", "llama": "Llama"}


def family(model: str) -> str:
    """"gpt2" or "llama": the family of the checkpoint ``model`` names (config.json's model_type).

    Raises :class:`course.checkpoints.CheckpointError` (one line) when it cannot be found."""
    from course.checkpoints import find

    return find(model).family


def is_llama(config) -> bool:
    """Whether a loaded config is step 17's LlamaConfig (else it is step 01's GPT2Config)."""
    return hasattr(config, "num_key_value_heads")


def context(config) -> int:
    """The positions the model learned: GPT-2's n_positions, a Llama's max_position_embeddings."""
    return config.max_position_embeddings if is_llama(config) else config.n_positions


def layers(config) -> int:
    return config.num_hidden_layers if is_llama(config) else config.n_layer


def load(steps: dict[int, object], model: str, family: str):
    """Step 14's ``load_pretrained(model)`` (a Llama's: step 23's): a Hub id or folder, found, read,
    converted and vetted.

    Raises :class:`course.checkpoints.CheckpointError` (one line) for a checkpoint it cannot use.
    """
    return steps[23 if family == "llama" else 14].load_pretrained(model)


def cache_type(kernel: bool, quantize: str | None) -> str:
    """The type of step 16's KV cache on a road: float16 where the Mojo attention reads quantized weights' cache
    (as llama.cpp keeps its), float32 otherwise (float32's road stays exact)."""
    return "float16" if kernel and quantize else "float32"


def compile_model(steps: dict[int, object], pretrained, device, cached: bool, quantize: str | None = None,
                  decode: bool = False, kernel: bool = False, prefill_from: int = 1):
    """Step 11's model (or step 15's cached one, or with ``decode`` step 16's) with the checkpoint's
    weights, compiled into ``next_logits(ids) -> [vocab_size]``.

    ``decode``: step 16's model and runner: a decode graph that multiplies each weight by
    one row as ``W @ xᵀ`` and reads a cache allocated once; on the CPU the weights and
    that cache lie on huge pages (the appendix "Past the roofline", "Fewer ops, and huge pages"). With ``quantize`` too, its
    Linear layers and head are the quantized ones, and only the cache is step 16's.
    ``kernel`` (with ``decode``, on the CPU): step 16's ``KernelGPT2LMHeadModel``, whose attention
    and one-row products are the course's Mojo kernels. With ``quantize`` too, its attention
    reads a float16 cache (as llama.cpp's does), and its one-row products are the Mojo kernel
    of each format (``course.programs.generate.ONE_ROW_KERNELS``: q4_0, q4_k and q6_k, each with its
    layer norm, bias, GELU and residual add in the product's op). ``prefill_from`` (with ``decode``): step 16's
    shortest prompt that runs the prefill graph, compiled on its first use; shorter ones go through the decode
    graph token by token.

    With ``quantize`` (q4_0, q4_k or q6_k), the model's Linear layers and its head are
    built quantized from the checkpoint's float32 arrays (``course.programs.quantize``)
    before anything is loaded, so that their float32 weights are never loaded at all.
    """
    import numpy as np
    from max.experimental import functional as F

    config, state = pretrained.config, pretrained.state
    if is_llama(config):
        return _compile_llama(steps, pretrained, device, cached, quantize, decode or kernel)
    if kernel and (not decode or device.label != "cpu"):
        raise ValueError(f"the Mojo kernels serve step 16's decode graph on the CPU, not decode={decode} on {device.label}")
    model_class = steps[16].KernelGPT2LMHeadModel if kernel else steps[16].DecodeGPT2LMHeadModel if decode else (
        steps[15].CachedGPT2LMHeadModel if cached else steps[11].GPT2LMHeadModel)
    with F.lazy():
        model = model_class(config)
    swapped = {}
    if quantize:
        from course.programs.quantize import quantize_model

        swapped = quantize_model(model, state, quantize, kernel)
    weights = {name: swapped[name] if name in swapped else state[name] for name, _ in model.parameters}
    if decode and device.label == "cpu":  # step 16's road streams them: on 2 MiB pages (the appendix "Past the roofline")
        weights = runtime.on_huge_pages(weights)
        state.update({name: weights[name] for name in weights.keys() - swapped.keys()})  # held once, not twice
    model.load_state_dict({name: runtime.from_numpy(w) if isinstance(w, np.ndarray) else w
                           for name, w in weights.items()})
    if decode:
        from max.dtype import DType

        runner = steps[16].DecodeNextLogits(model, config, device, getattr(DType, cache_type(kernel, quantize)),
                                            prefill_from)
        if device.label == "cpu":  # its KV cache too: a decode step streams it as it streams the weights
            runner.key_cache, runner.value_cache = _on_huge_pages(runner.key_cache), _on_huge_pages(runner.value_cache)
        return runner
    if cached:
        return steps[15].CachedNextLogits(model, config, device)
    return steps[13].compile_next_logits(model, device)


def _on_huge_pages(buffers: list) -> list:
    """MAX buffers on the CPU moved onto huge pages (``runtime.on_huge_pages``): each a MAX buffer over its view, which
    keeps the memory mapped while the buffer lives."""
    from max.driver import Buffer

    views = runtime.on_huge_pages(dict(enumerate(buffers)))
    return [Buffer.from_dlpack(views[i]) for i in range(len(buffers))]


def _compile_llama(steps: dict[int, object], pretrained, device, cached: bool, quantize: str | None, decode: bool):
    """Part II's Llama: step 22's model (no cache, step 13's graph) or step 24's cached one."""
    from max.experimental import functional as F

    if quantize or decode:
        flag = "--quantize" if quantize else "step 16's decode graph"
        raise ValueError(f"{flag} runs Part I's GPT-2 (chapters 15 and 16); Part II's Llama runs in float32")
    config = pretrained.config
    with F.lazy():
        model = (steps[24].CachedLlamaForCausalLM if cached else steps[22].LlamaForCausalLM)(config)
    model.load_state_dict({name: runtime.from_numpy(pretrained.state[name]) for name, _ in model.parameters})
    if cached:
        return steps[24].CachedLlamaNextLogits(model, config, device)
    return steps[13].compile_next_logits(model, device)
