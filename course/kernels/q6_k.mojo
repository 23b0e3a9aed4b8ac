# One row times a weight matrix stored in GGUF's q6_k blocks, y = x @ Wᵀ for x [1, K]:
# chapter 16's one-row product for a quantized format: the loop that layer.mojo's ops run for
# q6_k weights (one_row_q6_k, and the fused ones).
#
# A quantized decode step still reads every weight once, but a weight is now 6.6 bits,
# and unpacking it costs about as much as reading it: inside the model MAX's own q6_k
# product is slower than memory. This kernel does as llama.cpp does: it rounds the row x
# to 8 bits once (a scale for each block of 256), multiplies bytes by bytes (vpmaddubsw:
# 64 products, summed two by two, in one instruction), applies the weights' scales to
# those sums (vpmaddwd), once for each pair of weights, never to each weight, and takes
# four rows of W at a time, so that four rows' loads are in flight while one waits.

from std.memory import bitcast
from std.sys import CompilationTarget, llvm_intrinsic
from std.sys.intrinsics import PrefetchOptions, prefetch

comptime ROWS = 4  # rows of W at a time: four sums in flight, x read once for them
comptime AHEAD = 8  # rows ahead that the prefetch asks for: the next two groups of four


@always_inline
def pairs_of_bytes(q: SIMD[DType.uint8, 64], x: SIMD[DType.int8, 64]) -> SIMD[DType.int16, 32]:
    """Lane i: q[2i] * x[2i] + q[2i + 1] * x[2i + 1], unsigned bytes times signed ones, in 16 bits."""
    comptime if CompilationTarget.has_avx512f():  # one instruction, vpmaddubsw
        return llvm_intrinsic["llvm.x86.avx512.pmaddubs.w.512", SIMD[DType.int16, 32]](q, x)
    else:  # anywhere else (an ARM Mac, say): the same sums, as plain integer arithmetic
        var products = (q.cast[DType.int16]() * x.cast[DType.int16]()).deinterleave()
        return products[0] + products[1]


@always_inline
def pairs_of_shorts(a: SIMD[DType.int16, 32], b: SIMD[DType.int16, 32]) -> SIMD[DType.int32, 16]:
    """Lane i: a[2i] * b[2i] + a[2i + 1] * b[2i + 1], in 32 bits."""
    comptime if CompilationTarget.has_avx512f():  # one instruction, vpmaddwd
        return llvm_intrinsic["llvm.x86.avx512.pmaddw.d.512", SIMD[DType.int32, 16]](a, b)
    else:
        var products = (a.cast[DType.int32]() * b.cast[DType.int32]()).deinterleave()
        return products[0] + products[1]


