# Your file for step 21: fill in its TODOs, then run `pixi run s21`.
# (Rendered from solutions/step_21_gqa.py by `python -m course.authoring.render`.)
"""Step 21 · Grouped-query attention with RoPE.

Llama's attention is step 07's, with three changes:

* **Four projections, no biases.** ``q_proj``, ``k_proj``, ``v_proj`` and
  ``o_proj`` are separate ``Linear`` layers, stored ``[out, in]`` as the
  checkpoint does, instead of GPT-2's one ``c_attn`` and its ``c_proj``.
* **RoPE.** Queries and keys are rotated by their positions (step 19) after
  the heads are split and before the scores; values are not. There is no
  ``wpe``: this is the only place where a Llama learns where a token is.
* **Grouped-query attention (GQA).** There are fewer key/value heads than query
  heads. ``k_proj`` and ``v_proj`` make ``num_key_value_heads`` heads, and each
  serves ``num_key_value_groups`` consecutive query heads:

      query head   0 1 2 | 3 4 5 | 6 7 8        SmolLM2-135M: 9 query heads
      k/v head     0 0 0 | 1 1 1 | 2 2 2                      3 key/value heads

  Before the scores, each key/value head is repeated for its group, so that
  attention sees as many key and value heads as query heads. The cache (step
  24) keeps only the unrepeated ones: three times smaller for SmolLM2.

With ``num_key_value_heads == num_attention_heads`` this is ordinary multi-head
attention; with 1, every query head shares one key and one value (multi-query
attention).

Shapes (H query heads, K key/value heads, D = head_dim, C = hidden_size = H·D):

    x                     [B, T, C]
    q_proj(x)             [B, T, H·D]    -> split_heads -> [B, H, T, D] -> RoPE
    k_proj(x), v_proj(x)  [B, T, K·D]    -> split_heads -> [B, K, T, D] (k: RoPE)
    repeat_kv(k), (v)     [B, H, T, D]
    attend                [B, H, T, D]   step 07's, with step 02's mask
    merge_heads, o_proj   [B, T, C]

Step 07's ``attend``, ``mask`` and ``merge_heads`` are reused as they are: this
class inherits them.

Check this step with ``pixi run s21``.
"""

from __future__ import annotations

from max.experimental import functional as F
from max.experimental.nn import Linear
from max.experimental.tensor import Tensor

from step_07_attention import CausalSelfAttention
from step_17_llama_config import LlamaConfig
from step_19_rope import apply_rope, rope_tables


class LlamaAttention(CausalSelfAttention):
    """Llama's grouped-query self-attention, with rotary position embeddings."""

    def __init__(self, config: LlamaConfig):
        self.n_head = config.num_attention_heads
        self.n_kv_head = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.n_embd = config.num_attention_heads * config.head_dim  # what merge_heads joins the heads into
        self.rope_theta = config.rope_theta
        # TODO 1: Create the four projections q_proj, k_proj, v_proj and o_proj: Linear
        #   layers without a bias, each as wide as the checkpoint's weight of that name.
        # Hint: the shapes in the docstring above: how many heads does each projection
        #   make (or, for o_proj, take in), and how wide is a head?
        self.q_proj = self.k_proj = self.v_proj = self.o_proj = None

    def split_heads(self, x: Tensor) -> Tensor:
        """[B, T, n·D] -> [B, n, T, D] for any number n of heads (given: step 07's split, with n
        read from the width, so that it serves queries and the fewer keys and values alike)."""
        heads = int(x.shape[-1]) // self.head_dim
        return x.reshape([x.shape[0], x.shape[1], heads, self.head_dim]).transpose(1, 2)

    def repeat_kv(self, x: Tensor) -> Tensor:
        """[B, K, T, D] -> [B, H, T, D]: each key/value head repeated for the query heads it serves."""
        batch, heads, seq_len, head_dim = x.shape
        groups = self.n_head // self.n_kv_head
        # TODO 2: Repeat each key/value head `groups` times in place, so that query heads
        #   0 … groups-1 see key/value head 0, the next `groups` see head 1, and so on:
        #   [k0, k0, k1, k1], not [k0, k1, k0, k1].
        # Hint: reshape only regroups numbers in their memory order. Copies that sit right
        #   behind their own head, on an axis of their own, merge into [k0, k0, k1, k1];
        #   copies joined along the heads axis itself come out tiled.
        return None

    def forward(self, x: Tensor) -> Tensor:
        # TODO 3: Project x to q, k and v and split each into heads; rotate q and k (not v)
        #   with step 19's tables for the positions 0 … T-1; repeat k and v for the
        #   groups; attend (step 07's); merge the heads and project with o_proj.
        # Hint: step 19's two functions are imported above: which of the attributes set in
        #   __init__ does the table need, and how many positions? RoPE before repeat_kv or
        #   after gives the same numbers; before, it rotates fewer heads.
        return None
