# Your file for step 16: fill in its TODOs, then run `pixi run s16`.
# (Rendered from solutions/step_16_memory_limit.py by `python -m course.authoring.render`.)
"""Step 16 · Decoding at the memory limit.

With step 15's cache, a decode step feeds the model one token. Every weight
matrix then multiplies a single row, ``[1, in] x [in, out]``: two flops for each
weight read from memory, and each weight is read once per token. A CPU core does
dozens of flops in the time memory delivers one float32, so a decode step waits
on memory, not on arithmetic. Its speed has a ceiling, the **roofline**:

    tokens per second  <=  memory bandwidth / bytes read per token

GPT-2 small reads 123.7M weights for each token (all of every block, ``ln_f``,
and the tied ``wte`` again as the head; of ``wpe`` and the embedding lookup,
one row each): 495 MB in float32. Memory that moves 30 GB/s cannot decode it
faster than about 60 tokens a second, whatever the kernels do.

How close a kernel gets depends on the order it reads the weights in. MAX's
``Linear`` computes ``x @ Wᵀ`` with W stored ``[out, in]``, a layout made for
many rows at once (the prefill). For one row, the same numbers are the matrix
times a column:

    y = x @ Wᵀ         [1, in] x [in, out]        the prefill's matmul
    yᵀ = W @ xᵀ        [out, in] x [in, 1]        one row: W read front to back

The second form walks W row after row, in memory order, each row a dot product
with the same ``x``: one streaming pass over the weights. Measured with MAX
26.7 on 2 cores it decodes GPT-2 small's sizes about 1.5x faster than step 15
(``pixi run bench``).

This step:

* counts the bytes a decode step reads, for the roofline (TODO 1);
* writes the one-row product as the matrix times a column (TODO 2);
* a ``DecodeLinear`` that uses it for a single row, and step 04's matmul for
  many (TODO 3), and the head the same way (TODO 4);
* reads the cache the same way (TODO 5). Step 15 concatenates each layer's
  cache at every step: a copy of all of it, one token longer. Here the cache
  is allocated once, token-major (``[n_positions, H, D]``, one token's keys
  after another's), the decode graph reads its first ``P`` rows where they
  lie, and the new token's key and value are written into row ``P``;
* (given) compiles the model twice: the prefill graph with a symbolic number of
  new tokens, where each ``DecodeLinear`` sees many rows and keeps the matmul,
  and a decode graph for exactly one new token, where each sees one row.

Check this step with ``pixi run s16``.
"""

from __future__ import annotations

import math

import numpy as np
from max.experimental import functional as F
from max.experimental.nn import Linear, Module
from max.experimental.tensor import Tensor

from step_01_config import GPT2Config
from step_06_position_embeddings import Embeddings
from step_08_residual import residual
from step_15_kv_cache import CachedGPT2LMHeadModel, CachedNextLogits


def bytes_per_token(config: GPT2Config, bytes_per_weight: float = 4) -> float:
    """The bytes of weights one decode step reads: the roofline's numerator."""
    # TODO 1: Count the weights a decode step reads: in each of the n_layer blocks,
    #   ln_1 and ln_2 (a weight and a bias each), c_attn, attn.c_proj, mlp.c_fc and
    #   mlp.c_proj (a matrix and a bias each); then ln_f, and the head, which reads
    #   all of wte. Return that count times bytes_per_weight.
    # Hint: of wpe (and of wte as an embedding) a step reads one row: leave them out.
    #   The MLP's width is config.inner_dim, not always 4 * n_embd.
    return None




def one_row(x: Tensor, weight: Tensor) -> Tensor:
    """``x @ weight.T`` for a single row: x [1, ..., 1, in], weight [out, in] -> [1, ..., 1, out].

    Computed as the matrix times a column, ``weight @ xᵀ``, which reads ``weight``
    once, row after row, in the order it lies in memory.
    """
    # TODO 2: Make x a column [in, 1], multiply weight by it ([out, 1]), and give the
    #   result x's shape with the last axis out wide.
    # Hint: x.reshape([...]) regroups without moving numbers; one row has as many
    #   numbers as its column. weight.shape[0] is out, and [*x.shape[:-1], n] is x's
    #   shape with the last size replaced.
    return None




