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
# one_row reads them (dot_rows), or, for GGUF's q4_k and q6_k blocks (``format``), as
# q4_k.mojo and q6_k.mojo read them; the rest is done once, on the 768 numbers of x or y.

import extensibility as compiler
from extensibility import InputTensor, OutputTensor
from max.algorithm import sync_parallelize
from max.gpu.host import DeviceContext
from std.math import sqrt, tanh
from std.sys import size_of

from .one_row import WIDTH, band_count, dot_rows
from .q4_0 import PairedBytes, q4_0_rows
from .q4_k import FourBitPartner, q4_k_rows
from .q6_k import EightBitRow, q6_k_rows


# ANCHOR: fused
@always_inline
def products[format: StaticString, epilogue: def(Int, Int) capturing -> None](
    dst: UnsafePointer[mut=True, Float32, _], x: UnsafePointer[Float32, _], w: UnsafePointer[UInt8, _],
    n: Int, k: Int, stride: Int, bands: Int,
):
    """dst[r] = W's row r times x for r < n, W in ``format`` (f32, q4_0, q4_k, q6_k; ``stride`` bytes a row), each core
    one contiguous band of rows (no more than ``bands``: band_count), then ``epilogue(start, end)`` on that band's
    outputs."""
    var cores = band_count(bands)
    comptime if format == "f32":
        var weights = w.bitcast[Float32]()

        def band(core: Int) {imm}:
            var start, end = n * core // cores, n * (core + 1) // cores
            dot_rows(dst, x, weights, start, end, k)
            epilogue(start, end)

        sync_parallelize(band, cores)
    elif format == "q4_0":
        var paired = PairedBytes(x, k)
        var values0, scales0, offsets0 = paired.values.unsafe_ptr(), paired.scales.unsafe_ptr(), paired.offsets.unsafe_ptr()

        def band0(core: Int) {imm}:
            var start, end = n * core // cores, n * (core + 1) // cores
            q4_0_rows(dst, values0, scales0, offsets0, w, start, end, k, stride)
            epilogue(start, end)

        sync_parallelize(band0, cores)
        _ = paired^
    elif format == "q4_k":
        var row = FourBitPartner(x, k)
        var values, scales, sums = row.values.unsafe_ptr(), row.scales.unsafe_ptr(), row.sums.unsafe_ptr()

        def band4(core: Int) {imm}:
            var start, end = n * core // cores, n * (core + 1) // cores
            q4_k_rows(dst, values, scales, sums, w, start, end, k, stride)
            epilogue(start, end)

        sync_parallelize(band4, cores)
        _ = row^  # x's 8 bits live until every core is done
    else:
        comptime assert format == "q6_k", "products: format is f32, q4_0, q4_k or q6_k"
        var row = EightBitRow(x, k)
        var values, scales, offsets = row.values.unsafe_ptr(), row.scales.unsafe_ptr(), row.offsets.unsafe_ptr()

        def band6(core: Int) {imm}:
            var start, end = n * core // cores, n * (core + 1) // cores
            q6_k_rows(dst, values, scales, offsets, w, start, end, k, stride)
            epilogue(start, end)

        sync_parallelize(band6, cores)
        _ = row^


@always_inline
def gelu_tanh(v: Float32) -> Float32:
    """GPT-2's GELU, the tanh approximation (Hugging Face's gelu_new)."""
    return 0.5 * v * (1 + tanh(Float32(0.7978845608028654) * (v + 0.044715 * v * v * v)))


@always_inline
def norm_columns(z: UnsafePointer[mut=True, Float32, _], x: UnsafePointer[Float32, _], gamma: UnsafePointer[Float32, _],
                 beta: UnsafePointer[Float32, _], eps: Float32, k: Int, start: Int, end: Int):
    """z[c] = layer_norm(x)[c] for the columns start to end of x [k]: its mean, then its variance about the mean
    (over all of x), then each column scaled and shifted."""
    var total = Float32(0)
    for c in range(k):
        total += x.load(c)
    var mean = total / Float32(k)
    var spread = Float32(0)
    for c in range(k):
        spread += (x.load(c) - mean) * (x.load(c) - mean)
    var scale = 1 / sqrt(spread / Float32(k) + eps)
    for c in range(start, end):
        z.store(c, (x.load(c) - mean) * scale * gamma.load(c) + beta.load(c))