struct EightBitRow(Movable):
    """The row x rounded to 8 bits as q6_k's partner: a scale for each block of 256 values, and
    32 times the sum of each pair of rounded values (q6_k stores its weights as q + 32)."""

    var values: List[Int8]
    var scales: List[Float32]
    var offsets: List[Int16]

    def __init__(out self, row: UnsafePointer[Float32, _], k: Int):
        self.values = List[Int8](length=k, fill=0)
        self.scales = List[Float32](length=k // 256, fill=0)
        self.offsets = List[Int16](length=k // 2, fill=0)
        var values = self.values.unsafe_ptr()
        var offsets = self.offsets.unsafe_ptr()
        for b in range(k // 256):
            var largest = SIMD[DType.float32, 16](0)
            for i in range(256 * b, 256 * (b + 1), 16):
                largest = max(largest, abs(row.load[width=16](i)))
            var top = largest.reduce_max()
            self.scales[b] = top / 127
            var inverse = Float32(127) / top if top > 0 else Float32(0)
            for i in range(256 * b, 256 * (b + 1), 16):
                var rounded = round(row.load[width=16](i) * inverse).cast[DType.int32]()
                values.store(i, rounded.cast[DType.int8]())
                var pairs = rounded.deinterleave()
                offsets.store(i // 2, (32 * (pairs[0] + pairs[1])).cast[DType.int16]())


# ANCHOR: q6_k
@always_inline
def q6_k_block(p: UnsafePointer[UInt8, _], x: UnsafePointer[Int8, _], offsets: UnsafePointer[Int16, _]) -> SIMD[DType.int32, 16]:
    """One q6_k block (256 weights in 210 bytes) times 256 values of x in 8 bits: 16 lanes whose sum is
    the dot product, before the block's two scales (the weights' d and x's)."""
    # The layout: ql [128] (each weight's low 4 bits), qh [64] (its high 2 bits), 16 int8 scales, d.
    # A half of 128 weights takes 64 bytes of ql and 32 of qh; weight l + 32 m of the half (l < 32)
    # is ql's low (m = 0, 1) or high (m = 2, 3) nibble of byte l + 32 (m % 2), below qh's bits 2m, 2m + 1 of byte l.
    var scales = bitcast[DType.int8, 16](p.load[width=16](192)).cast[DType.int16]()
    var twice = scales.join(scales)  # 32 lanes, for the shuffles below
    # The bit work runs on 16-bit lanes, two weights a lane (x86 has no 8-bit shifts); the masks
    # keep each byte's bits apart. The first 32 bytes of a half take qh's bits 0-1 (q0) or 4-5
    # (q2), the next 32 its bits 2-3 (q1) or 6-7 (q3).
    comptime shift01 = SIMD[DType.uint16, 16](0).join(SIMD[DType.uint16, 16](2))
    comptime shift23 = SIMD[DType.uint16, 16](4).join(SIMD[DType.uint16, 16](6))
    var acc = SIMD[DType.int32, 16](0)
    comptime for half in range(2):
        var low = bitcast[DType.uint16, 32](p.load[width=64](64 * half))  # ql: weights 0-63 and 64-127
        var high32 = p.load[width=32](128 + 32 * half)
        var high = bitcast[DType.uint16, 32](high32.join(high32))  # qh, twice
        var q01 = (low & 0x0F0F) | (((high >> shift01) & 0x0303) << 4)  # weights 0-63 of the half, 0 to 63
        var q23 = ((low >> 4) & 0x0F0F) | (((high >> shift23) & 0x0303) << 4)  # 64-127
        var x0 = bitcast[DType.int8, 64](x.bitcast[UInt8]().load[width=64](128 * half))
        var x1 = bitcast[DType.int8, 64](x.bitcast[UInt8]().load[width=64](128 * half + 64))
        # Each pair's sum of q x, less 32 times its x (the + 32 the weights are stored with), then
        # times its group's scale: lane i of a pair sum holds weights 2i, 2i + 1, of group i // 8.
        comptime s = 8 * half
        var first = twice.shuffle[s, s, s, s, s, s, s, s, s + 1, s + 1, s + 1, s + 1, s + 1, s + 1, s + 1, s + 1,
                                  s + 2, s + 2, s + 2, s + 2, s + 2, s + 2, s + 2, s + 2,
                                  s + 3, s + 3, s + 3, s + 3, s + 3, s + 3, s + 3, s + 3]()
        var second = twice.shuffle[s + 4, s + 4, s + 4, s + 4, s + 4, s + 4, s + 4, s + 4,
                                   s + 5, s + 5, s + 5, s + 5, s + 5, s + 5, s + 5, s + 5,
                                   s + 6, s + 6, s + 6, s + 6, s + 6, s + 6, s + 6, s + 6,
                                   s + 7, s + 7, s + 7, s + 7, s + 7, s + 7, s + 7, s + 7]()
        var o0 = offsets.load[width=32](64 * half)
        var o1 = offsets.load[width=32](64 * half + 32)
        acc += pairs_of_shorts(pairs_of_bytes(bitcast[DType.uint8, 64](q01), x0) - o0, first)
        acc += pairs_of_shorts(pairs_of_bytes(bitcast[DType.uint8, 64](q23), x1) - o1, second)
    return acc


@always_inline
def scaled_block(p: UnsafePointer[UInt8, _], x: UnsafePointer[Int8, _], offsets: UnsafePointer[Int16, _],
                 scale: Float32) -> SIMD[DType.float32, 16]:
    """q6_k_block with both scales applied: the block's d and x's ``scale``."""
    var d = (p + 208).bitcast[Float16]().load().cast[DType.float32]() * scale
    return q6_k_block(p, x, offsets).cast[DType.float32]() * d


@always_inline
def q6_k_rows(dst: UnsafePointer[mut=True, Float32, _], values: UnsafePointer[Int8, _], scales: UnsafePointer[Float32, _], offsets: UnsafePointer[Int16, _],
              weights: UnsafePointer[UInt8, _],
              start: Int, end: Int, k: Int, stride: Int):
    """dst[r] = the dot product of W's row r (``stride`` bytes of q6_k blocks) with the row x rounded to 8 bits,
    for the rows start to end, four at a time."""
    var r = start
    while r + ROWS <= end:
        var t0 = SIMD[DType.float32, 16](0)
        var t1 = SIMD[DType.float32, 16](0)
        var t2 = SIMD[DType.float32, 16](0)
        var t3 = SIMD[DType.float32, 16](0)
        var p = weights + r * stride
        for b in range(k // 256):
            var block = p + 210 * b
            comptime for ahead in range(AHEAD, AHEAD + ROWS):
                comptime for line in range(0, 210, 64):
                    prefetch[PrefetchOptions().for_read().low_locality()](block + ahead * stride + line)
            var xb, ob, xs = values + 256 * b, offsets + 128 * b, scales.load(b)
            t0 += scaled_block(block, xb, ob, xs)
            t1 += scaled_block(block + stride, xb, ob, xs)
            t2 += scaled_block(block + 2 * stride, xb, ob, xs)
            t3 += scaled_block(block + 3 * stride, xb, ob, xs)
        dst.store(r, t0.reduce_add())
        dst.store(r + 1, t1.reduce_add())
        dst.store(r + 2, t2.reduce_add())
        dst.store(r + 3, t3.reduce_add())
        r += ROWS
    while r < end:  # the last rows, one at a time
        var total = SIMD[DType.float32, 16](0)
        for b in range(k // 256):
            total += scaled_block(weights + r * stride + 210 * b, values + 256 * b, offsets + 128 * b, scales.load(b))
        dst.store(r, total.reduce_add())
        r += 1
# ANCHOR_END: q6_k
