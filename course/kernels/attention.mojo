# One new token's attention over the KV cache as it lies in memory: chapter 16's
# attend_in_place as a MAX custom op, for long contexts.
#
# At 512 tokens the cache is as large as a quantized model's weights, and a decode step
# reads all of it. Written with MAX's ops, the attention is three passes (the scores, a
# softmax, the weighted sum of the values), each a reduction over a short axis, and they
# read the cache at half memory's speed. This kernel reads each cached key and value once.
# Each core takes a band of the tokens and reads it front to back (the cache is
# token-major): the scores of its keys, their exp(score - m) with m its band's largest,
# and its values weighted by those. The bands then merge as FlashAttention's decoding
# kernels do: each band's sums scaled by exp(its m - the overall m), then divided by
# their total. The cache may be float32 or float16 (half the bytes, as llama.cpp's).

import extensibility as compiler
from extensibility import InputTensor, OutputTensor
from max.algorithm import sync_parallelize
from max.gpu.host import DeviceContext
from std.math import exp, sqrt
from std.sys.info import size_of
from std.sys.intrinsics import PrefetchOptions, prefetch

from .one_row import band_count

comptime WIDTH = 16  # float32s per register
comptime AHEAD = 8  # tokens ahead that the prefetch asks for
comptime SHORT = 128  # fewer cached tokens than this: one core does them all


# ANCHOR: attention
@always_inline
def attend_band[cache: DType](
    core: Int, cores: Int, tokens: Int, heads: Int, d: Int,
    qs: UnsafePointer[Float32, _],  # c_attn's output: q [H, D], then the new token's k, then its v
    keys: UnsafePointer[Scalar[cache], _], values: UnsafePointer[Scalar[cache], _],  # the cache [tokens, H, D]
    m_all: UnsafePointer[mut=True, Float32, _], l_all: UnsafePointer[mut=True, Float32, _],
    acc_all: UnsafePointer[mut=True, Float32, _],
):
    """Core ``core`` of ``cores``: its band of the tokens + 1 (the last band the new token too), read front to
    back, every head of a token at once. Leaves its largest score of head h in m_all[core * heads + h], its sum
    of exp(score - largest) in l_all, and its values weighted by those in acc_all[(core * heads + h) * d ...]."""
    var ks = qs + heads * d
    var vs = ks + heads * d
    var n = tokens + 1
    var start = n * core // cores
    var end = n * (core + 1) // cores
    var count = end - start
    var stride = heads * d  # one token's row of the cache
    comptime LINE = 64 // size_of[cache]()  # a cache line's values
    var scale = Float32(1) / sqrt(Float32(d))
    var score_list = List[Float32](length=heads * count, fill=0)
    var w = score_list.unsafe_ptr()  # head h's scores, then weights: w[h * count + i] for token start + i
    var sums = acc_all + core * heads * d
    # The scores, token by token: q against every head's key.
    for i in range(count):
        var t = start + i
        var key = keys + t * stride
        for line in range(0, stride, LINE):  # the whole row of the token AHEAD tokens on
            prefetch[PrefetchOptions().for_read().low_locality()](key + AHEAD * stride + line)
        for h in range(heads):
            var s = SIMD[DType.float32, WIDTH](0)
            for c in range(0, d, WIDTH):
                var kc = key.load[width=WIDTH](h * d + c).cast[DType.float32]() if t < tokens else ks.load[width=WIDTH](h * d + c)
                s += qs.load[width=WIDTH](h * d + c) * kc
            w[h * count + i] = s.reduce_add() * scale
    # Each head's largest score, its exp(score - largest) and their sum.
    for h in range(heads):
        var row = w + h * count
        var whole = count - count % WIDTH  # the tokens that fill whole registers; the rest one at a time
        var top = SIMD[DType.float32, WIDTH](-3.0e38)
        for i in range(0, whole, WIDTH):
            top = max(top, row.load[width=WIDTH](i))
        var m = top.reduce_max()
        for i in range(whole, count):
            m = max(m, row[i])
        var sum = SIMD[DType.float32, WIDTH](0)
        for i in range(0, whole, WIDTH):
            var e = exp(row.load[width=WIDTH](i) - m)
            row.store(i, e)
            sum += e
        var l = sum.reduce_add()
        for i in range(whole, count):
            row[i] = exp(row[i] - m)
            l += row[i]
        m_all[core * heads + h] = m
        l_all[core * heads + h] = l
        for c in range(0, d, WIDTH):
            sums.store(h * d + c, SIMD[DType.float32, WIDTH](0))
    # The values weighted by them, token by token.
    for i in range(count):
        var t = start + i
        var value = values + t * stride
        for line in range(0, stride, LINE):  # the whole row of the token AHEAD tokens on
            prefetch[PrefetchOptions().for_read().low_locality()](value + AHEAD * stride + line)
        for h in range(heads):
            var weight = w[h * count + i]
            for c in range(0, d, WIDTH):
                var vc = value.load[width=WIDTH](h * d + c).cast[DType.float32]() if t < tokens else vs.load[width=WIDTH](h * d + c)
                sums.store(h * d + c, sums.load[width=WIDTH](h * d + c) + vc * weight)
    _ = score_list^


