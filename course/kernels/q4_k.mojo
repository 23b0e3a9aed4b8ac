# One row times a weight matrix stored in GGUF's q4_k blocks, y = x @ Wᵀ for x [1, K]:
# q6_k.mojo's product for q4_k: the loop that layer.mojo's ops run for q4_k weights (one_row_q4_k,
# and the fused ones).
#
# A q4_k block holds 256 weights in 144 bytes: two fp16 numbers d and dmin, eight 6-bit
# scales and eight 6-bit mins (one of each for every group of 32 weights, packed in 12
# bytes), and 256 4-bit values q. Weight i of group j is d · scale_j · q_i − dmin · min_j.
# So the dot product with a row x rounded to 8 bits (x ≈ s · x8) is
#
#     s · (d · Σ_j scale_j · Σ_{i in j} q_i · x8_i  −  dmin · Σ_j min_j · Σ_{i in j} x8_i),
#
# whose first sum is bytes times bytes (vpmaddubsw) and then times the group's scale
# (vpmaddwd), as in q6_k.mojo, and whose second needs only each group's sum of x8,
# computed once for the row. The 12 packed bytes are unpacked as three 32-bit words
# (eight scales and eight mins in a dozen integer ops, not one by one), and the mins'
# part is summed in lanes of its own, so that nothing is reduced until a row ends.
# Four rows of W at a time, as in q6_k.mojo.

from std.memory import bitcast
from std.sys.intrinsics import PrefetchOptions, prefetch

from .q6_k import AHEAD, ROWS, EightBitRow, pairs_of_bytes, pairs_of_shorts

comptime BLOCK = 144  # bytes of a q4_k block: d, dmin (2 + 2), the scales and mins (12), q (128)


