"""Step 01 · Model configuration.

Every GPT-2, from the 124M "small" model to the 1.5B "XL", is the same network
with different sizes. A config object names those sizes once, so that every
later step reads ``config.n_embd`` instead of a bare 768.

The field names are the ones in Hugging Face's ``config.json`` for GPT-2, so a
pretrained checkpoint's config loads straight into this class (step 14).

Check this step with ``pixi run s01``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


# ANCHOR: config
@dataclass
class GPT2Config:
    """The hyperparameters of GPT-2; the defaults are GPT-2 small (124M)."""

    # TODO 1: Declare GPT-2 small's sizes as dataclass fields with default values:
    #   vocab_size   how many distinct tokens the tokenizer can produce
    #   n_positions  the longest sequence the model can attend over (its context)
    #   n_embd       the width of every token's vector (the residual stream)
    #   n_layer      how many transformer blocks are stacked
    #   n_head       how many attention heads share each block's n_embd
    # Hint: the chapter's list of fields gives each size and where it comes from; the
    #   defaults of transformers.GPT2Config() are GPT-2 small's too, under these names.
    # ANCHOR: sizes | stub: pass
    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    # ANCHOR_END: sizes

    # These three are given: the MLP's width (None means 4 * n_embd), the small
    # constant that keeps layer norm from dividing by zero, and the activation's
    # name in Hugging Face's config ("gelu_new" is GELU's tanh approximation).
    n_inner: int | None = None
    layer_norm_epsilon: float = 1e-5
    activation_function: str = "gelu_new"

    def __post_init__(self):
        # TODO 2: Raise a ValueError when n_embd does not split evenly into n_head heads.
        # Hint: say which numbers disagree; a learner who mistypes a size reads this.
        # ANCHOR: validate | stub: pass
        if self.n_embd % self.n_head != 0:
            raise ValueError(
                f"n_embd={self.n_embd} does not split into n_head={self.n_head} equal heads"
            )
        # ANCHOR_END: validate

    @property
    def inner_dim(self) -> int:
        """The MLP's hidden width: n_inner when set, else four times n_embd."""
        # TODO 3: Return n_inner, or 4 * n_embd when n_inner is None.
        # ANCHOR: inner_dim | stub: return None
        return self.n_inner if self.n_inner is not None else 4 * self.n_embd
        # ANCHOR_END: inner_dim

    @property
    def head_dim(self) -> int:
        """The width of one attention head."""
        # TODO 4: Return the width of one head.
        # ANCHOR: head_dim | stub: return None
        return self.n_embd // self.n_head
        # ANCHOR_END: head_dim

    @classmethod
    def from_hf(cls, hf_config) -> GPT2Config:
        """Builds a config from a ``transformers.GPT2Config`` (or anything with the same attributes)."""
        # TODO 5: Copy every field of this dataclass from the attribute of the same name.
        # Hint: dataclasses.fields(cls) lists the fields; getattr reads an attribute by name.
        # ANCHOR: from_hf | stub: return None
        return cls(**{f.name: getattr(hf_config, f.name) for f in fields(cls)})
        # ANCHOR_END: from_hf


# ANCHOR_END: config
