# One GPT-2 block's decode step as one MAX custom op, float32 weights: ln_1 and c_attn, the
# attention, attn.c_proj and the residual add, ln_2, c_fc and GELU, mlp.c_proj and the
# residual add. Each core takes its band of every phase; between phases the cores wait
# for each other at a barrier, where five ops would each pay MAX's launch and a hand-off
# to the second core. The op writes the new token's key and value into the cache itself:
# the graph hands it the cache's first P + 1 rows as buffers, and it returns the residual
# stream alone.

import extensibility as compiler
from extensibility import InputTensor, IOSpec, ManagedTensorSlice, OutputTensor
from max.algorithm import sync_parallelize
from max.gpu.host import DeviceContext
from std.atomic import Atomic
from std.ffi import external_call
from std.sys import CompilationTarget
from std.time import perf_counter_ns

from .attention import SHORT, attend_band, merge_heads
from .layer import gelu_tanh, norm_columns
from .one_row import band_count, dot_rows

# A tensor the op reads and writes in place (the cache's views): a MAX buffer in the graph.
comptime CacheTensor = ManagedTensorSlice[io_spec=IOSpec.MutableInput, ...]


# ANCHOR: barrier
comptime SPIN_NS = 50_000  # how long a core spins at a barrier before it sleeps: 50 us, a phase's worth
comptime FUTEX = 202 if CompilationTarget.is_x86() else 98  # Linux's futex system call, x86-64 and arm64
comptime WAIT, WAKE = 128, 129  # FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE


@always_inline
def futex[T: AnyType](word: UnsafePointer[mut=True, Int32, _], op: Int, value: Int32, timeout: UnsafePointer[T, _]):
    _ = external_call["syscall", Int](FUTEX, word, Int32(op), value, timeout, Int(0), Int32(0))


@always_inline
def wait_all(count: UnsafePointer[mut=True, Int64, _], gate: UnsafePointer[mut=True, Int32, _],
             sleepers: UnsafePointer[mut=True, Int32, _], phase: Int, cores: Int):
    """Arrive at barrier ``phase`` (1, 2, ...) and wait until every core has. The last to arrive opens the gate
    (``gate`` becomes ``phase``). The others spin for SPIN_NS, which on a quiet machine is always enough, then
    sleep on the gate (Linux's futex; elsewhere they yield), so that a core whose partner another program has
    taken gives its CPU back instead of burning its share of it; the opener wakes whoever sleeps."""
    if Atomic[Int64].fetch_add(count, Int64(1)) + 1 == Int64(phase * cores):
        Atomic[Int32].store(gate, Int32(phase))
        if Atomic[Int32].load(sleepers) > 0:
            comptime if CompilationTarget.is_linux():
                futex(gate, WAKE, Int32(cores), count)  # a wake reads no timeout
        return
    var start = perf_counter_ns()
    var spins = 0
    while Atomic[Int32].load(gate) < Int32(phase):
        spins += 1
        if spins % 64 != 0 or perf_counter_ns() - start < SPIN_NS:
            continue
        comptime if CompilationTarget.is_linux():
            var timeout = List[Int](length=2, fill=0)  # { 0 s, 1 ms }: a net under the wake, never needed
            timeout[1] = 1_000_000
            _ = Atomic[Int32].fetch_add(sleepers, Int32(1))  # counted before the gate is read again: no lost wake
            while Atomic[Int32].load(gate) < Int32(phase):
                futex(gate, WAIT, Int32(phase - 1), timeout.unsafe_ptr())  # sleeps while the gate is still shut
            _ = Atomic[Int32].fetch_add(sleepers, Int32(-1))
            return
        else:
            _ = external_call["sched_yield", Int32]()
# ANCHOR_END: barrier


