# A decode step's products with what comes before and after them, each as one MAX custom op:
# chapter 16's "Fewer ops".
#
# One new token makes every op of a decode step small, and MAX pays for each op it runs:
# a launch, and a hand-off to the second core. A GPT-2 block's single row goes through a
# layer norm, a product, its bias, GELU, another product, its bias, a residual add, and so
# on: fourteen ops a block, most of them over 768 numbers. Here the small ones ride along
# with the product beside them, so a block is five ops: norm_one_row (ln_1 and c_attn),
# the attention, one_row_add (attn.c_proj and the residual), norm_one_row with GELU (ln_2
# and c_fc), one_row_add (mlp.c_proj and the residual). The weights are read as
# one_row reads them (dot_rows); the rest is done once, on the 768 numbers of x or y.

import extensibility as compiler
from extensibility import InputTensor, OutputTensor
from max.algorithm import sync_parallelize
from max.gpu.host import DeviceContext
from std.math import sqrt, tanh
from std.sys.info import num_physical_cores

from .one_row import WIDTH, dot_rows


# ANCHOR: fused
@compiler.register("norm_one_row")
struct NormOneRow:
    """y = W @ layer_norm(x) + b, and GELU (tanh) of it where ``gelu``: x [1, K], W [N, K] -> y [1, N]."""

    @staticmethod
    def execute[target: StaticString, gelu: Bool](
        y: OutputTensor[dtype=DType.float32, rank=2, ...],
        x: InputTensor[dtype=DType.float32, rank=2, ...],
        gamma: InputTensor[dtype=DType.float32, rank=1, ...],  # the layer norm's weight and bias [K]
        beta: InputTensor[dtype=DType.float32, rank=1, ...],
        eps: InputTensor[dtype=DType.float32, rank=1, ...],  # [1]: the layer norm's epsilon
        w: InputTensor[dtype=DType.float32, rank=2, ...],
        b: InputTensor[dtype=DType.float32, rank=1, ...],  # [N]: the product's bias
        ctx: DeviceContext,
    ) raises:
        comptime if target != "cpu":
            raise Error("norm_one_row is a CPU kernel; on a GPU the course keeps MAX's ops")
        var n = w.dim_size(0)
        var k = w.dim_size(1)
        var xs = x.unsafe_ptr()
        # The layer norm of the one row, once: its mean, then its variance about the mean.
        var normed = List[Float32](length=k, fill=0)
        var z = normed.unsafe_ptr()
        var total = Float32(0)
        for c in range(k):
            total += xs.load(c)
        var mean = total / Float32(k)
        var spread = Float32(0)
        for c in range(k):
            spread += (xs.load(c) - mean) * (xs.load(c) - mean)
        var scale = 1 / sqrt(spread / Float32(k) + eps.unsafe_ptr().load(0))
        for c in range(k):
            z.store(c, (xs.load(c) - mean) * scale * gamma.unsafe_ptr().load(c) + beta.unsafe_ptr().load(c))
        var out = y.unsafe_ptr()
        var weights = w.unsafe_ptr()
        var bias = b.unsafe_ptr()
        var cores = num_physical_cores()

        def band(core: Int) {imm}:  # each core one contiguous band of W's rows, then their bias and GELU
            var start = n * core // cores
            var end = n * (core + 1) // cores
            dot_rows(out, z, weights, start, end, k)
            for r in range(start, end):
                var v = out.load(r) + bias.load(r)
                comptime if gelu:
                    v = 0.5 * v * (1 + tanh(Float32(0.7978845608028654) * (v + 0.044715 * v * v * v)))
                out.store(r, v)

        sync_parallelize(band, cores)
        _ = normed^  # the normed row lives until every core is done


@compiler.register("one_row_add")
struct OneRowAdd:
    """y = r + W @ x + b: a product, its bias and the residual stream r [1, N] it adds to."""

    @staticmethod
    def execute[target: StaticString](
        y: OutputTensor[dtype=DType.float32, rank=2, ...],
        x: InputTensor[dtype=DType.float32, rank=2, ...],
        w: InputTensor[dtype=DType.float32, rank=2, ...],
        b: InputTensor[dtype=DType.float32, rank=1, ...],
        residual: InputTensor[dtype=DType.float32, rank=2, ...],
        ctx: DeviceContext,
    ) raises:
        comptime if target != "cpu":
            raise Error("one_row_add is a CPU kernel; on a GPU the course keeps MAX's ops")
        var n = w.dim_size(0)
        var k = w.dim_size(1)
        var out = y.unsafe_ptr()
        var row = x.unsafe_ptr()
        var weights = w.unsafe_ptr()
        var bias = b.unsafe_ptr()
        var stream = residual.unsafe_ptr()
        var cores = num_physical_cores()

        def band(core: Int) {imm}:
            var start = n * core // cores
            var end = n * (core + 1) // cores
            dot_rows(out, row, weights, start, end, k)
            for r in range(start, end):
                out.store(r, stream.load(r) + out.load(r) + bias.load(r))

        sync_parallelize(band, cores)
# ANCHOR_END: fused
