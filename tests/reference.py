"""The Hugging Face side of every check: configs, seeded modules, and weight conversion.

Two configurations:

* ``SMALL``: one small GPT-2 shared by every step (width 64, 4 heads, 2 layers,
  a 96-token vocabulary). Shared shapes keep checks fast.
* ``GPT2_SMALL``: the real GPT-2 small dimensions (768 wide, 12 heads, 12 layers,
  50257 tokens), used where a step's shapes matter.

Weights are seeded random numbers, never ones or zeros: a transposed square
matrix or a swapped scale and shift would go unnoticed otherwise.
"""

from __future__ import annotations

import numpy as np
import torch
import transformers
from transformers.pytorch_utils import Conv1D

SMALL = dict(vocab_size=96, n_positions=32, n_embd=64, n_layer=2, n_head=4)
GPT2_SMALL = dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12)
CONFIGS = {"small": SMALL, "gpt2-small": GPT2_SMALL}


def hf_config(**sizes) -> transformers.GPT2Config:
    """A Hugging Face GPT-2 config in float32 with the eager attention implementation."""
    vocab = sizes.get("vocab_size", 50257)
    config = transformers.GPT2Config(
        **sizes,
        # Inside the vocabulary (a small vocab would otherwise warn about 50256).
        bos_token_id=vocab - 1,
        eos_token_id=vocab - 1,
        # Inference only: no dropout anywhere, so outputs are deterministic.
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    config._attn_implementation = "eager"  # the reference that can return attention weights
    return config


def seeded(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Gives every parameter of ``module`` seeded random values, scaled to keep activations O(1).

    Matrices get std 1.5/sqrt(fan_in), so pre-activations have std ~1.5 and GELU's
    curved region is exercised; vectors (biases, layer-norm scales and shifts)
    get std 0.5 around 0 or, for a scale, around 1.
    """
    generator = torch.Generator().manual_seed(seed)
    conv1d = _conv1d_weights(module)
    with torch.no_grad():
        for name, param in module.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if param.ndim >= 2:
                fan_in = param.shape[0] if name in conv1d else param.shape[-1]
                param.copy_(noise * 1.5 / fan_in**0.5)
            elif name.endswith("weight"):  # a layer norm's scale
                param.copy_(1.0 + 0.5 * noise)
            else:
                param.copy_(0.5 * noise)
    return module.eval()


def _conv1d_weights(module: torch.nn.Module) -> set[str]:
    """The names of the weights Hugging Face stores as Conv1D, ``[in, out]``."""
    return {
        f"{name}.weight" if name else "weight"
        for name, sub in module.named_modules()
        if isinstance(sub, Conv1D)
    }


def to_max_state(module: torch.nn.Module) -> dict[str, np.ndarray]:
    """Hugging Face weights as MAX expects them, keyed by the checkpoint's names.

    * Conv1D layers (``c_attn``, ``c_proj``, ``c_fc``) store their weight as
      ``[in, out]``; MAX's ``Linear`` keeps ``[out, in]``, so those are transposed.
    * The attention's ``bias``/``masked_bias`` buffers are not parameters, so they
      are not here.
    * ``lm_head.weight`` is tied to ``transformer.wte.weight``: the same tensor.
      It appears once, as ``transformer.wte.weight``; a MAX model ties its head to
      its token embedding instead of loading a second copy.
    """
    conv1d = _conv1d_weights(module)
    state = {}
    for name, param in module.named_parameters():  # a tied tensor is listed once, first name
        value = param.detach().to(torch.float32).numpy()
        state[name] = np.ascontiguousarray(value.T if name in conv1d else value)
    return state


def hidden_states(*shape: int, seed: int = 1, scale: float = 1.0) -> np.ndarray:
    """Seeded float32 activations of the given shape."""
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def run(module: torch.nn.Module, *inputs: np.ndarray) -> np.ndarray:
    """Runs a Hugging Face module on NumPy inputs; returns float32 NumPy."""
    with torch.no_grad():
        out = module(*(torch.from_numpy(x) for x in inputs))
    if isinstance(out, tuple):
        out = out[0]
    return out.numpy().astype(np.float32)
