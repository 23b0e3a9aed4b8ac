# Your file for step 10: fill in its TODOs, then run `pixi run s10`.
# (Rendered from solutions/step_10_model.py by `python -m course.authoring.render`.)
"""Step 10 · Stacking blocks: the model body.

GPT-2's body is the embeddings of steps 05–06, ``n_layer`` blocks (step 09) one
after another, and a final layer norm:

    input_ids        [batch, seq]
    wte + wpe        [batch, seq, n_embd]     Embeddings, step 06
    h[0] ... h[L-1]  [batch, seq, n_embd]     n_layer Blocks, step 09
    ln_f             [batch, seq, n_embd]     the last hidden state

Each block reads the residual stream and adds to it. Because GPT-2 normalizes
only inside the branches (pre-norm), the stream has grown through all the
additions by the end; ``ln_f`` normalizes it once before anything reads it.

The blocks live in a list named ``h``, so block ``i``'s weights load as
``h.{i}.attn.c_attn.weight`` and so on, as in the checkpoint. MAX's
``ModuleList`` is a list that is also a module and names its items ``0``, ``1``,
…; it says what ``h`` is. (MAX finds parameters inside a plain list too, unlike
PyTorch, where a plain list hides them.)

``GPT2Model`` *extends* step 06's ``Embeddings``, so ``wte`` and ``wpe`` sit at
the top level as in the checkpoint (``wte.weight``, ``wpe.weight``), and
``super().forward(input_ids)`` is the embedding step.

Check this step with ``pixi run s10``.
"""

from __future__ import annotations

from max.experimental.nn import ModuleList
from max.experimental.tensor import Tensor

from step_01_config import GPT2Config
from step_03_layer_norm import LayerNorm
from step_06_position_embeddings import Embeddings
from step_09_block import Block


class GPT2Model(Embeddings):
    """GPT-2's body: embeddings, ``n_layer`` blocks and the final layer norm."""

    def __init__(self, config: GPT2Config):
        super().__init__(config)  # wte and wpe, from steps 05 and 06
        # TODO 1: Create h, a ModuleList of n_layer Blocks, and ln_f, the final
        #   LayerNorm over n_embd (with the config's epsilon).
        # Hint: ModuleList(...) takes any iterable of modules, a generator included.
        self.h = self.ln_f = None

    def forward(self, input_ids: Tensor) -> Tensor:
        # TODO 2: Embed the ids, run the blocks in order, and return ln_f of the result.
        return None