struct FourBitPartner(Movable):
    """The row x rounded to 8 bits as for q6_k (a scale for each block of 256), its values in the order
    a q4_k block's nibbles take them, and each group of 32's sum of them."""

    var values: List[Int8]
    var scales: List[Float32]
    var sums: List[Float32]

    def __init__(out self, row: UnsafePointer[Float32, _], k: Int):
        var rounded = EightBitRow(row, k)
        self.scales = rounded.scales.copy()
        self.values = List[Int8](length=k, fill=0)
        self.sums = List[Float32](length=k // 32, fill=0)
        var plain = rounded.values.unsafe_ptr()
        var values = self.values.unsafe_ptr()
        # 64 bytes of q hold four groups: the low nibbles of bytes 0-31 and 32-63 are groups 0 and
        # 2 of the 128 weights, the high nibbles groups 1 and 3; x's groups go in that order.
        for c in range(0, k, 128):
            values.store(c, plain.load[width=32](c))
            values.store(c + 32, plain.load[width=32](c + 64))
            values.store(c + 64, plain.load[width=32](c + 32))
            values.store(c + 96, plain.load[width=32](c + 96))
        for j in range(k // 32):
            self.sums[j] = plain.load[width=32](32 * j).cast[DType.int32]().reduce_add().cast[DType.float32]()


@always_inline
def scales_and_mins(p: UnsafePointer[UInt8, _]) -> Tuple[SIMD[DType.int16, 8], SIMD[DType.float32, 8]]:
    """A block's eight 6-bit scales and eight 6-bit mins, unpacked from its 12 bytes four at a time."""
    var u = (p + 4).bitcast[UInt32]()
    var u0, u1, u2 = u.load(0), u.load(1), u.load(2)
    var scales = SIMD[DType.uint32, 2](u0 & 0x3F3F3F3F, (u2 & 0x0F0F0F0F) | (((u0 >> 6) & 0x03030303) << 4))
    var mins = SIMD[DType.uint32, 2](u1 & 0x3F3F3F3F, ((u2 >> 4) & 0x0F0F0F0F) | (((u1 >> 6) & 0x03030303) << 4))
    return (bitcast[DType.uint8, 8](scales).cast[DType.int16](), bitcast[DType.uint8, 8](mins).cast[DType.float32]())


# ANCHOR: q4_k
@always_inline
def block_sums(p: UnsafePointer[UInt8, _], x: UnsafePointer[Int8, _], sums: SIMD[DType.float32, 8]
               ) -> Tuple[SIMD[DType.int32, 16], SIMD[DType.float32, 8]]:
    """One q4_k block (256 weights in 144 bytes) times 256 values of x in 8 bits, in the nibbles' order,
    before d and dmin: 16 lanes whose sum is Σ_j scale_j · Σ q x8, and 8, one a group, min_j · Σ x8."""
    var unpacked = scales_and_mins(p)
    var s8 = unpacked[0]
    var s32 = s8.join(s8).join(s8.join(s8))  # the eight scales, four times: the shuffles below pick from it
    var acc = SIMD[DType.int32, 16](0)
    comptime for half in range(2):  # 128 weights: 64 bytes of q, four groups
        var q = p.load[width=64](16 + 64 * half)
        var x_low = bitcast[DType.int8, 64](x.bitcast[UInt8]().load[width=64](128 * half))
        var x_high = bitcast[DType.int8, 64](x.bitcast[UInt8]().load[width=64](128 * half + 64))
        comptime g = 4 * half
        var low = s32.shuffle[g, g, g, g, g, g, g, g, g, g, g, g, g, g, g, g,
                              g + 2, g + 2, g + 2, g + 2, g + 2, g + 2, g + 2, g + 2,
                              g + 2, g + 2, g + 2, g + 2, g + 2, g + 2, g + 2, g + 2]()
        var high = s32.shuffle[g + 1, g + 1, g + 1, g + 1, g + 1, g + 1, g + 1, g + 1,
                               g + 1, g + 1, g + 1, g + 1, g + 1, g + 1, g + 1, g + 1,
                               g + 3, g + 3, g + 3, g + 3, g + 3, g + 3, g + 3, g + 3,
                               g + 3, g + 3, g + 3, g + 3, g + 3, g + 3, g + 3, g + 3]()
        acc += pairs_of_shorts(pairs_of_bytes(q & 0x0F, x_low), low)
        acc += pairs_of_shorts(pairs_of_bytes(q >> 4, x_high), high)
    return (acc, unpacked[1] * sums)


struct RowSum(TrivialRegisterPassable):
    """One row's running dot product: its scaled lanes, and its mins' lanes, to subtract."""

    var lanes: SIMD[DType.float32, 16]
    var mins: SIMD[DType.float32, 8]

    def __init__(out self):
        self.lanes = SIMD[DType.float32, 16](0)
        self.mins = SIMD[DType.float32, 8](0)

    @always_inline
    def add(mut self, p: UnsafePointer[UInt8, _], x: UnsafePointer[Int8, _], sums: SIMD[DType.float32, 8], scale: Float32):
        """Block p of the row times x's block (``scale`` its 8 bits'; ``sums`` its groups')."""
        var parts = block_sums(p, x, sums)
        var d = p.bitcast[Float16]().load[width=2]().cast[DType.float32]() * scale  # d and dmin
        self.lanes = parts[0].cast[DType.float32]().fma(SIMD[DType.float32, 16](d[0]), self.lanes)
        self.mins = parts[1].fma(SIMD[DType.float32, 8](d[1]), self.mins)

    @always_inline
    def total(self) -> Float32:
        """The row's dot product."""
        return self.lanes.reduce_add() - self.mins.reduce_add()


@always_inline
def q4_k_rows(dst: UnsafePointer[mut=True, Float32, _], values: UnsafePointer[Int8, _], scales: UnsafePointer[Float32, _], sums: UnsafePointer[Float32, _],
              weights: UnsafePointer[UInt8, _],
              start: Int, end: Int, k: Int, stride: Int):
    """dst[r] = the dot product of W's row r (``stride`` bytes of q4_k blocks) with the row x rounded to 8 bits,
    for the rows start to end, four at a time."""
    var r = start
    while r + ROWS <= end:
        var t0, t1, t2, t3 = RowSum(), RowSum(), RowSum(), RowSum()
        var p = weights + r * stride
        for b in range(k // 256):
            var block = p + BLOCK * b
            comptime for ahead in range(AHEAD, AHEAD + ROWS):
                comptime for line in range(0, BLOCK, 64):
                    prefetch[PrefetchOptions().for_read().low_locality()](block + ahead * stride + line)
            var xb, sb, xs = values + 256 * b, sums.load[width=8](8 * b), scales.load(b)
            t0.add(block, xb, sb, xs)
            t1.add(block + stride, xb, sb, xs)
            t2.add(block + 2 * stride, xb, sb, xs)
            t3.add(block + 3 * stride, xb, sb, xs)
        dst.store(r, t0.total())
        dst.store(r + 1, t1.total())
        dst.store(r + 2, t2.total())
        dst.store(r + 3, t3.total())
        r += ROWS
    while r < end:  # the last rows, one at a time
        var t = RowSum()
        for b in range(k // 256):
            t.add(weights + r * stride + BLOCK * b, values + 256 * b, sums.load[width=8](8 * b), scales.load(b))
        dst.store(r, t.total())
        r += 1
# ANCHOR_END: q4_k
