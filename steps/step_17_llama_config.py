# Your file for step 17: fill in its TODOs, then run `pixi run s17`.
# (Rendered from solutions/step_17_llama_config.py by `python -m course.authoring.render`.)
"""Step 17 · The Llama configuration.

Part II builds the Llama family: the design of Meta's Llama models, which most
open models since (Mistral, Qwen, SmolLM, …) share with small changes. The
course's example is Hugging Face's SmolLM2-135M, a 135M-parameter Llama about
the size of GPT-2 small.

As in step 01, a config object names the sizes once. The field names are the
ones in a Llama ``config.json``; two of them are new to you:

* ``num_key_value_heads``: Llama's attention may give several query heads one
  shared key and value head (grouped-query attention, step 21). SmolLM2-135M has
  9 query heads and 3 key/value heads, so each key/value head serves 3 queries.
* ``rope_theta``: the base of the rotary position embedding's frequencies
  (step 19). Llama has no table of learned positions like GPT-2's ``wpe``.

Check this step with ``pixi run s17``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass
class LlamaConfig:
    """The hyperparameters of a Llama model; the defaults are SmolLM2-135M's."""

    # TODO 1: Declare SmolLM2-135M's sizes as dataclass fields with default values:
    #   hidden_size              the width of every token's vector (the residual stream)
    #   intermediate_size        the MLP's hidden width
    #   num_hidden_layers        how many decoder layers are stacked
    #   num_attention_heads      how many query heads share each layer's hidden_size
    #   num_key_value_heads      how many key/value heads those query heads share
    #   vocab_size               how many distinct tokens the tokenizer can produce
    #   max_position_embeddings  the longest sequence the model was trained to read
    # Hint: the chapter's list of fields gives each of SmolLM2-135M's sizes; its
    #   config.json on the Hugging Face Hub holds them too, under these very names
    #   (keep them: they are Hugging Face's).
    pass

    # These three are given: RMSNorm's epsilon (step 18), the base of the rotary
    # embedding's frequencies (step 19), and whether the output head reuses the token
    # embedding's matrix, as GPT-2's does.
    rms_norm_eps: float = 1e-5
    rope_theta: float = 100000.0
    tie_word_embeddings: bool = True

    def __post_init__(self):
        # TODO 2: Raise a ValueError when hidden_size does not split evenly into
        #   num_attention_heads heads, and another when num_attention_heads does not
        #   split evenly into num_key_value_heads groups.
        # Hint: as in step 01, the message names the numbers that disagree.
        pass

    @property
    def head_dim(self) -> int:
        """The width of one attention head (query, key and value heads alike)."""
        # TODO 3: Return the width of one head.
        return None

    @property
    def num_key_value_groups(self) -> int:
        """How many query heads share each key/value head."""
        # TODO 4: Return how many query heads each key/value head serves.
        return None

    @classmethod
    def from_hf(cls, hf_config) -> LlamaConfig:
        """Builds a config from a ``transformers.LlamaConfig``."""
        # TODO 5: Copy every field of this dataclass from the attribute of the same
        #   name, as in step 01, except rope_theta: transformers 5 keeps it in the
        #   dict hf_config.rope_parameters, under the key "rope_theta".
        # Hint: build the keyword arguments first, then replace the one that differs.
        return None
