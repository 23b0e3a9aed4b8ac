# One row times a weight matrix, y = x @ Wᵀ for x [1, K] and W [N, K]: chapter 16's
# product at the memory limit, written as a MAX custom op.
#
# A decode step multiplies every weight matrix by a single row, so each weight is read
# once and used for one multiply-add: the product waits on memory, not on arithmetic.
# This kernel does only what that needs: each core takes one contiguous band of W's
# rows, reads it front to back (four rows at a time, 16 floats a load), and asks for
# the next rows' cache lines before it needs them. MAX's own products do more work
# around the same pass (a matmul tiles for many rows; a fused multiply and sum
# recomputes whatever produced x), and inside the model they read memory slower.

import extensibility as compiler
from extensibility import InputTensor, OutputTensor
from max.algorithm import sync_parallelize
from max.gpu.host import DeviceContext
from max.runtime.asyncrt import parallelism_level
from std.sys.info import num_physical_cores
from std.sys.intrinsics import PrefetchOptions, prefetch

@always_inline
def band_count(bands: Int) -> Int:
    """How many bands a kernel splits its work into: one a core, no more than MAX has workers (its pool follows the
    process's affinity mask, ``taskset``; a band without a worker of its own would wait at block.mojo's barriers
    for ever), and no more than ``bands``, the CPUs this process may use, a container's CPU quota included, which
    MAX's pool does not follow (``course.runtime.usable_cpus``, each op's parameter)."""
    return max(1, min(num_physical_cores(), parallelism_level(None), bands))


# ANCHOR: kernel
comptime WIDTH = 16  # float32s per load: one 64-byte cache line, one AVX-512 register
comptime AHEAD = 8  # rows ahead that the prefetch asks for: two groups of four


@always_inline
def dot_rows(sums: UnsafePointer[mut=True, Float32, _], row: UnsafePointer[Float32, _], weights: UnsafePointer[Float32, _],
             start: Int, end: Int, k: Int):
    """sums[r] = the dot product of W's row r with x, for the rows start to end of W [N, k], read front to back."""
    var whole = k - k % WIDTH  # the columns that fill whole loads; the rest one at a time
    var r = start
    while r + 4 <= end:  # four rows at a time: four sums in flight, x loaded once
        var p = weights + r * k
        var s0 = SIMD[DType.float32, WIDTH](0)
        var s1 = SIMD[DType.float32, WIDTH](0)
        var s2 = SIMD[DType.float32, WIDTH](0)
        var s3 = SIMD[DType.float32, WIDTH](0)
        for c in range(0, whole, WIDTH):
            comptime for ahead in range(AHEAD, AHEAD + 4):
                prefetch[PrefetchOptions().for_read().low_locality()](p + ahead * k + c)
            var xs = row.load[width=WIDTH](c)
            s0 += p.load[width=WIDTH](c) * xs
            s1 += p.load[width=WIDTH](k + c) * xs
            s2 += p.load[width=WIDTH](2 * k + c) * xs
            s3 += p.load[width=WIDTH](3 * k + c) * xs
        var t0 = s0.reduce_add()
        var t1 = s1.reduce_add()
        var t2 = s2.reduce_add()
        var t3 = s3.reduce_add()
        for c in range(whole, k):
            var xc = row.load(c)
            t0 += p.load(c) * xc
            t1 += p.load(k + c) * xc
            t2 += p.load(2 * k + c) * xc
            t3 += p.load(3 * k + c) * xc
        sums.store(r, t0)
        sums.store(r + 1, t1)
        sums.store(r + 2, t2)
        sums.store(r + 3, t3)
        r += 4
    while r < end:  # the last rows, one at a time
        var p = weights + r * k
        var s = SIMD[DType.float32, WIDTH](0)
        for c in range(0, whole, WIDTH):
            s += p.load[width=WIDTH](c) * row.load[width=WIDTH](c)
        var t = s.reduce_add()
        for c in range(whole, k):
            t += p.load(c) * row.load(c)
        sums.store(r, t)
        r += 1


@compiler.register("one_row")
struct OneRow:
    @staticmethod
    def execute[target: StaticString, bands: Int](
        y: OutputTensor[dtype=DType.float32, rank=2, ...],
        x: InputTensor[dtype=DType.float32, rank=2, ...],
        w: InputTensor[dtype=DType.float32, rank=2, ...],
        ctx: DeviceContext,
    ) raises:
        comptime if target != "cpu":
            raise Error("one_row is a CPU kernel; on a GPU the course keeps MAX's product")
        var n = w.dim_size(0)
        var k = w.dim_size(1)
        var out = y.unsafe_ptr()
        var row = x.unsafe_ptr()
        var weights = w.unsafe_ptr()
        var cores = band_count(bands)

        def band(core: Int) {imm}:  # each core one contiguous band of W's rows
            dot_rows(out, row, weights, n * core // cores, n * (core + 1) // cores, k)

        sync_parallelize(band, cores)
# ANCHOR_END: kernel
