"""A one-op repro for chapter 16: one row times a weight matrix, four ways, each compiled alone.

    python -m course.authoring.one_row                 # the head, [50257, 768]
    python -m course.authoring.one_row --rows 3072     # c_fc's shape

Each formulation is its own compiled MAX graph (``Module.compile``) with the weight as
a constant of the model; the time is the median of ``--calls`` calls after five
warm-up calls, and GB/s is the weight's bytes over that time. NumPy's ``x @ W.T`` and
a NumPy sum over the same bytes give the machine's own reference. A weight that fits
in the processor's cache (c_fc's 9.4 MB may) reads faster than memory allows: use the
head for the memory figure.

A first run compiles four graphs (30-60 s each on 2 cores; the Mojo kernel's about 15 s); later runs load them.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

FORMS = {
    "x @ Wᵀ (step 15's Linear)": lambda F, x, w: x @ w.T,
    "W @ xᵀ (step 16's one_row)": lambda F, x, w: (w @ x.reshape([w.shape[1], 1])).reshape([1, w.shape[0]]),
    "(W * x).sum(-1) (fused)": lambda F, x, w: F.sum(w * x, axis=-1).reshape([1, w.shape[0]]),
    "Mojo kernel (one_row_kernel)": lambda F, x, w: _kernel()(x, w),
}


def _kernel():
    """Step 16's given one_row_kernel (``course/decoding.py``), which calls the course's Mojo kernel."""
    from course.decoding import one_row_kernel

    return one_row_kernel


def timed(fn, calls: int) -> float:
    """The median seconds of ``calls`` calls of ``fn`` after five warm-up calls."""
    for _ in range(5):
        fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.authoring.one_row", description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=50257, help="the weight's rows (out); 50257 is GPT-2's head")
    parser.add_argument("--width", type=int, default=768, help="the weight's width (in)")
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args(argv)

    from course import runtime

    runtime.setup()
    from max.driver import CPU
    from max.dtype import DType
    from max.experimental import functional as F
    from max.experimental.nn import Module
    from max.experimental.tensor import Tensor, TensorType

    rng = np.random.default_rng(0)
    w = rng.standard_normal((args.rows, args.width)).astype(np.float32)
    x = rng.standard_normal((1, args.width)).astype(np.float32)
    gb = w.nbytes / 1e9
    expected = x @ w.T
    print(f"one row [1, {args.width}] times a weight [{args.rows}, {args.width}] ({w.nbytes / 1e6:.0f} MB), "
          f"median of {args.calls} calls")
    print(f"{'':30} {'ms':>8} {'GB/s':>6} {'compile s':>10} {'max |Δ| vs NumPy':>17}")
    seconds = timed(lambda: x @ w.T, args.calls)
    print(f"{'NumPy x @ W.T':30} {1000 * seconds:8.3f} {gb / seconds:6.1f}")
    seconds = timed(lambda: w.sum(), args.calls)
    print(f"{'NumPy W.sum() (one thread)':30} {1000 * seconds:8.3f} {gb / seconds:6.1f}")
    for name, form in FORMS.items():

        class OneRow(Module):
            def __init__(self):
                self.weight = Tensor.from_dlpack(w)

            def forward(self, row):
                return form(F, row, self.weight)

        started = time.perf_counter()
        run = OneRow().compile(TensorType(DType.float32, [1, args.width], CPU()))
        compile_s = time.perf_counter() - started
        row = Tensor.from_dlpack(x)
        seconds = timed(lambda: run(row).to_numpy(), args.calls)  # to_numpy: the result is there
        delta = float(np.abs(runtime.to_numpy(run(row)) - expected).max())
        print(f"{name:30} {1000 * seconds:8.3f} {gb / seconds:6.1f} {compile_s:10.1f} {delta:17.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
