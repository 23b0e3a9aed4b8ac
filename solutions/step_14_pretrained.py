"""Step 14 · Pretrained weights.

Steps 01-11 built GPT-2 with random weights. OpenAI's trained weights come as a
**checkpoint**, a folder of files on the Hugging Face Hub:

    config.json          the sizes: n_embd, n_layer, n_head, vocab_size, n_positions
    model.safetensors    every weight, by name ("h.0.attn.c_attn.weight": [768, 2304])
    pytorch_model.bin    the same in PyTorch's older pickle format (the fallback)
    vocab.json           the tokenizer's files (step 12)
    merges.txt

Loading converts them, name by name, into the model of step 11:

    checkpoint key               shape [in, out]   ->  model parameter                      shape [out, in]
    h.0.attn.c_attn.weight       [768, 2304]           transformer.h.0.attn.c_attn.weight   [2304, 768]
    wte.weight                   [50257, 768]          transformer.wte.weight               [50257, 768]
    h.0.attn.bias                [1, 1, 1024, 1024]    (dropped: a saved causal mask, not a weight)
    lm_head.weight               [50257, 768]          (dropped: the tied head is wte, step 11)

``course/checkpoints.py`` finds the files (a folder, or a Hub id such as ``gpt2``
from the Hugging Face cache, else downloaded once), reads and vets them; every
problem there is a :class:`CheckpointError` of one line: what is wrong, what to do.

Check this step with ``pixi run s14``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
from max.experimental import functional as F
from max.experimental.tensor import Tensor

from course.checkpoints import CheckpointError, find
from step_01_config import GPT2Config
from step_11_lm_head import GPT2LMHeadModel
from step_12_tokenizer import Tokenizer

#: The name of GPT2LMHeadModel's body (step 11): every parameter's name starts with it.
PREFIX = "transformer."


@dataclass
class Pretrained:
    """A loaded checkpoint: its config, its weights in the model's layout, and its folder."""

    config: GPT2Config
    state: dict[str, np.ndarray]  # GPT2LMHeadModel(config)'s parameter names -> float32 arrays
    folder: Path  # holds config.json, vocab.json and merges.txt


# ANCHOR: config_from_json
def config_from_json(values: dict) -> GPT2Config:
    """GPT-2's sizes from a checkpoint's config.json, already parsed into a dict."""
    # TODO 1: Build a GPT2Config from the entries whose key is one of GPT2Config's
    #   fields; leave out the others ("architectures", "n_ctx", ...). A field the
    #   file does not name keeps its default.
    # Hint: dataclasses.fields(GPT2Config) lists the fields; each has a .name.
    # ANCHOR: config_fields | stub: return None
    names = {field.name for field in fields(GPT2Config)}
    return GPT2Config(**{key: value for key, value in values.items() if key in names})
    # ANCHOR_END: config_fields
# ANCHOR_END: config_from_json


# ANCHOR: is_weight
def is_weight(key: str) -> bool:
    """Whether a checkpoint entry is one of the model's weights (True) or left out (False)."""
    # TODO 2: Return False for the keys the model has no parameter for, True for
    #   the others. Not weights: the attention's buffers (".attn.bias" and
    #   ".attn.masked_bias", a causal mask that old checkpoints save; step 02 builds
    #   it) and "lm_head.weight", the tied head (the model reuses wte).
    # Hint: mind the dot. "h.0.attn.c_attn.bias" is c_attn's bias, a weight; only
    #   a key ending in ".attn.bias" is the buffer.
    # ANCHOR: skip | stub: return None
    return not (key.endswith((".attn.bias", ".attn.masked_bias")) or key == "lm_head.weight")
    # ANCHOR_END: skip
# ANCHOR_END: is_weight


# ANCHOR: max_name
def max_name(key: str) -> str:
    """The model's name for a checkpoint weight: "h.0.mlp.c_fc.weight" -> "transformer.h.0.mlp.c_fc.weight"."""
    # TODO 3: Put every weight under PREFIX ("transformer."), the name of
    #   GPT2LMHeadModel's body (step 11). The original gpt2 checkpoint has no prefix
    #   ("wte.weight", "h.0.ln_1.bias"); what save_pretrained writes already has it.
    # Hint: add the prefix only where it is missing, never twice.
    # ANCHOR: name | stub: return None
    return key if key.startswith(PREFIX) else PREFIX + key
    # ANCHOR_END: name
# ANCHOR_END: max_name


# ANCHOR: to_max_layout
def to_max_layout(name: str, value: np.ndarray) -> np.ndarray:
    """A weight as the model keeps it: Conv1D weights transposed, everything else as stored."""
    # TODO 4: Return the four Conv1D weights (attn.c_attn, attn.c_proj, mlp.c_fc and
    #   mlp.c_proj, stored [in, out]) transposed to the [out, in] of MAX's Linear,
    #   and every other value as it is: wte and wpe are tables of rows, biases and
    #   layer-norm parameters are 1-D.
    # Hint: one str.endswith call takes a tuple of endings; a NumPy array has a transpose.
    #   attn.c_proj is square and loads either way: only the numbers show a missed one
    #   (mlp.c_proj is [4C, C], so its shape shows).
    # ANCHOR: layout | stub: return None
    if name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
        return value.T
    return value
    # ANCHOR_END: layout
# ANCHOR_END: to_max_layout


# ANCHOR: convert
def convert(checkpoint: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A checkpoint's weights -> the model's names and layouts, in float32 (given).

    Empties ``checkpoint`` as it goes, so that a 6 GB checkpoint is never held twice.
    """
    state = {}
    for key in list(checkpoint):
        value = checkpoint.pop(key)
        if is_weight(key):
            name = max_name(key)
            if name in state:
                raise CheckpointError(f"the checkpoint holds the weight {name} twice (one of them as {key})")
            state[name] = np.ascontiguousarray(to_max_layout(name, value), dtype=np.float32)
    return state
# ANCHOR_END: convert


# ANCHOR: load_pretrained
def load_pretrained(model: str) -> Pretrained:
    """A GPT-2 checkpoint by Hub id ("gpt2", "gpt2-medium", ...) or local folder, converted for MAX (given)."""
    checkpoint = find(model)  # the folder, or the Hub id through the cache (or a download)
    config = config_from_json(checkpoint.config)  # config.json, parsed (TODO 1)
    state = convert(checkpoint.read_weights())  # TODOs 2-4
    checkpoint.check(state, GPT2LMHeadModel, config)  # every weight of its shape; the vocabulary fits
    return Pretrained(config=config, state=state, folder=checkpoint.folder)


def from_pretrained(model: str) -> tuple[GPT2LMHeadModel, Tokenizer]:
    """Step 11's model with a checkpoint's weights loaded, and step 12's tokenizer from its files (given)."""
    loaded = load_pretrained(model)
    with F.lazy():
        gpt2 = GPT2LMHeadModel(loaded.config)
    gpt2.load_state_dict({name: Tensor.from_dlpack(value) for name, value in loaded.state.items()})
    return gpt2, Tokenizer.from_dir(loaded.folder)
# ANCHOR_END: load_pretrained