class DecodeLinear(Linear):
    """Step 04's ``Linear`` (same weights, same names) that multiplies a single row as W @ xᵀ."""

    #: The product for a single row: your one_row (the Mojo kernel's in KernelGPT2LMHeadModel).
    one_row = staticmethod(one_row)

    def forward(self, x: Tensor) -> Tensor:
        # TODO 3: When x holds a single row (every size but the last is 1, as in the
        #   decode graph), return self.one_row(x, self.weight) plus the bias; otherwise
        #   (many rows, or a symbolic number of them) step 04's Linear: super().forward(x).
        # Hint: in a compiled graph, x.shape holds Dims; a Dim equals 1 only when its
        #   size is the number 1, never when it is the symbol "seq".
        return None




class DecodeGPT2LMHeadModel(CachedGPT2LMHeadModel):
    """Step 15's cached GPT-2 with every Linear a DecodeLinear, and the head as the table times a column."""

    #: The Linear layers' class, and the head's product for a single row.
    linear, one_row = DecodeLinear, staticmethod(one_row)

    def __init__(self, config: GPT2Config):
        super().__init__(config)
        for module in [self, *(module for _, module in self.descendants)]:
            for name, child in list(module.children):
                if type(child) is Linear:  # the same shape and bias; the weights are loaded later, by name
                    out_dim, in_dim = child.weight.shape
                    setattr(module, name, self.linear(in_dim, out_dim, bias=not isinstance(child.bias, int)))

    def head(self, hidden: Tensor) -> Tensor:
        """Step 11's head for the last position, hidden [1, n_embd] -> logits [1, vocab_size]."""
        # TODO 4: Score the hidden vector against every row of wte with self.one_row.
        # Hint: step 11's head is hidden @ wteᵀ; the table is self.transformer.wte.weight.
        return None

    def decode(self, input_ids: Tensor, past_keys: list[Tensor], past_values: list[Tensor]):
        """One new token, ids [1, 1], over the cache read in place (given code).

        ``past_keys[i]`` and ``past_values[i]`` are layer i's cache, ``[P, H, D]``,
        token-major. Returns the logits [1, vocab_size] and each layer's new key
        and value, ``[1, H, D]``, for the caller to write into row P.
        """
        body = self.transformer
        x = Embeddings.forward(body, input_ids, past_len=past_keys[0].shape[0])
        keys, values = [], []
        for block, past_k, past_v in zip(body.h, past_keys, past_values):
            y, k, v = self.attend(block.attn.c_attn(block.ln_1(x)), past_k, past_v)
            x = x + block.attn.c_proj(y.reshape([1, 1, block.attn.n_embd]))
            x = residual(x, block.ln_2, block.mlp)
            keys.append(k)
            values.append(v)
        return self.head(body.ln_f(x[:, -1, :])), keys, values

    def writes_cache(self) -> bool:
        """Whether ``decode`` writes each layer's new key and value into the cache itself (given code): this
        model's returns them. A model whose ``decode`` does (the kernel model's) is handed P + 1 rows."""
        return False

    @staticmethod
    def attend(qkv: Tensor, past_k: Tensor, past_v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``decode``'s attention (given code): c_attn's output qkv [1, 1, 3C] split into the new token's q, k, v
        [1, H, D], and TODO 5's attend_in_place over the cache. Returns its output y and the new k and v."""
        q, k, v = (t.reshape([1, *past_k.shape[1:]]) for t in F.split(qkv, [int(qkv.shape[-1]) // 3] * 3, axis=-1))
        return attend_in_place(q, k, v, past_k, past_v), k, v




def attend_in_place(q: Tensor, k: Tensor, v: Tensor, past_k: Tensor, past_v: Tensor) -> Tensor:
    """One new token's attention over the cache as it lies in memory.

    q, k, v [1, H, D]: the new token's query, key and value. past_k, past_v
    [P, H, D]: the P cached tokens', token-major. The new token sees every cached
    token and itself, so there is nothing to mask. Returns y [1, H, D].
    """
    # TODO 5: Score q against every cached key as one multiply and sum over D (the
    #   cache is read once, in memory order: no transpose, no copy), and against the
    #   new key k the same way; scale by 1 / sqrt(D); softmax over the P + 1 tokens;
    #   return the cached values weighted by their P weights, summed over the tokens,
    #   plus v weighted by the last weight.
    # Hint: (past_k * q) broadcasts q over the P tokens: [P, H, D]. A sum over the last
    #   axis keeps it as size 1: [P, H, 1]. F.concat([a, b], axis=0) joins the tokens,
    #   and w[:P] and w[P:] split them again (P = past_k.shape[0]).
    return None




# --- given code: the same product by a Mojo kernel ----------------------------------------
def one_row_kernel(x: Tensor, weight: Tensor) -> Tensor:
    """``one_row``'s numbers from the course's Mojo kernel, ``course/kernels/one_row.mojo``: a MAX
    custom op that streams ``weight`` at the memory limit (given code; CPU only)."""
    from max.graph import DeviceRef, TensorType

    from course.runtime import kernels

    out_dim, in_dim = weight.shape
    device = DeviceRef.from_device(weight.device)
    (y,) = F.custom("one_row", device, [x.reshape([1, in_dim]), weight],
                    [TensorType(weight.dtype, [1, out_dim], device)], custom_extensions=kernels())
    return y.reshape([*x.shape[:-1], out_dim])


class KernelDecodeLinear(DecodeLinear):
    """A DecodeLinear whose single row goes through the Mojo kernel."""

    one_row = staticmethod(one_row_kernel)


def attend_kernel(qkv: Tensor, past_k: Tensor, past_v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``DecodeGPT2LMHeadModel.attend`` as one op, the course's Mojo kernel ``course/kernels/attention.mojo``:
    one pass over the cache, float32 or float16; the new k and v come back in the cache's type (given code;
    CPU only, head sizes a multiple of 16)."""
    from max.dtype import DType
    from max.graph import DeviceRef, TensorType

    from course.runtime import kernels

    row = [1, *past_k.shape[1:]]  # [1, H, D]
    if int(row[-1]) % 16:  # a head size the kernel does not take: MAX's ops, on float32 copies of the cache
        y, k, v = DecodeGPT2LMHeadModel.attend(qkv, past_k.cast(DType.float32), past_v.cast(DType.float32))
        return y, k.cast(past_k.dtype), v.cast(past_v.dtype)
    device = DeviceRef.from_device(qkv.device)
    y, k, v = F.custom("attend_one", device, [qkv.reshape([1, qkv.shape[-1]]), past_k, past_v],
                       [TensorType(DType.float32, row, device), *[TensorType(past_k.dtype, row, device)] * 2],
                       parameters={"cache": past_k.dtype}, custom_extensions=kernels())
    return y, k, v


def format_of(linear: Module) -> str:
    """A product's weight format for the fused kernels: f32, or a quantized Linear's (quantize's ``name``)."""
    from max.dtype import DType

    return linear.name if linear.weight.dtype == DType.uint8 else "f32"


def norm_one_row_kernel(x: Tensor, norm: Module, weight: Tensor, bias: Tensor, gelu: bool = False,
                        format: str = "f32") -> Tensor:
    """``weight @ norm(x) + bias`` for a single row x, and GELU of it where ``gelu``, as one op: the Mojo kernel
    ``norm_one_row`` (``course/kernels/layer.mojo``; given code; CPU only). ``weight`` is float32, or a quantized
    format's blocks (``format``: q4_0, q4_k or q6_k). Returns [1, out], out the bias's size."""
    from max.dtype import DType
    from max.graph import DeviceRef, TensorType

    from course.runtime import kernels

    device = DeviceRef.from_device(weight.device)
    eps = F.constant([norm.eps], DType.float32, weight.device)
    (y,) = F.custom("norm_one_row", device, [x.reshape([1, -1]), norm.weight, norm.bias, eps, weight, bias],
                    [TensorType(DType.float32, [1, bias.shape[0]], device)],
                    parameters={"gelu": gelu, "format": format}, custom_extensions=kernels())
    return y


def one_row_add_kernel(x: Tensor, linear: Module, stream: Tensor) -> Tensor:
    """``stream + linear(x)`` for a single row, as one op: the Mojo kernel ``one_row_add`` (given code; CPU only).
    ``linear``: a Linear, or a quantized one (``course.programs.quantize``)."""
    from max.dtype import DType
    from max.graph import DeviceRef, TensorType

    from course.runtime import kernels

    device = DeviceRef.from_device(linear.weight.device)
    (y,) = F.custom("one_row_add", device, [x.reshape([1, -1]), linear.weight, linear.bias, stream],
                    [TensorType(DType.float32, [1, linear.bias.shape[0]], device)],
                    parameters={"format": format_of(linear)}, custom_extensions=kernels())
    return y


def block_kernel(x: Tensor, block: Module, past_k: Tensor, past_v: Tensor) -> Tensor:
    """A GPT-2 block's decode step for a single row x as one op, the Mojo kernel ``block_one_row``
    (``course/kernels/block.mojo``; given code; CPU only, float32 weights, head sizes a multiple of 16): returns
    the residual stream after the block. ``past_k`` and ``past_v`` are the cache's buffers, P + 1 rows
    ``[P + 1, H, D]``: the op reads the first P and writes the new key and value into the last, in the cache's type."""
    from max.dtype import DType
    from max.graph import DeviceRef, TensorType

    from course.runtime import kernels

    attn, mlp = block.attn, block.mlp
    device = DeviceRef.from_device(x.device)
    eps = F.constant([block.ln_1.eps], DType.float32, x.device)
    (y,) = F.inplace_custom("block_one_row", device, [x, block.ln_1.weight, block.ln_1.bias, eps,
                            attn.c_attn.weight, attn.c_attn.bias, past_k.__buffervalue__(), past_v.__buffervalue__(),
                            attn.c_proj.weight, attn.c_proj.bias, block.ln_2.weight, block.ln_2.bias, mlp.c_fc.weight,
                            mlp.c_fc.bias, mlp.c_proj.weight, mlp.c_proj.bias],
                            [TensorType(DType.float32, [1, x.shape[-1]], device)],
                            parameters={"cache": past_k.dtype}, custom_extensions=kernels())
    return y


class KernelGPT2LMHeadModel(DecodeGPT2LMHeadModel):
    """Step 16's model with every one-row product, the head's too, and the attention by the Mojo kernels:
    with float32 weights each block's decode step is one op, in every quantized format five ops."""

    linear, one_row, attend = KernelDecodeLinear, staticmethod(one_row_kernel), staticmethod(attend_kernel)
    blocks_as_one_op = True  # float32: each block one op (block_kernel); False: five ops, as the quantized formats

    def decode(self, input_ids: Tensor, past_keys: list[Tensor], past_values: list[Tensor]):
        """``DecodeGPT2LMHeadModel.decode`` with each layer norm and the small ops after each product in the
        product's op: a block is five ops, ln_1 and c_attn, the attention, attn.c_proj and the residual add, ln_2,
        c_fc and GELU, mlp.c_proj and the residual add; with float32 weights and ``blocks_as_one_op``, all five in
        one (``block_kernel``), which writes the new keys and values into the cache itself (``writes_cache``).
        Quantized Linears (q4_0, q4_k, q6_k) are read in their blocks."""
        body, head = self.transformer, self.head
        quantized = isinstance(head, Module)  # quantize_model swapped the head, as every Linear, for a quantized one
        one_op = self.writes_cache()
        x = Embeddings.forward(body, input_ids, past_len=past_keys[0].shape[0] - (1 if one_op else 0))
        x = x.reshape([1, x.shape[-1]])
        keys, values = [], []
        for block, past_k, past_v in zip(body.h, past_keys, past_values):
            if one_op:  # the new key and value go into the cache's last row: nothing to return
                x = block_kernel(x, block, past_k, past_v)
                continue
            attn, mlp = block.attn, block.mlp
            y, k, v = self.attend(norm_one_row_kernel(x, block.ln_1, attn.c_attn.weight, attn.c_attn.bias,
                                                      format=format_of(attn.c_attn)), past_k, past_v)
            x = one_row_add_kernel(y, attn.c_proj, x)
            x = one_row_add_kernel(norm_one_row_kernel(x, block.ln_2, mlp.c_fc.weight, mlp.c_fc.bias, gelu=True,
                                                       format=format_of(mlp.c_fc)), mlp.c_proj, x)
            keys.append(k)
            values.append(v)
        wte = body.wte.weight
        no_bias = F.zeros([wte.shape[0]], dtype=wte.dtype, device=wte.device)
        return norm_one_row_kernel(x, body.ln_f, head.weight if quantized else wte, no_bias,
                                   format=head.name if quantized else "f32"), keys, values

    def writes_cache(self) -> bool:
        """Float32 weights with ``blocks_as_one_op`` and head sizes a multiple of 16: each block is one op, which
        writes the new key and value into the cache itself. Otherwise the rows come back, as from step 16's model."""
        quantized = isinstance(self.head, Module)
        return self.blocks_as_one_op and not quantized and self.transformer.h[0].attn.head_dim % 16 == 0




# --- given code: a prefill graph, a decode graph, a cache allocated once --------------------
class DecodeStep(Module):
    """The decode graph's module: the model's ``decode`` as its ``forward``, with the model's weights."""

    def __init__(self, model: DecodeGPT2LMHeadModel):
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, past_keys: list[Tensor], past_values: list[Tensor]):
        return self.model.decode(input_ids, past_keys, past_values)


class DecodeNextLogits(CachedNextLogits):
    """Step 15's ``next_logits(ids)`` with a decode graph and a cache allocated once.

    A prefill (the first call, and any call but one more token) runs step 15's
    graph, ``self.run``, where each DecodeLinear sees a symbolic number of rows
    and keeps the matmul. Its keys and values are copied into the cache: per
    layer a key and a value buffer ``[n_positions, H, D]``, allocated here, once.

    A decode step runs ``self.decode``, compiled for exactly one new token on the
    first decode step (so that the first token does not wait for it). It is
    handed the first P rows of each buffer: views of the same memory, since the
    P tokens lie one after another. It returns the new token's key and value,
    which are copied into row P. (A model whose ``decode`` writes them itself,
    ``writes_cache``, as the float32 kernel model's, is handed P + 1 rows as
    buffers it may write, and returns the logits alone.) Nothing is concatenated:
    a step reads the cache once and writes one row of it. ``cache_dtype``:
    float32 (the default), or float16, half the bytes, for a model whose
    ``attend`` reads it (the kernel's).

    ``prefill_from``: the shortest prompt that runs the prefill graph. A shorter one
    goes through the decode graph one token at a time, from an empty cache, and the
    prefill graph is compiled on the first prompt that long. With the default, 1,
    every prompt runs it, and it is compiled here. A first run that sees only short
    prompts then compiles one graph, not two (``pixi run main`` does this).
    """

    def __init__(self, model: DecodeGPT2LMHeadModel, config: GPT2Config, device=None, cache_dtype=None,
                 prefill_from: int = 1):
        from max.driver import CPU, Buffer
        from max.dtype import DType

        self.model, self.config, self.device = model, config, device or CPU()
        self.run = self.decode = None  # the prefill graph and the decode graph, each compiled on its first use
        self.prefill_from, self.empty = prefill_from, []
        model.to(self.device)
        if prefill_from <= 1:  # every prompt runs the prefill graph: compiled now
            self.prefill_graph()
        self.reset()
        self.cache_dtype = cache_dtype or DType.float32  # float16 halves the cache's bytes (the kernels' attention)
        layers, heads, head_dim = self.cache_shape(config)
        shape = [config.n_positions, heads, head_dim]
        self.key_cache = [Buffer.zeros(shape, self.cache_dtype, device=self.device) for _ in range(layers)]
        self.value_cache = [Buffer.zeros(shape, self.cache_dtype, device=self.device) for _ in range(layers)]

    def __call__(self, ids: list[int]) -> np.ndarray:
        from max.driver import CPU, Buffer

        ids = [int(i) for i in ids]
        if self.seen and ids[:-1] == self.seen:  # one more token
            return self.step(ids)
        self.reset()  # anything else: a prefill, from the start
        if len(ids) < self.prefill_from:  # a short prompt: one token at a time, through the decode graph
            for end in range(1, len(ids)):
                self.step(ids[:end])
            return self.step(ids)
        self.prefill_graph()
        logits = super().__call__(ids)  # step 15's graph; its keys and values come back [1, H, T, D]
        rows = [Buffer.from_numpy(np.ascontiguousarray(grown.to(CPU()).to_numpy()[0].swapaxes(0, 1),
                                                       self.cache_dtype.to_numpy()))
                for grown in self.keys + self.values]  # [H, T, D] -> [T, H, D], token-major
        for cache, new in zip(self.key_cache + self.value_cache, rows):
            cache[: len(ids), :, :].inplace_copy_from(new)  # from the host to the cache's device
        self.device.synchronize()  # a copy may still be queued: wait for it while `rows` exists
        return logits

    def step(self, ids: list[int]) -> np.ndarray:
        """The logits after ``ids``, whose last token is the one new one: a decode step over the cache."""
        from max.driver import CPU, Buffer

        past = len(self.seen)
        self.check_positions(1, past)
        new_id = Buffer.from_numpy(np.asarray([ids[-1:]], dtype=np.int64)).to(self.device)
        graph = self.decode_graph()
        rows = past + 1 if self.writes_cache else past  # a model that writes row P itself is handed it
        outputs = graph.engine_model.execute(new_id, *(cache[:rows, :, :] for cache in self.key_cache + self.value_cache))
        for cache, row in zip(self.key_cache + self.value_cache, outputs[1:]):  # every layer's key, then value
            cache[past : past + 1, :, :].inplace_copy_from(row)
        self.device.synchronize()  # the same: the rows are the graph's outputs, freed on return
        self.seen = ids
        return outputs[0].to(CPU()).to_numpy()[0]

    def prefill_graph(self):
        """Step 15's graph, ``self.run``, compiled on its first use (with ``prefill_from`` 1: in ``__init__``)."""
        if self.run is None:
            super().__init__(self.model, self.config, self.device)
        return self.run

    def decode_graph(self):
        """The decode graph, compiled on its first use."""
        if self.decode is None:
            from max.dtype import DType
            from max.experimental.tensor import TensorType
            from max.graph import BufferType

            layers, heads, head_dim = self.cache_shape(self.config)
            one = TensorType(DType.int64, [1, 1], self.device)
            self.writes_cache = self.model.writes_cache()  # then the views are P + 1 rows, buffers the graph writes
            kind = BufferType if self.writes_cache else TensorType
            rows = kind(self.cache_dtype, ["rows", heads, head_dim], self.device)
            self.decode = DecodeStep(self.model).compile(one, [rows] * layers, [rows] * layers)
        return self.decode




def roofline(config: GPT2Config, bandwidth_gb_s: float, bytes_per_weight: float = 4) -> float:
    """The decode speed memory allows: ``bandwidth / bytes_per_token`` in tokens per second (given code)."""
    return bandwidth_gb_s * 1e9 / bytes_per_token(config, bytes_per_weight)


def measure_bandwidth(megabytes: int = 256, repeats: int = 5) -> float:
    """GB/s that this machine's memory gives a one-row product: the best of ``repeats`` runs of NumPy's ``W @ x``
    over a ``megabytes`` matrix, whose BLAS reads each weight once on every core, as a decode step does (given code).
    (A plain ``sum`` is no measure: on some processors one core's float32 sum is slower than memory.)"""
    import time

    w = np.ones((megabytes * 2**20 // 4 // 4096, 4096), dtype=np.float32)
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        w @ w[0]  # the matrix times one of its rows: float32 throughout
        best = min(best, time.perf_counter() - start)
    return w.nbytes / best / 1e9