@compiler.register("norm_one_row")
struct NormOneRow:
    """y = W @ layer_norm(x) + b, and GELU (tanh) of it where ``gelu``: x [1, K], W [N, K] in ``format`` -> y [1, N]."""

    @staticmethod
    def execute[target: StaticString, gelu: Bool, format: StaticString, bands: Int](
        y: OutputTensor[dtype=DType.float32, rank=2, ...],
        x: InputTensor[dtype=DType.float32, rank=2, ...],
        gamma: InputTensor[dtype=DType.float32, rank=1, ...],  # the layer norm's weight and bias [K]
        beta: InputTensor[dtype=DType.float32, rank=1, ...],
        eps: InputTensor[dtype=DType.float32, rank=1, ...],  # [1]: the layer norm's epsilon
        w: InputTensor[rank=2, ...],  # float32 [N, K], or a quantized format's blocks, uint8 [N or more, bytes a row]
        b: InputTensor[dtype=DType.float32, rank=1, ...],  # [N]: the product's bias
        ctx: DeviceContext,
    ) raises:
        comptime if target != "cpu":
            raise Error("norm_one_row is a CPU kernel; on a GPU the course keeps MAX's ops")
        var n = y.dim_size(1)
        var k = x.dim_size(1)
        # The layer norm of the one row, once.
        var normed = List[Float32](length=k, fill=0)
        var z = normed.unsafe_ptr()
        norm_columns(z, x.unsafe_ptr(), gamma.unsafe_ptr(), beta.unsafe_ptr(), eps.unsafe_ptr().load(0), k, 0, k)
        var out = y.unsafe_ptr()
        var bias = b.unsafe_ptr()

        def finish(start: Int, end: Int) capturing:  # each band's bias, and GELU
            for r in range(start, end):
                var v = out.load(r) + bias.load(r)
                comptime if gelu:
                    v = gelu_tanh(v)
                out.store(r, v)

        products[format, finish](out, z, w.unsafe_ptr().bitcast[UInt8](), n, k, w.dim_size(1) * size_of[w.dtype](), bands)
        _ = normed^  # the normed row lives until every core is done


@compiler.register("one_row_add")
struct OneRowAdd:
    """y = r + W @ x + b: a product (W in ``format``), its bias and the residual stream r [1, N] it adds to."""

    @staticmethod
    def execute[target: StaticString, format: StaticString, bands: Int](
        y: OutputTensor[dtype=DType.float32, rank=2, ...],
        x: InputTensor[dtype=DType.float32, rank=2, ...],
        w: InputTensor[rank=2, ...],
        b: InputTensor[dtype=DType.float32, rank=1, ...],
        residual: InputTensor[dtype=DType.float32, rank=2, ...],
        ctx: DeviceContext,
    ) raises:
        comptime if target != "cpu":
            raise Error("one_row_add is a CPU kernel; on a GPU the course keeps MAX's ops")
        var out = y.unsafe_ptr()
        var bias = b.unsafe_ptr()
        var stream = residual.unsafe_ptr()

        def finish(start: Int, end: Int) capturing:
            for r in range(start, end):
                out.store(r, stream.load(r) + out.load(r) + bias.load(r))

        products[format, finish](out, x.unsafe_ptr(), w.unsafe_ptr().bitcast[UInt8](), y.dim_size(1), x.dim_size(1),
                                 w.dim_size(1) * size_of[w.dtype](), bands)
# ANCHOR_END: fused


# The same products with nothing before or after them, for a QuantizedLinear's single row
# (course.programs.quantize.one_row_kernel): y [1, N] = x [1, K] times W's first N rows.
def bare[format: StaticString, bands: Int](y: OutputTensor[dtype=DType.float32, rank=2, ...],
                               x: InputTensor[dtype=DType.float32, rank=2, ...],
                               w: InputTensor[dtype=DType.uint8, rank=2, ...]):
    def nothing(start: Int, end: Int) capturing:
        pass

    products[format, nothing](y.unsafe_ptr(), x.unsafe_ptr(), w.unsafe_ptr(), y.dim_size(1), x.dim_size(1), w.dim_size(1),
                              bands)


@compiler.register("one_row_q4_0")
struct OneRowQ40:
    @staticmethod
    def execute[target: StaticString, bands: Int](
        y: OutputTensor[dtype=DType.float32, rank=2, ...],
        x: InputTensor[dtype=DType.float32, rank=2, ...],
        w: InputTensor[dtype=DType.uint8, rank=2, ...],
        ctx: DeviceContext,
    ) raises:
        comptime if target != "cpu":
            raise Error("one_row_q4_0 is a CPU kernel; on a GPU the course keeps MAX's qmatmul")
        bare["q4_0", bands](y, x, w)


@compiler.register("one_row_q4_k")
struct OneRowQ4K:
    @staticmethod
    def execute[target: StaticString, bands: Int](
        y: OutputTensor[dtype=DType.float32, rank=2, ...],
        x: InputTensor[dtype=DType.float32, rank=2, ...],
        w: InputTensor[dtype=DType.uint8, rank=2, ...],
        ctx: DeviceContext,
    ) raises:
        comptime if target != "cpu":
            raise Error("one_row_q4_k is a CPU kernel; on a GPU the course keeps MAX's qmatmul")
        bare["q4_k", bands](y, x, w)


@compiler.register("one_row_q6_k")
struct OneRowQ6K:
    @staticmethod
    def execute[target: StaticString, bands: Int](
        y: OutputTensor[dtype=DType.float32, rank=2, ...],
        x: InputTensor[dtype=DType.float32, rank=2, ...],
        w: InputTensor[dtype=DType.uint8, rank=2, ...],
        ctx: DeviceContext,
    ) raises:
        comptime if target != "cpu":
            raise Error("one_row_q6_k is a CPU kernel; on a GPU the course keeps MAX's qmatmul")
        bare["q6_k", bands](y, x, w)
