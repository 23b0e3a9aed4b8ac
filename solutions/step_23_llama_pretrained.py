"""Step 23 · Loading a Llama checkpoint.

A Llama checkpoint is a folder like GPT-2's (step 14): ``config.json``,
``model.safetensors`` and the tokenizer's files, found by the same
``course/checkpoints.py`` (a folder, or a Hub id such as
``HuggingFaceTB/SmolLM2-135M`` from the Hugging Face cache). Three things
differ:

* **config.json's names are step 17's,** except where transformers moved one:
  transformers 4 wrote ``"rope_theta": 100000`` at the top level; transformers 5
  writes ``"rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"}``.
  A loader must read both, since the Hub holds both.
* **The weights need no transposing.** Llama's layers are ``nn.Linear``,
  ``[out, in]``, as MAX's ``Linear`` keeps them: step 14's Conv1D work is gone.
* **The head may be untied.** With ``tie_word_embeddings: false`` the checkpoint
  holds ``lm_head.weight`` and step 22's model has an ``lm_head`` to take it.
  With a tied head, a checkpoint may still carry a copy of ``embed_tokens``
  under ``lm_head.weight`` (older saves do), which the model has no place for.

Older checkpoints also save each layer's RoPE frequencies as a buffer,
``model.layers.N.self_attn.rotary_emb.inv_freq``: step 19 computes them, so they
are not weights.

    checkpoint key                           ->  model parameter (step 22)
    model.layers.0.self_attn.q_proj.weight       model.layers.0.self_attn.q_proj.weight   (as it is)
    layers.0.mlp.gate_proj.weight                model.layers.0.mlp.gate_proj.weight      (a LlamaModel's save)
    model.layers.0.self_attn.rotary_emb.inv_freq (dropped: step 19 computes it)
    lm_head.weight                               lm_head.weight if untied, else dropped

Check this step with ``pixi run s23``.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np
from max.experimental import functional as F
from max.experimental.tensor import Tensor

from course.checkpoints import CheckpointError, find
from step_12_tokenizer import Tokenizer
from step_14_pretrained import Pretrained  # config, state and folder: the same record as GPT-2's
from step_17_llama_config import LlamaConfig
from step_22_llama_model import LlamaForCausalLM

#: The name of LlamaForCausalLM's body (step 22): every parameter but lm_head.weight starts with it.
PREFIX = "model."


# ANCHOR: config_from_json
def config_from_json(values: dict) -> LlamaConfig:
    """A LlamaConfig from a checkpoint's config.json, already parsed into a dict."""
    # TODO 1: Build a LlamaConfig from the entries whose key is one of its fields, as in
    #   step 14. rope_theta may be at the top level (transformers 4) or under
    #   values["rope_parameters"]["rope_theta"] (transformers 5): take it from where it is.
    # Hint: a field the file does not name keeps its default, SmolLM2's 100,000 for
    #   rope_theta; a Llama 3 checkpoint's 500,000 must not become it.
    # ANCHOR: config_fields | stub: return None
    names = {field.name for field in fields(LlamaConfig)}
    settings = {key: value for key, value in values.items() if key in names}
    rope = values.get("rope_parameters") or {}
    if "rope_theta" in rope:
        settings["rope_theta"] = rope["rope_theta"]
    return LlamaConfig(**settings)
    # ANCHOR_END: config_fields


# ANCHOR_END: config_from_json


# ANCHOR: is_weight
def is_weight(key: str, config: LlamaConfig) -> bool:
    """Whether a checkpoint entry is one of the model's weights (True) or left out (False)."""
    # TODO 2: Return False for the RoPE buffers (keys ending in "rotary_emb.inv_freq") and,
    #   when config.tie_word_embeddings is set, for "lm_head.weight"; True for the others.
    # ANCHOR: skip | stub: return None
    if key.endswith("rotary_emb.inv_freq"):
        return False
    return not (key == "lm_head.weight" and config.tie_word_embeddings)
    # ANCHOR_END: skip


# ANCHOR_END: is_weight


# ANCHOR: max_name
def max_name(key: str) -> str:
    """The model's name for a checkpoint weight: "layers.0.mlp.up_proj.weight" -> "model.layers.0.mlp.up_proj.weight"."""
    # TODO 3: Put every weight but "lm_head.weight" under PREFIX ("model."), the name of
    #   LlamaForCausalLM's body. A LlamaForCausalLM's save has it already; a LlamaModel's
    #   save (the body alone) does not.
    # Hint: never twice, and never on lm_head.weight, which sits beside the body.
    # ANCHOR: name | stub: return None
    if key == "lm_head.weight" or key.startswith(PREFIX):
        return key
    return PREFIX + key
    # ANCHOR_END: name


# ANCHOR_END: max_name


# ANCHOR: load_pretrained
def convert(checkpoint: dict[str, np.ndarray], config: LlamaConfig) -> dict[str, np.ndarray]:
    """A checkpoint's weights -> the model's names, in float32 (given). Empties ``checkpoint`` as it goes."""
    state = {}
    for key in list(checkpoint):
        value = checkpoint.pop(key)
        if is_weight(key, config):
            name = max_name(key)
            if name in state:
                raise CheckpointError(f"the checkpoint holds the weight {name} twice (one of them as {key})")
            state[name] = np.ascontiguousarray(value, dtype=np.float32)
    return state


def load_pretrained(model: str) -> Pretrained:
    """A Llama-family checkpoint by Hub id or local folder, converted for MAX (given)."""
    checkpoint = find(model)  # the folder, or the Hub id through the cache (or a download)
    config = config_from_json(checkpoint.config_of("llama"))  # refused unless a Llama the course computes
    state = convert(checkpoint.read_weights(), config)  # TODOs 2 and 3
    checkpoint.check(state, LlamaForCausalLM, config)  # every weight of its shape; the vocabulary fits
    return Pretrained(config=config, state=state, folder=checkpoint.folder)


def from_pretrained(model: str) -> tuple[LlamaForCausalLM, Tokenizer]:
    """Step 22's model with a checkpoint's weights loaded, and step 12's tokenizer from its files (given)."""
    loaded = load_pretrained(model)
    with F.lazy():
        llama = LlamaForCausalLM(loaded.config)
    llama.load_state_dict({name: Tensor.from_dlpack(value) for name, value in loaded.state.items()})
    return llama, Tokenizer.from_dir(loaded.folder)


# ANCHOR_END: load_pretrained