@compiler.register("block_one_row")
struct BlockOneRow:
    @staticmethod
    def execute[target: StaticString, cache: DType, bands: Int](
        y: OutputTensor[dtype=DType.float32, rank=2, ...],  # [1, C]: the residual stream after the block
        x: InputTensor[dtype=DType.float32, rank=2, ...],  # [1, C]
        ln1_g: InputTensor[dtype=DType.float32, rank=1, ...],
        ln1_b: InputTensor[dtype=DType.float32, rank=1, ...],
        eps: InputTensor[dtype=DType.float32, rank=1, ...],
        w_attn: InputTensor[dtype=DType.float32, rank=2, ...],  # [3C, C]
        b_attn: InputTensor[dtype=DType.float32, rank=1, ...],
        past_k: CacheTensor[dtype=cache, rank=3, ...],  # [P + 1, H, D]: P cached tokens, then the new one's row
        past_v: CacheTensor[dtype=cache, rank=3, ...],
        w_proj: InputTensor[dtype=DType.float32, rank=2, ...],  # [C, C]
        b_proj: InputTensor[dtype=DType.float32, rank=1, ...],
        ln2_g: InputTensor[dtype=DType.float32, rank=1, ...],
        ln2_b: InputTensor[dtype=DType.float32, rank=1, ...],
        w_fc: InputTensor[dtype=DType.float32, rank=2, ...],  # [4C, C]
        b_fc: InputTensor[dtype=DType.float32, rank=1, ...],
        w_out: InputTensor[dtype=DType.float32, rank=2, ...],  # [C, 4C]
        b_out: InputTensor[dtype=DType.float32, rank=1, ...],
        ctx: DeviceContext,
    ) raises:
        comptime if target != "cpu":
            raise Error("block_one_row is a CPU kernel")
        var tokens = past_k.dim_size(0) - 1  # the cached tokens; row `tokens` takes the new key and value
        var heads = past_k.dim_size(1)
        var d = past_k.dim_size(2)
        var C = x.dim_size(1)
        var F = w_fc.dim_size(0)
        var cores = band_count(bands)  # each band needs a worker of its own, or the barrier would wait for ever
        var e = eps.unsafe_ptr().load(0)
        var z_list = List[Float32](length=C, fill=0)  # ln_1(x)
        var qkv_list = List[Float32](length=3 * C, fill=0)
        var att_list = List[Float32](length=C, fill=0)  # the attention's output
        var x1_list = List[Float32](length=C, fill=0)  # the residual stream after the attention
        var z2_list = List[Float32](length=C, fill=0)  # ln_2(x1)
        var hid_list = List[Float32](length=F, fill=0)  # GELU(c_fc)
        var z = z_list.unsafe_ptr()
        var qkv = qkv_list.unsafe_ptr()
        var att = att_list.unsafe_ptr()
        var x1 = x1_list.unsafe_ptr()
        var z2 = z2_list.unsafe_ptr()
        var hid = hid_list.unsafe_ptr()
        var counter = List[Int64](length=1, fill=0)  # the barrier's count of arrivals
        var count = counter.unsafe_ptr()
        var opened = List[Int32](length=1, fill=0)  # the last phase every core has reached
        var gate = opened.unsafe_ptr()
        var asleep = List[Int32](length=1, fill=0)  # the cores asleep at the gate
        var sleepers = asleep.unsafe_ptr()
        var acores = cores if tokens >= SHORT else 1
        var largest = List[Float32](length=cores * heads, fill=0)
        var total = List[Float32](length=cores * heads, fill=0)
        var partial = List[Float32](length=cores * heads * d, fill=0)
        var m_all = largest.unsafe_ptr()
        var l_all = total.unsafe_ptr()
        var acc_all = partial.unsafe_ptr()
        var xs = x.unsafe_ptr()
        var out = y.unsafe_ptr()
        var keys = past_k.unsafe_ptr()
        var values = past_v.unsafe_ptr()
        var nk = keys + tokens * heads * d  # the new token's row of the cache
        var nv = values + tokens * heads * d
        var g1 = ln1_g.unsafe_ptr()
        var bb1 = ln1_b.unsafe_ptr()
        var g2 = ln2_g.unsafe_ptr()
        var bb2 = ln2_b.unsafe_ptr()
        var wa = w_attn.unsafe_ptr()
        var ba = b_attn.unsafe_ptr()
        var wp = w_proj.unsafe_ptr()
        var bp = b_proj.unsafe_ptr()
        var wf = w_fc.unsafe_ptr()
        var bf = b_fc.unsafe_ptr()
        var wo = w_out.unsafe_ptr()
        var bo = b_out.unsafe_ptr()

        # ANCHOR: phases
        def band(core: Int) {imm}:
            # 1. ln_1, each core its columns.
            norm_columns(z, xs, g1, bb1, e, C, C * core // cores, C * (core + 1) // cores)
            wait_all(count, gate, sleepers, 1, cores)
            # 2. c_attn and its bias, each core its rows.
            var r0 = 3 * C * core // cores
            var r1 = 3 * C * (core + 1) // cores
            dot_rows(qkv, z, wa, r0, r1, C)
            for r in range(r0, r1):
                qkv.store(r, qkv.load(r) + ba.load(r))
            wait_all(count, gate, sleepers, 2, cores)
            # 3. the new key and value into the cache's last row, in its type; the attention over a band of the tokens.
            var ks = qkv + C
            var vs = qkv + 2 * C
            var c0 = C * core // cores
            var c1 = C * (core + 1) // cores
            for i in range(c0, c1):
                nk.store(i, ks.load(i).cast[cache]())
                nv.store(i, vs.load(i).cast[cache]())
            if core < acores:
                attend_band[cache](core, acores, tokens, heads, d, qkv, keys, values, m_all, l_all, acc_all)
            wait_all(count, gate, sleepers, 3, cores)
            # 4. the bands merged, each core its heads.
            merge_heads(heads * core // cores, heads * (core + 1) // cores, acores, tokens, heads, d, m_all, l_all,
                        acc_all, att)
            wait_all(count, gate, sleepers, 4, cores)
            # 5. attn.c_proj, its bias and the residual add.
            dot_rows(x1, att, wp, c0, c1, C)
            for r in range(c0, c1):
                x1.store(r, xs.load(r) + x1.load(r) + bp.load(r))
            wait_all(count, gate, sleepers, 5, cores)
            # 6. ln_2, each core its columns.
            norm_columns(z2, x1, g2, bb2, e, C, c0, c1)
            wait_all(count, gate, sleepers, 6, cores)
            # 7. c_fc, its bias and GELU.
            var f0 = F * core // cores
            var f1 = F * (core + 1) // cores
            dot_rows(hid, z2, wf, f0, f1, C)
            for r in range(f0, f1):
                hid.store(r, gelu_tanh(hid.load(r) + bf.load(r)))
            wait_all(count, gate, sleepers, 7, cores)
            # 8. mlp.c_proj, its bias and the residual add.
            dot_rows(out, hid, wo, c0, c1, F)
            for r in range(c0, c1):
                out.store(r, x1.load(r) + out.load(r) + bo.load(r))

        sync_parallelize(band, cores)
        # ANCHOR_END: phases
        _ = z_list^
        _ = qkv_list^
        _ = att_list^
        _ = x1_list^
        _ = z2_list^
        _ = hid_list^
        _ = counter^
        _ = opened^
        _ = asleep^
        _ = largest^
        _ = total^
        _ = partial^
