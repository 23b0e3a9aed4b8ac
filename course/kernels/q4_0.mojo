# One row times a weight matrix stored in GGUF's q4_0 blocks, y = x @ Wᵀ for x [1, K]: the
# loop that layer.mojo's ops run for q4_0 weights (one_row_q4_0, and the fused ones).
#
# A q4_0 block holds 32 weights in 18 bytes: an fp16 scale d, then 16 bytes whose low
# nibbles are weights 0-15 and whose high nibbles are weights 16-31, each stored as q + 8.
# Weight i is d · (q_i − 8). So with the row x rounded to 8 bits, a scale s for each group
# of 32 (x ≈ s · x8, GGUF's q8_0, as llama.cpp does), a block's share of the dot product is
#
#     d · s · (Σ q_i · x8_i  −  8 · Σ x8_i),
#
# whose second sum depends on x alone: it is computed once for the row. The format is the
# simplest of the three, and so the one where the unpacking costs most for each byte
# read: two blocks (36 bytes) are unpacked at once into 64 nibbles, multiplied by 64 bytes
# of x and summed four by four in one instruction (AVX-512 VNNI's vpdpbusd, which starts
# from the −8 · Σ x8 terms), then each block's four lanes are scaled by its d · s.

from std.memory import bitcast
from std.sys import CompilationTarget, llvm_intrinsic
from std.sys.intrinsics import PrefetchOptions, prefetch

from .q6_k import AHEAD, ROWS, pairs_of_bytes, pairs_of_shorts

comptime BLOCK = 18  # bytes of a q4_0 block: d (2), then 16 bytes of 32 nibbles


