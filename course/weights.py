"""Seeded random weights: the one helper behind the checks' references, the book's experiments and bench.

Two kinds, from one seeded NumPy generator, drawn in the order the names come:

* ``std=None``, **check weights** (the tests' Hugging Face references): every
  matrix ~ N(0, (1.5/√fan_in)²), so that pre-activations have a standard
  deviation near 1.5 and GELU's curved region is exercised; layer-norm scales
  1 + N(0, 0.5²) and every other vector N(0, 0.5²). Never ones or zeros: a
  transposed square matrix or a swapped scale and shift must change the numbers.
* ``std=0.02`` (or another value), **GPT-2's own initialization**: matrices
  ~ N(0, std²), biases 0, layer-norm scales 1. The book's experiments and bench.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np


def random_weights(
    shapes: Mapping[str, Sequence[int]],
    seed: int = 0,
    std: float | None = None,
    fan_in: Callable[[str, tuple[int, ...]], int] | None = None,
) -> dict[str, np.ndarray]:
    """``{name: float32 array}`` for every ``{name: shape}``, seeded.

    ``fan_in(name, shape)`` gives a matrix's input width for check weights; by
    default the last axis (``[out, in]``, as MAX's and PyTorch's Linear store it).
    """
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in shapes.items():
        shape = tuple(int(d) for d in shape)
        if len(shape) >= 2:
            scale = std if std is not None else 1.5 / math.sqrt(fan_in(name, shape) if fan_in else shape[-1])
            value = rng.standard_normal(shape) * scale
        elif std is not None:
            value = np.zeros(shape) if name.endswith("bias") else np.ones(shape)
        else:
            noise = rng.standard_normal(shape) * 0.5
            value = 1.0 + noise if name.endswith("weight") else noise
        out[name] = value.astype(np.float32)
    return out


def shapes_of(parameters: Iterable[tuple[str, object]]) -> dict[str, tuple[int, ...]]:
    """``{name: shape}`` from a module's ``(name, tensor)`` pairs (MAX's ``.parameters``, torch's
    ``named_parameters()``)."""
    return {name: tuple(int(d) for d in tensor.shape) for name, tensor in parameters}


def init_like_gpt2(module, seed: int = 0, std: float = 0.02) -> None:
    """Loads GPT-2-style random weights into a MAX module built under ``F.lazy()`` (the book's experiments)."""
    from course.runtime import from_numpy

    state = random_weights(shapes_of(module.parameters), seed, std)
    module.load_state_dict({name: from_numpy(value) for name, value in state.items()})


def random_checkpoint(folder, n_layer: int, seed: int = 0, std: float = 0.02):
    """Writes GPT-2 small's sizes (``n_layer`` blocks: 12 is GPT-2 small) with GPT-2-style random weights as a checkpoint
    folder, as ``save_pretrained`` does, with GPT-2's tokenizer files; returns the folder.

    bench times every path on it through the same road as a real checkpoint.
    """
    import shutil
    from pathlib import Path

    import torch
    import transformers

    from course.outline import GPT2_TOKENIZER

    transformers.utils.logging.disable_progress_bar()  # save_pretrained's bar would break bench's status line
    folder = Path(folder)
    config = transformers.GPT2Config(n_layer=n_layer)
    with torch.device("meta"):
        model = transformers.GPT2LMHeadModel(config)
    values = random_weights(shapes_of(model.named_parameters()), seed, std)
    model = model.to_empty(device="cpu")
    model.load_state_dict({name: torch.from_numpy(value) for name, value in values.items()}, strict=False)
    model.tie_weights()
    model.save_pretrained(folder)
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(GPT2_TOKENIZER / name, folder / name)
    return folder
