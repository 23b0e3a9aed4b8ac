# Your file for step 22: fill in its TODOs, then run `pixi run s22`.
# (Rendered from solutions/step_22_llama_model.py by `python -m course.authoring.render`.)
"""Step 22 · The Llama decoder layer, model and head.

The pieces of steps 18 to 21 assemble as GPT-2's did in steps 09 to 11, with
Hugging Face's names:

    LlamaDecoderLayer                      (GPT-2: Block, step 09)
        x = x + self_attn(input_layernorm(x))              step 08's residual
        x = x + mlp(post_attention_layernorm(x))
    LlamaModel                             (GPT-2: GPT2Model, step 10)
        embed_tokens -> num_hidden_layers layers -> norm
    LlamaForCausalLM                       (GPT-2: GPT2LMHeadModel, step 11)
        model -> head: logits for every position

Two differences from GPT-2:

* **No position embeddings.** ``embed_tokens`` is the only table; positions
  enter each layer's attention through RoPE (steps 19 and 21).
* **The head may be tied or not.** SmolLM2-135M reuses ``embed_tokens``'s
  matrix for the head, as GPT-2 does (``tie_word_embeddings: true``). Larger
  Llamas keep a separate ``lm_head.weight`` ``[vocab_size, hidden_size]`` in the
  checkpoint, and the model must have that parameter for it to load.

The norms all use ``config.rms_norm_eps``. The names are the checkpoint's, so
``model.layers.3.self_attn.k_proj.weight`` loads by name.

Check this step with ``pixi run s22``.
"""

from __future__ import annotations

from max.experimental.nn import Embedding, Linear, Module, ModuleList
from max.experimental.tensor import Tensor

from step_08_residual import residual
from step_17_llama_config import LlamaConfig
from step_18_rms_norm import RMSNorm
from step_20_swiglu import LlamaMLP
from step_21_gqa import LlamaAttention


class LlamaDecoderLayer(Module):
    """One Llama layer: attention and the SwiGLU MLP, each in a pre-norm residual branch."""

    def __init__(self, config: LlamaConfig):
        # TODO 1: Create the four sublayers, with the checkpoint's names:
        #   input_layernorm           an RMSNorm over hidden_size, before attention
        #   self_attn                 step 21's LlamaAttention
        #   post_attention_layernorm  an RMSNorm over hidden_size, before the MLP
        #   mlp                       step 20's LlamaMLP
        # Hint: both norms take the config's rms_norm_eps.
        self.input_layernorm = self.self_attn = self.post_attention_layernorm = self.mlp = None

    def forward(self, x: Tensor) -> Tensor:
        # TODO 2: The two residual branches, attention first, as in step 09.
        # Hint: step 08's residual(x, norm, sublayer) is one branch.
        return None




class LlamaModel(Module):
    """The Llama body: token embeddings, ``num_hidden_layers`` layers and the final norm."""

    def __init__(self, config: LlamaConfig):
        # TODO 3: Create embed_tokens (an Embedding of vocab_size rows of hidden_size),
        #   layers (a ModuleList of num_hidden_layers LlamaDecoderLayers) and norm (an
        #   RMSNorm over hidden_size with rms_norm_eps).
        self.embed_tokens = self.layers = self.norm = None

    def forward(self, input_ids: Tensor) -> Tensor:
        # TODO 4: Embed the ids, run every layer in order, and apply the final norm.
        # Hint: no position embeddings here: RoPE is inside each layer's attention.
        return None




class LlamaForCausalLM(Module):
    """A Llama with its language-model head: token ids in, logits for every position out."""

    def __init__(self, config: LlamaConfig):
        self.model = LlamaModel(config)
        self.tie_word_embeddings = config.tie_word_embeddings
        # TODO 5: When the head is not tied, create lm_head, a Linear from hidden_size to
        #   vocab_size without a bias. When it is tied, create nothing: the checkpoint
        #   has no lm_head.weight to load.
        pass

    def head(self, hidden: Tensor) -> Tensor:
        """Hidden vectors [..., hidden_size] -> logits [..., vocab_size]."""
        # TODO 6: Tied: multiply by embed_tokens's matrix, as step 11 did with wte.
        #   Untied: apply lm_head.
        return None

    def forward(self, input_ids: Tensor) -> Tensor:
        return self.head(self.model(input_ids))