struct PairedBytes(Movable):
    """The row x rounded to 8 bits with a scale for each group of 32, its values in the order in which
    two q4_0 blocks' nibbles come out (block b's low nibbles, b + 1's, b's high ones, b + 1's), and
    −8 times each four of them summed, where vpdpbusd starts."""

    var values: List[Int8]
    var scales: List[Float32]
    var offsets: List[Int32]

    def __init__(out self, row: UnsafePointer[Float32, _], k: Int):
        var blocks = k // 32
        self.values = List[Int8](length=k, fill=0)
        self.scales = List[Float32](length=blocks, fill=0)
        self.offsets = List[Int32](length=k // 4, fill=0)
        var values = self.values.unsafe_ptr()
        for b in range(blocks):
            var first = row.load[width=16](32 * b)
            var second = row.load[width=16](32 * b + 16)
            var top = max(abs(first), abs(second)).reduce_max()
            self.scales[b] = top / 127
            var inverse = Float32(127) / top if top > 0 else Float32(0)
            var low = 32 * b  # where weights 0-15 of the block go, and 16-31: a last unpaired block in order
            var high = 32 * b + 16
            if b % 2 == 0 and b + 1 < blocks:
                high = 32 * b + 32
            elif b % 2 == 1:
                low, high = 32 * b - 16, 32 * b + 16
            values.store(low, round(first * inverse).cast[DType.int8]())
            values.store(high, round(second * inverse).cast[DType.int8]())
        for i in range(k // 4):
            self.offsets[i] = -8 * values.load[width=4](4 * i).cast[DType.int32]().reduce_add()


@always_inline
def byte_dots(acc: SIMD[DType.int32, 16], q: SIMD[DType.uint8, 64], x: SIMD[DType.int8, 64]) -> SIMD[DType.int32, 16]:
    """Lane i: acc[i] + Σ q[4i + j] · x[4i + j] for j < 4, unsigned bytes times signed ones."""
    comptime if CompilationTarget.has_avx512f() and CompilationTarget.has_vnni():  # one instruction, vpdpbusd
        return llvm_intrinsic["llvm.x86.avx512.vpdpbusd.512", SIMD[DType.int32, 16]](
            acc, bitcast[DType.int8, 64](q), x)
    else:  # vpmaddubsw and vpmaddwd where there is AVX-512 alone, plain integers elsewhere
        return acc + pairs_of_shorts(pairs_of_bytes(q, x), SIMD[DType.int16, 32](1))


# ANCHOR: q4_0
@always_inline
def pair_of_blocks(p: UnsafePointer[UInt8, _], x: UnsafePointer[Int8, _], offsets: UnsafePointer[Int32, _],
                   scales: SIMD[DType.float32, 2]) -> SIMD[DType.float32, 16]:
    """Two q4_0 blocks (64 weights in 36 bytes) times x's 64 values in 8 bits (``scales``: x's for the two):
    16 lanes whose sum is their share of the dot product."""
    var q = p.load[width=16](2).join((p + BLOCK).load[width=16](2))  # both blocks' nibbles
    var nibbles = (q & 0x0F).join(q >> 4)  # b's weights 0-15, b + 1's, b's 16-31, b + 1's
    var sums = byte_dots(offsets.load[width=16](), nibbles, bitcast[DType.int8, 64](x.bitcast[UInt8]().load[width=64]()))
    var d = SIMD[DType.float32, 2](p.bitcast[Float16]().load().cast[DType.float32](),
                                   (p + BLOCK).bitcast[Float16]().load().cast[DType.float32]()) * scales
    var lanes = SIMD[DType.float32, 4](d[0]).join(SIMD[DType.float32, 4](d[1]))  # b's four lanes, b + 1's, twice
    return sums.cast[DType.float32]() * lanes.join(lanes)


@always_inline
def one_block(p: UnsafePointer[UInt8, _], x: UnsafePointer[Int8, _], offsets: UnsafePointer[Int32, _],
              scale: Float32) -> Float32:
    """A last, unpaired block (32 weights in 18 bytes) times x's 32 values in their plain order."""
    var q = p.load[width=16](2)
    var nibbles = (q & 0x0F).join(q >> 4).cast[DType.int32]()
    var sum = (nibbles * x.load[width=32]().cast[DType.int32]()).reduce_add() + offsets.load[width=8]().reduce_add()
    return sum.cast[DType.float32]() * p.bitcast[Float16]().load().cast[DType.float32]() * scale


@always_inline
def q4_0_row(p: UnsafePointer[UInt8, _], values: UnsafePointer[Int8, _], scales: UnsafePointer[Float32, _],
             offsets: UnsafePointer[Int32, _], k: Int) -> Float32:
    """One row of W (q4_0 blocks from p) times the row x rounded to 8 bits."""
    var total = SIMD[DType.float32, 16](0)
    for i in range(k // 64):
        total += pair_of_blocks(p + 2 * BLOCK * i, values + 64 * i, offsets + 16 * i, scales.load[width=2](2 * i))
    var t = total.reduce_add()
    if (k // 32) % 2 == 1:
        var b = k // 32 - 1
        t += one_block(p + BLOCK * b, values + 32 * b, offsets + 8 * b, scales.load(b))
    return t


@always_inline
def q4_0_rows(dst: UnsafePointer[mut=True, Float32, _], values: UnsafePointer[Int8, _], scales: UnsafePointer[Float32, _],
              offsets: UnsafePointer[Int32, _], weights: UnsafePointer[UInt8, _], start: Int, end: Int, k: Int, stride: Int):
    """dst[r] = the dot product of W's row r (``stride`` bytes of q4_0 blocks) with the row x rounded to 8 bits,
    for the rows start to end, four at a time."""
    var r = start
    while r + ROWS <= end:
        var t0 = SIMD[DType.float32, 16](0)
        var t1 = SIMD[DType.float32, 16](0)
        var t2 = SIMD[DType.float32, 16](0)
        var t3 = SIMD[DType.float32, 16](0)
        var p = weights + r * stride
        for i in range(k // 64):
            var pair = p + 2 * BLOCK * i
            comptime for ahead in range(AHEAD, AHEAD + ROWS):
                prefetch[PrefetchOptions().for_read().low_locality()](pair + ahead * stride)
            var xb, ob, sb = values + 64 * i, offsets + 16 * i, scales.load[width=2](2 * i)
            t0 += pair_of_blocks(pair, xb, ob, sb)
            t1 += pair_of_blocks(pair + stride, xb, ob, sb)
            t2 += pair_of_blocks(pair + 2 * stride, xb, ob, sb)
            t3 += pair_of_blocks(pair + 3 * stride, xb, ob, sb)
        var totals = SIMD[DType.float32, 4](t0.reduce_add(), t1.reduce_add(), t2.reduce_add(), t3.reduce_add())
        if (k // 32) % 2 == 1:
            var b = k // 32 - 1
            comptime for row in range(ROWS):
                totals[row] += one_block(p + row * stride + BLOCK * b, values + 32 * b, offsets + 8 * b, scales.load(b))
        dst.store(r, totals)
        r += ROWS
    while r < end:  # the last rows, one at a time
        dst.store(r, q4_0_row(weights + r * stride, values, scales, offsets, k))
        r += 1
# ANCHOR_END: q4_0
