# The block op's barrier (course/kernels/block.mojo's wait_all) against the one it replaced, spin-and-yield, alone:
# 20,000 phases on every band MAX gives, one band working 200 us longer every 1,000th phase. Run it quiet and
# beside busy processes (`python3 -c "while True: pass" &`, one a core):
#
#     mojo run -I course course/authoring/barriers.mojo
#
# The log (book/src/log.md, 2026-12-02) holds what it printed on the course's 2-core machine.

from max.algorithm import sync_parallelize
from std.atomic import Atomic
from std.ffi import external_call
from std.time import perf_counter_ns

from kernels.block import wait_all
from kernels.one_row import band_count

comptime PHASES = 20_000


@always_inline
def spin_and_yield(count: UnsafePointer[mut=True, Int64, _], phase: Int, cores: Int):
    """The first barrier: spin on the count, and after 20,000 spins yield the core between looks."""
    _ = Atomic[Int64].fetch_add(count, Int64(1))
    var spins = 0
    while Atomic[Int64].load(count) < Int64(phase * cores):
        spins += 1
        if spins > 20000:
            _ = external_call["sched_yield", Int32]()


@always_inline
def work(core: Int, phase: Int):
    if core == 0 and phase % 1000 == 0:  # one band 200 us behind, now and then
        var start = perf_counter_ns()
        while perf_counter_ns() - start < 200_000:
            pass


def main() raises:
    var cores = band_count(1 << 20)
    for round in range(3):
        var counter = List[Int64](length=1, fill=0)
        var opened = List[Int32](length=1, fill=0)
        var asleep = List[Int32](length=1, fill=0)
        var count = counter.unsafe_ptr()
        var gate = opened.unsafe_ptr()
        var sleepers = asleep.unsafe_ptr()
        var started = perf_counter_ns()

        def sleeping(core: Int) {imm}:
            for phase in range(1, PHASES + 1):
                work(core, phase)
                wait_all(count, gate, sleepers, phase, cores)

        sync_parallelize(sleeping, cores)
        var slept = (perf_counter_ns() - started) // 1000
        var before = List[Int64](length=1, fill=0)
        var old = before.unsafe_ptr()
        started = perf_counter_ns()

        def yielding(core: Int) {imm}:
            for phase in range(1, PHASES + 1):
                work(core, phase)
                spin_and_yield(old, phase, cores)

        sync_parallelize(yielding, cores)
        var yielded = (perf_counter_ns() - started) // 1000
        print("round", round + 1, "|", cores, "bands |", PHASES, "barriers: spin, then sleep", slept,
              "us | spin and yield", yielded, "us")
        _ = counter^
        _ = opened^
        _ = asleep^
        _ = before^