@always_inline
def merge_heads(
    h0: Int, h1: Int, cores: Int, tokens: Int, heads: Int, d: Int,
    m_all: UnsafePointer[Float32, _], l_all: UnsafePointer[Float32, _], acc_all: UnsafePointer[Float32, _],
    y: UnsafePointer[mut=True, Float32, _],  # [H, D]
):
    """Heads h0 to h1 of the attention's output from the bands' partial softmaxes: each band's sums scaled by
    exp(its largest - the overall largest), then divided by their total."""
    var n = tokens + 1
    for h in range(h0, h1):
        var m = Float32(-3.0e38)
        for core in range(cores):
            if n * (core + 1) // cores > n * core // cores:
                m = max(m, m_all[core * heads + h])
        var l = Float32(0)
        for c in range(0, d, WIDTH):
            y.store(h * d + c, SIMD[DType.float32, WIDTH](0))
        for core in range(cores):
            if n * (core + 1) // cores == n * core // cores:
                continue  # an empty band
            var f = exp(m_all[core * heads + h] - m)
            l += l_all[core * heads + h] * f
            for c in range(0, d, WIDTH):
                y.store(h * d + c, y.load[width=WIDTH](h * d + c) + acc_all.load[width=WIDTH]((core * heads + h) * d + c) * f)
        for c in range(0, d, WIDTH):
            y.store(h * d + c, y.load[width=WIDTH](h * d + c) / l)


@compiler.register("attend_one")
struct AttendOne:
    @staticmethod
    def execute[target: StaticString, cache: DType, bands: Int](
        y: OutputTensor[dtype=DType.float32, rank=3, ...],  # [1, H, D]: the attention's output
        new_k: OutputTensor[dtype=cache, rank=3, ...],  # [1, H, D]: the new key and value, for the cache
        new_v: OutputTensor[dtype=cache, rank=3, ...],
        qkv: InputTensor[dtype=DType.float32, rank=2, ...],  # [1, 3 H D]: c_attn's output, q then k then v
        past_k: InputTensor[dtype=cache, rank=3, ...],  # [P, H, D]: the cached tokens', token-major
        past_v: InputTensor[dtype=cache, rank=3, ...],
        ctx: DeviceContext,
    ) raises:
        comptime if target != "cpu":
            raise Error("attend_one is a CPU kernel; on a GPU the course keeps MAX's ops")
        var tokens = past_k.dim_size(0)
        var heads = past_k.dim_size(1)
        var d = past_k.dim_size(2)
        if d % WIDTH != 0:
            raise Error("attend_one needs a head size that is a multiple of 16")
        var qs = qkv.unsafe_ptr()  # q [H, D], then k, then v
        var ks = qs + heads * d
        var vs = ks + heads * d
        for i in range(0, heads * d, WIDTH):  # the new key and value in the cache's type
            new_k.unsafe_ptr().store(i, ks.load[width=WIDTH](i).cast[cache]())
            new_v.unsafe_ptr().store(i, vs.load[width=WIDTH](i).cast[cache]())
        var keys = past_k.unsafe_ptr()
        var values = past_v.unsafe_ptr()
        var cores = band_count(bands) if tokens >= SHORT else 1  # a short cache: one core, no hand-off
        # Each core takes a band of the tokens; then the bands' partial softmaxes merge.
        var largest = List[Float32](length=cores * heads, fill=0)  # core c's largest score of head h: [c * heads + h]
        var total = List[Float32](length=cores * heads, fill=0)  # its sum of exp(score - largest)
        var partial = List[Float32](length=cores * heads * d, fill=0)  # its values weighted by those
        var m_all = largest.unsafe_ptr()
        var l_all = total.unsafe_ptr()
        var acc_all = partial.unsafe_ptr()

        def band(core: Int) {imm}:
            attend_band[cache](core, cores, tokens, heads, d, qs, keys, values, m_all, l_all, acc_all)

        sync_parallelize(band, cores)
        merge_heads(0, heads, cores, tokens, heads, d, m_all, l_all, acc_all, y.unsafe_ptr())
        _ = largest^
        _ = total^
        _ = partial^
# ANCHOR_END: attention
