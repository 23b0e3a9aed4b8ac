"""Step 16's given machinery: the Mojo kernels' model and the decode road, built on the learner's classes.

A learner writes step 16's lesson (``bytes_per_token``, ``one_row``, ``DecodeLinear``, the head and
``attend_in_place``) in ``steps/step_16_memory_limit.py``. What they do not write lives here, as two
mixins that the step file puts in front of its own classes:

    class KernelGPT2LMHeadModel(KernelDecoding, DecodeGPT2LMHeadModel): ...
    class DecodeNextLogits(CacheInPlace, CachedNextLogits): ...

``KernelDecoding`` swaps the learner's one-row products, head and attention for the course's Mojo
kernels (``course/kernels/``, the appendix "Past the roofline"); ``CacheInPlace`` is the decode road
itself: a prefill graph (step 15's), a decode graph of the learner's ``decode`` for exactly one new
token, and a KV cache allocated once and read where it lies. Both reach the learner's code only
through the methods the step defines, so a mistake in a TODO still shows in the learner's own
numbers, and a check names its TODO.
"""

from __future__ import annotations

import math

import numpy as np
from max.experimental.nn import Module


# ANCHOR: kernel
def one_row_kernel(x, weight):
    """``one_row``'s numbers from the course's Mojo kernel, ``course/kernels/one_row.mojo``: a MAX custom op that
    streams ``weight`` at the memory limit (CPU only)."""
    from max.experimental import functional as F
    from max.graph import DeviceRef, TensorType

    from course.runtime import kernels, usable_cpus

    out_dim, in_dim = weight.shape
    device = DeviceRef.from_device(weight.device)
    (y,) = F.custom("one_row", device, [x.reshape([1, in_dim]), weight],
                    [TensorType(weight.dtype, [1, out_dim], device)], parameters={"bands": usable_cpus()},
                    custom_extensions=kernels())
    return y.reshape([*x.shape[:-1], out_dim])


def attend_kernel(qkv, past_k, past_v):
    """The decode step's attention as one op, ``course/kernels/attention.mojo``: c_attn's output qkv [1, 1, 3C]
    over the cache [P, H, D] in one pass, float32 or float16; returns y [1, H, D] (float32) and the new k and v
    in the cache's type (CPU only, head sizes a multiple of 16: ``KernelDecoding.attend`` keeps MAX's ops for
    others)."""
    from max.dtype import DType
    from max.experimental import functional as F
    from max.graph import DeviceRef, TensorType

    from course.runtime import kernels, usable_cpus

    row = [1, *past_k.shape[1:]]  # [1, H, D]
    device = DeviceRef.from_device(qkv.device)
    y, k, v = F.custom("attend_one", device, [qkv.reshape([1, qkv.shape[-1]]), past_k, past_v],
                       [TensorType(DType.float32, row, device), *[TensorType(past_k.dtype, row, device)] * 2],
                       parameters={"cache": past_k.dtype, "bands": usable_cpus()}, custom_extensions=kernels())
    return y, k, v


def format_of(linear) -> str:
    """A product's weight format for the fused kernels: f32, or a quantized Linear's (quantize's ``name``)."""
    from max.dtype import DType

    return linear.name if linear.weight.dtype == DType.uint8 else "f32"


def norm_one_row_kernel(x, norm, weight, bias, gelu: bool = False, format: str = "f32"):
    """``weight @ norm(x) + bias`` for a single row x, and GELU of it where ``gelu``, as one op: the Mojo kernel
    ``norm_one_row`` (``course/kernels/layer.mojo``; CPU only). ``weight`` is float32, or a quantized format's
    blocks (``format``: q4_0, q4_k or q6_k). Returns [1, out], out the bias's size."""
    from max.dtype import DType
    from max.experimental import functional as F
    from max.graph import DeviceRef, TensorType

    from course.runtime import kernels, usable_cpus

    device = DeviceRef.from_device(weight.device)
    eps = F.constant([norm.eps], DType.float32, weight.device)
    (y,) = F.custom("norm_one_row", device, [x.reshape([1, -1]), norm.weight, norm.bias, eps, weight, bias],
                    [TensorType(DType.float32, [1, bias.shape[0]], device)],
                    parameters={"gelu": gelu, "format": format, "bands": usable_cpus()}, custom_extensions=kernels())
    return y


def one_row_add_kernel(x, linear, stream):
    """``stream + linear(x)`` for a single row, as one op: the Mojo kernel ``one_row_add`` (CPU only).
    ``linear``: a Linear, or a quantized one (``course.programs.quantize``)."""
    from max.dtype import DType
    from max.experimental import functional as F
    from max.graph import DeviceRef, TensorType

    from course.runtime import kernels, usable_cpus

    device = DeviceRef.from_device(linear.weight.device)
    (y,) = F.custom("one_row_add", device, [x.reshape([1, -1]), linear.weight, linear.bias, stream],
                    [TensorType(DType.float32, [1, linear.bias.shape[0]], device)],
                    parameters={"format": format_of(linear), "bands": usable_cpus()}, custom_extensions=kernels())
    return y


def block_kernel(x, block, past_k, past_v):
    """A GPT-2 block's decode step for a single row x as one op, the Mojo kernel ``block_one_row``
    (``course/kernels/block.mojo``; CPU only, float32 weights, head sizes a multiple of 16): returns the residual
    stream after the block. ``past_k`` and ``past_v`` are the cache's buffers, P + 1 rows ``[P + 1, H, D]``: the op
    reads the first P and writes the new key and value into the last, in the cache's type."""
    from max.dtype import DType
    from max.experimental import functional as F
    from max.graph import DeviceRef, TensorType

    from course.runtime import kernels, usable_cpus

    attn, mlp = block.attn, block.mlp
    device = DeviceRef.from_device(x.device)
    eps = F.constant([block.ln_1.eps], DType.float32, x.device)
    (y,) = F.inplace_custom("block_one_row", device, [x, block.ln_1.weight, block.ln_1.bias, eps,
                            attn.c_attn.weight, attn.c_attn.bias, past_k.__buffervalue__(), past_v.__buffervalue__(),
                            attn.c_proj.weight, attn.c_proj.bias, block.ln_2.weight, block.ln_2.bias, mlp.c_fc.weight,
                            mlp.c_fc.bias, mlp.c_proj.weight, mlp.c_proj.bias],
                            [TensorType(DType.float32, [1, x.shape[-1]], device)],
                            parameters={"cache": past_k.dtype, "bands": usable_cpus()}, custom_extensions=kernels())
    return y


class KernelDecoding:
    """In front of step 16's ``DecodeGPT2LMHeadModel``: every one-row product, the head's too, and the attention by
    the Mojo kernels. With float32 weights each block's decode step is one op, in every quantized format five ops.

    Its ``linear`` is the learner's ``DecodeLinear`` with the kernel's product (``KernelDecodeLinear``), made when a
    model class puts this in front of its own."""

    one_row = staticmethod(one_row_kernel)
    blocks_as_one_op = True  # float32: each block one op (block_kernel); False: five ops, as the quantized formats

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.linear = type("KernelDecodeLinear", (cls.linear,), {"one_row": staticmethod(one_row_kernel),
                                                                "__module__": cls.__module__})

    @classmethod
    def attend(cls, qkv, past_k, past_v):
        """The learner's ``attend`` as one op (``attend_kernel``); for a head size that is no multiple of 16, the
        learner's own over float32 copies of the cache, the new k and v given back in the cache's type."""
        from max.dtype import DType

        if int(past_k.shape[-1]) % 16:  # a head size the kernel does not take: MAX's ops
            y, k, v = super().attend(qkv, past_k.cast(DType.float32), past_v.cast(DType.float32))
            return y, k.cast(past_k.dtype), v.cast(past_v.dtype)
        return attend_kernel(qkv, past_k, past_v)

    def decode(self, input_ids, past_keys: list, past_values: list):
        """The learner's ``decode`` with each layer norm and the small ops after each product in the product's op: a
        block is five ops, ln_1 and c_attn, the attention, attn.c_proj and the residual add, ln_2, c_fc and GELU,
        mlp.c_proj and the residual add; with float32 weights and ``blocks_as_one_op``, all five in one
        (``block_kernel``), which writes the new keys and values into the cache itself (``writes_cache``).
        Quantized Linears (q4_0, q4_k, q6_k) are read in their blocks."""
        from max.experimental import functional as F

        body, head = self.transformer, self.head
        quantized = isinstance(head, Module)  # quantize_model swapped the head, as every Linear, for a quantized one
        one_op = self.writes_cache()
        # With one_op each cache is handed with row P to write. GPT2Model's parent is step 06's Embeddings.
        past = past_keys[0].shape[0] - (1 if one_op else 0)
        x = super(type(body), body).forward(input_ids, past_len=past)
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


# ANCHOR_END: kernel


class DecodeStep(Module):
    """The decode graph's module: the model's ``decode`` as its ``forward``, with the model's weights."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, past_keys, past_values):
        return self.model.decode(input_ids, past_keys, past_values)


# ANCHOR: compiled
class CacheInPlace:
    """In front of step 15's ``CachedNextLogits``: ``next_logits(ids)`` with a decode graph and a cache allocated once.

    A prefill (the first call, and any call but one more token) runs step 15's
    graph, ``self.run``, where each DecodeLinear sees a symbolic number of rows
    and keeps the matmul. Its keys and values are copied into the cache: per
    layer a key and a value buffer ``[n_positions, H, D]``, allocated here, once.

    A decode step runs ``self.decode``, the model's ``decode`` compiled for exactly
    one new token on the first decode step (so that the first token does not wait
    for it). It is handed the first P rows of each buffer: views of the same
    memory, since the P tokens lie one after another. It returns the new token's
    key and value, which are copied into row P. (A model whose ``decode`` writes
    them itself, ``writes_cache``, as the float32 kernel model's, is handed P + 1
    rows as buffers it may write, and returns the logits alone.) Nothing is
    concatenated: a step reads the cache once and writes one row of it.
    ``cache_dtype``: float32 (the default), or float16, half the bytes, for a model
    whose ``attend`` reads it (the kernel's).

    ``prefill_from``: the shortest prompt that runs the prefill graph. A shorter one
    goes through the decode graph one token at a time, from an empty cache, and the
    prefill graph is compiled on the first prompt that long. With the default, 1,
    every prompt runs it, and it is compiled here. A first run that sees only short
    prompts then compiles one graph, not two (``pixi run main`` does this).
    """

    def __init__(self, model, config, device=None, cache_dtype=None, prefill_from: int = 1):
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


# ANCHOR_END: compiled


def measure_bandwidth(megabytes: int = 256, repeats: int = 5) -> float:
    """GB/s that this machine's memory gives a one-row product: the best of ``repeats`` runs of NumPy's ``W @ x``
    over a ``megabytes`` matrix, whose BLAS reads each weight once on every core, as a decode step does.
    (A plain ``sum`` is no measure: on some processors one core's float32 sum is slower than memory.)"""
    import time

    w = np.ones((megabytes * 2**20 // 4 // 4096, 4096), dtype=np.float32)
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        w @ w[0]  # the matrix times one of its rows: float32 throughout
        best = min(best, time.perf_counter() - start)
    return w.nbytes / best / 1e9
