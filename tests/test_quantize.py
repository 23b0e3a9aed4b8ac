"""``--quantize`` (``course.programs.quantize``): GPT-2's weights in GGUF block formats, through MAX's quantized matmul.

* Packing: ``quantize_rows`` writes GGUF's byte layout, so ``gguf``'s own reader
  gets the weights back within each format's rounding, and its row size is the
  one MAX's ``QuantizationEncoding`` expects. Relative RMS error measured on
  Gaussian rows: q4_0 0.087, q4_k 0.078, q6_k 0.019 (bounds 0.10, 0.10, 0.025);
  an all-zero row comes back as zeros; an outlier costs its own block only.
* MAX's kernel: ``QuantizedLinear`` ([2, 3, 256] in, 144 rows, padded to 160)
  against NumPy's ``x @ dequantized(W).T + b``. The one difference left is that
  MAX rounds the activations to 8 bits: the largest |Δ| measured is 0.48% (q4_0),
  0.51% (q4_k) and 0.54% (q6_k) of the largest output (bound 3%).
* The course's Mojo kernel for q6_k (``course/kernels/q6_k.mojo``, step 16's decode
  graph): one row through ``QuantizedLinear(kernel=True)`` ([1, 1, 512] in, 450 rows,
  an all-zero row, a row with one block of zeros, a group of x rounding to zero)
  against the same NumPy product: 0.58% (bound 3%); and against MAX's qmatmul, which
  rounds x the same way: 1.8e-07 of the largest output (bound 1e-5).
* The whole model, through the programs' road (``course.programs.build``): step
  15's cached model with q4_0 weights (a prefill of 8 tokens, then 32
  single-token steps) against Hugging Face's GPT-2 whose matrices and head hold
  the same rounded weights: largest |Δ| 1.8% of the largest logit (bound 3%),
  while rounding the weights moves the logits by 22.8%. A layer left unswapped
  shows: float32 c_fc gave 5.0%, a float32 head 6.0%.
* Step 16's decode graph and cache with q4_0 weights (bench's quantized road) gives
  step 15's cached logits: bound 0.5%, as the next.
* Step 13's uncached graph with q4_0 weights gives the cached model's logits:
  largest |Δ| 0.000% (bound 0.5%). Before its graph called the model's ``head``,
  ``--no-cache`` kept a float32 head: 6.7%.
  Only q4_0 runs the whole model here: the test model is 64 wide and the
  k-quants need multiples of 256; their kernels are checked above. How often the
  rounded model still picks float32's token is the bench's to measure
  (``pixi run bench --quantize …``), on GPT-2 small's sizes.
"""

from __future__ import annotations

import numpy as np
import pytest

from course.programs.generate import ONE_ROW_KERNELS
from course.programs.generate import QUANTIZE as FORMATS
from harness import solution
from reference import GEN, rounded_logits, to_max_state

pytestmark = pytest.mark.programs

RMS_BOUND = {"q4_0": 0.10, "q4_k": 0.10, "q6_k": 0.025}
UNCACHED_BOUND = 0.005  # measured 0.000%; a float32 head: 6.7% (the module docstring)


def _rows(width: int = 512) -> np.ndarray:
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((40, width)) * 0.02).astype(np.float32)
    w[1] = 0.0  # all zero
    w[2, 7] = 0.5  # one outlier
    w[3] = -np.abs(w[3])  # all negative
    w[4] = 0.01  # constant
    return w


@pytest.mark.parametrize("name", FORMATS)
def test_packing_round_trips_through_gguf(name):
    """quantize_rows writes GGUF's layout: gguf reads the weights back within the format's rounding"""
    from course.programs.quantize import FORMATS as SIZES
    from course.programs.quantize import dequantize_rows, encoding, quantize_rows

    assert tuple(SIZES) == FORMATS, f"course.programs.quantize knows {tuple(SIZES)}, --quantize offers {FORMATS}"

    w = _rows()
    packed = quantize_rows(w, name)
    enc = encoding(name)
    expected_bytes = w.shape[1] // enc.elements_per_block * enc.block_size
    assert packed.dtype == np.uint8 and packed.shape == (w.shape[0], expected_bytes), (
        f"{name}: packed {packed.shape} {packed.dtype}, MAX expects ({w.shape[0]}, {expected_bytes}) uint8")
    assert 8 * expected_bytes / w.shape[1] == SIZES[name][1]
    back = dequantize_rows(packed, name)
    plain = np.r_[0, 5:40]  # the Gaussian rows
    rms = float(np.sqrt(((back[plain] - w[plain]) ** 2).mean() / (w[plain] ** 2).mean()))
    print(f"{name}: relative RMS error {rms:.4f} (bound {RMS_BOUND[name]})")
    assert rms <= RMS_BOUND[name], f"{name}: relative RMS error {rms:.4f} > {RMS_BOUND[name]}"
    assert np.all(back[1] == 0), f"{name}: an all-zero row comes back as {back[1][:4]}…"
    block = SIZES[name][0]
    far = np.abs(back[2] - w[2])
    away = np.arange(block, w.shape[1])  # the blocks without the outlier (it is in the first)
    assert far[away].max() <= 0.25 * np.abs(w[2][away]).max(), f"{name}: an outlier spoils blocks beyond its own"
    for row, what in [(3, "all-negative"), (4, "constant")]:
        worst = float(np.abs(back[row] - w[row]).max() / np.abs(w[row]).max())
        assert worst <= 0.15, f"{name}: {what} row comes back off by {worst:.0%} of its largest value"


def _span(sub: np.ndarray) -> np.ndarray:
    """A q4_k sub-block's range along the last axis, from 0 when all its values are above it (its min is then 0)."""
    return sub.max(-1) - np.minimum(sub.min(-1), 0)


def test_q4_k_keeps_each_blocks_extremes():
    """q4_k's 6-bit scales and mins are set so that, in each block of 256, the widest sub-block of 32 gets its
    largest value back and the sub-block reaching lowest its smallest, to the rounding of its 6-bit min (half of
    dmin) and float16's of d and dmin; a sub-block that sits far above zero comes back within half a step"""
    from course.programs.quantize import dequantize_rows, quantize_rows

    w = _rows()[np.r_[0, 5:40]]  # Gaussian rows: 2 blocks of 8 sub-blocks each
    back = dequantize_rows(quantize_rows(w, "q4_k"), "q4_k")
    sub, got = w.reshape(-1, 8, 32), back.reshape(-1, 8, 32)  # every block's 8 sub-blocks
    low = np.minimum(sub.min(-1), 0)
    span = _span(sub)
    blocks = np.arange(len(sub))
    for what, pick, end in (("largest value of the widest", span.argmax(-1), np.argmax),
                            ("smallest value of the lowest-reaching", low.argmin(-1), np.argmin)):
        at = end(sub[blocks, pick], axis=-1)
        allowed = -low.min(-1) / 63 / 2 + 0.002 * span[blocks, pick]  # half of dmin, and float16's rounding
        off = float((np.abs(got[blocks, pick, at] - sub[blocks, pick, at]) / allowed).max())
        print(f"q4_k: the {what} sub-block comes back off by at most {off:.2f} of what rounding allows")
        assert off <= 1, f"q4_k: the {what} sub-block of a block comes back off by {off:.2f} times what rounding allows"
    above = (np.random.default_rng(8).standard_normal((2, 512)) * 0.02).astype(np.float32)
    above[:, 32:64] += 1.0  # one sub-block far above zero, beside Gaussian ones
    back = dequantize_rows(quantize_rows(above, "q4_k"), "q4_k")
    half_step = above[:, 32:64].max(-1, keepdims=True) / 15 / 2
    off = float((np.abs(back[:, 32:64] - above[:, 32:64]) / half_step).max())
    assert off <= 1.05, f"q4_k: a sub-block far above zero comes back off by {off:.2f} half-steps (bound 1.05)"
    # A narrow sub-block far below zero: its 6-bit min misses its lowest value by more than its own small steps, so
    # its levels must be clipped to 0..15; unclipped, they spill into the 4 bits of its neighbour in the same byte.
    rng = np.random.default_rng(9)
    below = (rng.standard_normal((64, 256)) * 0.5).astype(np.float32)
    below[:, :32] = rng.uniform(-1.2, -0.8, (64, 1)) + 0.008 * rng.standard_normal((64, 32))
    back = dequantize_rows(quantize_rows(below, "q4_k"), "q4_k")
    wide, got = below[:, 32:64], back[:, 32:64]  # the neighbour: the high 4 bits of the same bytes
    steps = (np.abs(got - wide) / (_span(wide) / 15)[:, None]).max()
    print(f"q4_k: beside a narrow sub-block far below zero, its neighbour comes back within {steps:.2f} steps (bound 1)")
    assert steps <= 1, f"q4_k: the neighbour of a narrow sub-block far below zero comes back off by {steps:.2f} steps"


def test_q6_k_keeps_each_blocks_extremes():
    """q6_k's scales are set so that each block's largest |value| comes back to float16's rounding of d (it is level
    -32 at sub-scale -128), and every sub-block of 16's largest to within 16 d (its 8-bit sub-scale off by half a step
    at level -32), with sub-blocks from the block's largest down to a 60th of it; where two sub-blocks are equally
    large and opposite in sign, the second's sub-scale (+128) is clipped to 127: within 32 d"""
    from course.programs.quantize import dequantize_rows, quantize_rows

    rng = np.random.default_rng(10)
    wide = (rng.standard_normal((8, 16, 16)) * 0.02).astype(np.float32)
    wide *= np.geomspace(1, 1 / 60, 16, dtype=np.float32)[:, None]  # sub-blocks from 1 to 1/60 of the first's size
    opposite = (rng.standard_normal((4, 16, 16)) * 0.01).astype(np.float32)
    opposite[:, 0, 3], opposite[:, 1, 5] = -0.5, 0.5  # the first sub-block's largest, and the next's, opposite
    for what, w, subscale_steps in (("Gaussian", _rows()[np.r_[0, 5:40]].reshape(-1, 16, 16), 0.5),
                                    ("wide-ranging", wide, 0.5), ("opposite-signed", opposite, 1.0)):
        back = dequantize_rows(quantize_rows(w.reshape(-1, 256), "q6_k"), "q6_k").reshape(w.shape)
        at = np.abs(w).argmax(-1)[..., None]  # each sub-block's largest |value|
        peak, got = np.take_along_axis(w, at, -1)[..., 0], np.take_along_axis(back, at, -1)[..., 0]
        top = np.abs(peak).max(-1)  # each block's largest |value|, and d = its sub-scale over -128
        d = top / 32 / 128
        rounding = 128 * 32 * np.abs(d.astype(np.float16).astype(np.float32) - d) * 1.01 + top * 2.0**-16  # float16's of d
        error = np.abs(got - peak)
        block_off = float((np.take_along_axis(error, np.abs(peak).argmax(-1)[:, None], -1)[:, 0] / rounding).max())
        sub_off = float((error / (32 * subscale_steps * d + rounding)[:, None]).max())
        print(f"q6_k, {what}: the block's largest comes back within {block_off:.2f} of float16's rounding, each "
              f"sub-block's within {sub_off:.2f} of {32 * subscale_steps:.0f} d")
        assert block_off <= 1, f"q6_k, {what} blocks: a block's largest |value| comes back off by {block_off:.1f} times float16's rounding"
        assert sub_off <= 1, f"q6_k, {what} blocks: a sub-block's largest |value| comes back off by {sub_off:.2f} times {32 * subscale_steps:.0f} d"


@pytest.mark.parametrize("name", ["q4_k", "q6_k"])
def test_blocks_of_zeros_pack_without_a_warning(name):
    """a block, or one sub-block, of zeros: its scale is 0 and nothing is divided by it (NumPy would warn of
    0 / 0 on the learner's terminal); its values come back as zeros"""
    import warnings

    from course.programs.quantize import dequantize_rows, quantize_rows

    w = (np.random.default_rng(11).standard_normal((3, 512)) * 0.02).astype(np.float32)
    w[0] = 0.0  # two whole blocks
    w[1, 32:64] = 0.0  # one sub-block of q4_k's (two of q6_k's)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = dequantize_rows(quantize_rows(w, name), name)
    assert np.all(back[0] == 0) and np.all(back[1, 32:64] == 0), f"{name}: zeros come back as {back[1, 32:36]}…"


@pytest.fixture(scope="module")
def linear_case():
    rng = np.random.default_rng(6)
    weight = (rng.standard_normal((144, 256)) * 0.05).astype(np.float32)  # 144 rows, padded to 160: q4_0's bytes a row
    bias = rng.standard_normal(144)  # float64, as NumPy makes it: QuantizedLinear keeps it as float32
    x = rng.standard_normal((2, 3, 256)).astype(np.float32)
    return weight, bias, x


@pytest.mark.parametrize("name", FORMATS)
def test_quantized_linear_matches_numpy(name, linear_case):
    """QuantizedLinear (MAX's qmatmul) gives x @ W.T + b for the weights the blocks stand for"""
    from max.driver import CPU
    from max.dtype import DType
    from max.experimental.tensor import Tensor, TensorType

    from course.programs.quantize import QuantizedLinear, dequantize_rows, quantize_rows

    weight, bias, x = linear_case
    layer = QuantizedLinear(weight, bias, name)
    run = layer.compile(TensorType(DType.float32, list(x.shape), CPU()))
    got = np.asarray(run(Tensor.from_dlpack(x)).to_numpy())
    expected = x @ dequantize_rows(quantize_rows(weight, name), name).T + bias
    assert got.shape == expected.shape, f"{name}: shape {got.shape}, expected {expected.shape} (the padding rows must go)"
    assert got.dtype == np.float32, f"{name}: QuantizedLinear gives {got.dtype}, not float32 (from a float64 bias?)"
    worst = float(np.abs(got - expected).max() / np.abs(expected).max())
    print(f"{name}: largest |Δ| = {worst:.2%} of the largest output (bound 3%)")
    assert worst <= 0.03, f"{name}: QuantizedLinear vs x @ dequantized(W).T + b: largest |Δ| is {worst:.1%} of the largest output"


def compiled_together(x: np.ndarray, *layers) -> list[np.ndarray]:
    """Each layer's output for ``x``, all from one compiled graph. MAX compiles the kernels of each new graph
    afresh, so forms of a product compared on one input cost one compile, not one each (the book's log, "What a
    graph costs MAX to compile")."""
    from max.driver import CPU
    from max.dtype import DType
    from max.experimental.nn import Module
    from max.experimental.tensor import Tensor, TensorType

    class Together(Module):
        def __init__(self):
            super().__init__()
            for index, layer in enumerate(layers):
                setattr(self, f"form{index}", layer)

        def forward(self, x):
            return [getattr(self, f"form{index}")(x) for index in range(len(layers))]

    run = Together().compile(TensorType(DType.float32, list(x.shape), CPU()))
    return [np.asarray(y.to_numpy()) for y in run(Tensor.from_dlpack(x))]


@pytest.mark.parametrize("name", ONE_ROW_KERNELS)
def test_the_mojo_kernel_matches_numpy(name, mojo_kernels):
    """QuantizedLinear with the course's Mojo kernel (one row, in a compiled graph) gives x @ W.T + b for the weights
    the blocks stand for, as MAX's qmatmul does (both round x to 8 bits), with a row that is all zero and a row
    zero in one block; 450 rows (more than a row's 420 bytes), padded to 480, split between the cores; and 11 rows,
    unpadded, which the kernel takes four at a time and the rest one by one"""
    from max.experimental.tensor import Tensor

    from course.programs.quantize import QuantizedLinear, dequantize_rows, quantize_rows
    rng = np.random.default_rng(16)
    weight = (rng.standard_normal((450, 512)) * 0.05).astype(np.float32)
    weight[3] = 0.0
    weight[5, 256:] = 0.0  # the second block of a row only
    bias = rng.standard_normal(450).astype(np.float32)
    x = rng.standard_normal((1, 1, 512)).astype(np.float32)
    x[..., 256:272] = 0.0  # a group of x that rounds to nothing
    expected = x @ dequantize_rows(quantize_rows(weight, name), name).T + bias
    # 11 rows, unpadded: on 2 cores bands of 5 and 6, each one group of four rows and the rest one at a time
    few_rows = QuantizedLinear(weight[:11], bias[:11], name, kernel=True)
    few_rows.weight, few_rows.out_dim = Tensor.from_dlpack(quantize_rows(weight[:11], name)), 11
    kernel, qmatmul, few = compiled_together(x, QuantizedLinear(weight, bias, name, True),
                                             QuantizedLinear(weight, bias, name, False), few_rows)
    assert kernel.shape == expected.shape, f"{name}: shape {kernel.shape}, expected {expected.shape}"
    worst = float(np.abs(kernel - expected).max() / np.abs(expected).max())
    apart = float(np.abs(kernel - qmatmul).max() / np.abs(expected).max())
    print(f"{name}: the kernel's largest |Δ| = {worst:.2%} of the largest output (bound 3%); from qmatmul's {apart:.2e}")
    assert worst <= 0.03, f"{name}: the Mojo kernel vs x @ dequantized(W).T + b: largest |Δ| is {worst:.1%} of the largest output"
    assert apart <= 1e-5, f"{name}: the Mojo kernel vs MAX's qmatmul: largest |Δ| is {apart:.2e} of the largest output"
    worst_few = np.abs(few - qmatmul[..., :11]).max(axis=(0, 1)) / np.abs(expected).max()
    assert worst_few.max() <= 1e-5, (f"{name}: the Mojo kernel on 11 rows vs qmatmul: rows {np.flatnonzero(worst_few > 1e-5).tolist()} "
                                     f"differ, by up to {worst_few.max():.2e} of the largest output")


def test_the_q4_0_kernel_takes_a_last_block_alone(mojo_kernels):
    """q4_0's kernel unpacks two blocks of 32 at a time; a width of 96 leaves a third, which it takes alone, both
    four rows at a time and one row at a time (45 rows: on 2 cores, bands of 22 and 23), as MAX's qmatmul does"""
    from course.programs.quantize import QuantizedLinear, dequantize_rows, quantize_rows
    rng = np.random.default_rng(96)
    weight = (rng.standard_normal((45, 96)) * 0.05).astype(np.float32)
    bias = rng.standard_normal(45).astype(np.float32)
    x = rng.standard_normal((1, 1, 96)).astype(np.float32)
    expected = x @ dequantize_rows(quantize_rows(weight, "q4_0"), "q4_0").T + bias
    kernel, qmatmul = compiled_together(x, QuantizedLinear(weight, bias, "q4_0", True),
                                        QuantizedLinear(weight, bias, "q4_0", False))
    apart = np.abs(kernel - qmatmul).max(axis=(0, 1)) / np.abs(expected).max()
    worst = float(np.abs(kernel - expected).max() / np.abs(expected).max())
    print(f"q4_0, 3 blocks a row: the kernel's largest |Δ| = {worst:.2%} of the largest output (bound 3%); from "
          f"qmatmul's {apart.max():.2e}")
    assert worst <= 0.03 and apart.max() <= 1e-5, (
        f"q4_0, 3 blocks a row: the Mojo kernel is {worst:.1%} from x @ dequantized(W).T + b (bound 3%) and up to "
        f"{apart.max():.2e} from qmatmul (bound 1e-5), at rows {np.flatnonzero(apart > 1e-5).tolist()}")


@pytest.fixture(scope="module")
def small_model():
    """A seeded small GPT-2 (Hugging Face's), and the solutions' steps to compile it with."""
    import torch
    import transformers

    from course.outline import SOLUTIONS
    from course.programs.generate import import_steps
    from reference import hf_config, seeded

    with torch.device("meta"):
        model = transformers.GPT2LMHeadModel(hf_config(**GEN))
    model = model.to_empty(device="cpu")
    model.tie_weights()  # to_empty unties lm_head; GPT-2's is wte
    seeded(model, seed=15)
    steps = import_steps("solutions", SOLUTIONS, [11, 13, 14, 15, 16])
    pretrained = steps[14].Pretrained(solution(1).GPT2Config.from_hf(model.config), to_max_state(model), None)
    return model, steps, pretrained


IDS = np.random.default_rng(7).integers(0, GEN["vocab_size"], size=40).tolist()


@pytest.fixture(scope="module")
def cached_q4_0(small_model):
    """Step 15's cached model with q4_0 weights, through the programs' road (course.programs.build)."""
    from max.driver import CPU

    from course.programs.build import compile_model
    from course.programs.quantize import logits_along

    _, steps, pretrained = small_model
    q4_0 = compile_model(steps, pretrained, CPU(), cached=True, quantize="q4_0")
    return logits_along(q4_0, IDS[:8], IDS[8:])  # a prefill of 8, then 32 single-token steps


def test_quantized_model_matches_its_rounded_weights(small_model, cached_q4_0):
    """the cached model with q4_0 weights gives Hugging Face's logits for the same rounded weights"""
    model, _, _ = small_model
    expected, exact = rounded_logits(model, "q4_0", IDS)
    expected, exact = expected[7:-1], exact[7:-1]
    scale = np.abs(expected).max()
    worst = float(np.abs(cached_q4_0 - expected).max() / scale)
    lost = float(np.abs(exact - expected).max() / scale)
    print(f"q4_0: largest |Δ| vs the rounded weights {worst:.2%} of the largest logit; rounding itself moves them {lost:.2%}")
    assert worst <= 0.03, (f"q4_0 model vs Hugging Face with the same rounded weights: largest |Δ| is {worst:.1%} "
                           f"of the largest logit (rounding the weights moves them {lost:.1%})")


#: The other roads to the q4_0 model, and what a gap on each would mean.
ROADS = {
    "no cache": (dict(cached=False), "a float32 head (step 13's graph not calling the model's head) shows as a few percent"),
    "step 16's decode graph and cache": (dict(cached=True, decode=True), "bench's quantized road"),
}


@pytest.mark.parametrize("road", list(ROADS))
def test_other_roads_give_the_cached_q4_0_logits(small_model, cached_q4_0, road):
    """q4_0 without the cache (its head quantized too) and through step 16's graphs and cache gives step 15's logits"""
    from max.driver import CPU

    from course.programs.build import compile_model
    from course.programs.quantize import logits_along

    _, steps, pretrained = small_model
    options, meaning = ROADS[road]
    other = compile_model(steps, pretrained, CPU(), quantize="q4_0", **options)
    got = logits_along(other, IDS[:8], IDS[8:])
    worst = float(np.abs(got - cached_q4_0).max() / np.abs(cached_q4_0).max())
    print(f"q4_0, {road} vs step 15's cache: largest |Δ| {worst:.3%} of the largest logit")
    assert worst <= UNCACHED_BOUND, (
        f"q4_0, {road} vs step 15's cached graph: largest |Δ| is {worst:.1%} of the largest logit ({meaning})")


def test_the_kernel_road_gives_the_cached_q4_0_logits(small_model, cached_q4_0, mojo_kernels):
    """q4_0 through bench's kernel road (step 16's graphs, MAX's qmatmul, the Mojo attention over a float16 cache)
    gives step 15's logits, but for the cache's rounding to float16"""
    from max.driver import CPU

    from course.programs.build import compile_model
    from course.programs.quantize import logits_along

    _, steps, pretrained = small_model
    kernel = compile_model(steps, pretrained, CPU(), cached=True, quantize="q4_0", decode=True, kernel=True)
    if kernel.cache_dtype.name != "float16":
        pytest.fail(f"the kernel road's cache is {kernel.cache_dtype.name}, expected float16 (as llama.cpp's)")
    got = logits_along(kernel, IDS[:8], IDS[8:])
    worst = float(np.abs(got - cached_q4_0).max() / np.abs(cached_q4_0).max())
    # Measured 1.3%: float16 moves each cached number by up to 1/2048 of itself, and this random model's attention
    # scores are large (with a float32 cache the same road gives 2e-7). Misread float16 bytes give more than 100%.
    print(f"q4_0, the kernel road vs step 15's cache: largest |Δ| {worst:.3%} of the largest logit (bound 3%)")
    assert worst <= 0.03, (f"q4_0 through the Mojo attention over a float16 cache vs step 15's cached graph: largest "
                           f"|Δ| is {worst:.2%} of the largest logit, more than float16's rounding of the cache")


def _counting_kernel(monkeypatch) -> list[str]:
    """Stands in for the Mojo kernel of every format (MAX's product, by name) and lists each call's format."""
    import course.programs.quantize as quantize

    calls = []

    def counted(x, weight, name):
        calls.append(name)
        return quantize.F.qmatmul(quantize.encoding(name), None, x, weight)

    monkeypatch.setattr(quantize, "one_row_kernel", counted)
    monkeypatch.setattr(quantize, "ONE_ROW_KERNELS", ("q4_0", "q6_k"))  # q4_0 too, for the small model's width
    return calls


def test_the_kernel_serves_single_rows_where_asked(small_model, monkeypatch):
    """QuantizedLinear takes the Mojo kernel for one row with kernel=True in a format that has one, MAX's qmatmul
    otherwise (by default, for many rows); quantize_model(kernel=True) hands it to every Linear and the head"""
    from max.experimental import functional as F
    from max.experimental.tensor import Tensor

    from course.programs.quantize import QuantizedLinear, encoding, quantize_model

    calls = _counting_kernel(monkeypatch)
    weight = np.random.default_rng(12).standard_normal((40, 256)).astype(np.float32)
    one, many, rows = (Tensor.from_dlpack(np.ones(shape, np.float32)) for shape in ((1, 1, 256), (2, 3, 256), (1, 3, 256)))
    with F.lazy():
        for options, x, expected in ((dict(kernel=True), one, ["q6_k"]), (dict(kernel=True), many, []),
                                     (dict(kernel=True), rows, []), ({}, one, []), (dict(kernel=False), one, [])):
            calls.clear()
            y = QuantizedLinear(weight, None, "q6_k", **options)(x)
            assert calls == expected and list(y.shape)[-1] == 40, (
                f"QuantizedLinear(q6_k, {options}) on {list(x.shape)}: kernel calls {calls}, expected {expected}")
        _, steps, pretrained = small_model
        config = pretrained.config
        for kernel in (True, False):
            model = steps[16].DecodeGPT2LMHeadModel(config)
            quantize_model(model, pretrained.state, "q4_0", kernel)
            layers = [module for _, module in model.descendants if isinstance(module, QuantizedLinear)]
            calls.clear()
            for layer in layers:  # one row of each one's input width (q4_0: 18 bytes a block of 32)
                width = int(layer.weight.shape[1]) // encoding("q4_0").block_size * encoding("q4_0").elements_per_block
                layer(Tensor.from_dlpack(np.ones((1, 1, width), np.float32)))
            expected = 4 * config.n_layer + 1 if kernel else 0  # c_attn, c_proj, c_fc, mlp.c_proj a block, the head
            assert model.head in layers and len(layers) == 4 * config.n_layer + 1 and len(calls) == expected, (
                f"quantize_model(kernel={kernel}): {len(layers)} quantized Linears, {len(calls)} kernel calls "
                f"on one row each (expected {expected})")


def test_the_kernel_road_hands_its_formats_the_one_row_kernel(mojo_kernels):
    """compile_model(kernel=True) with a format that has a Mojo one-row kernel (q6_k) gives every quantized Linear
    and the head that kernel; without `kernel`, none (built only: step 16's two graphs compile on their first use)"""
    import torch
    import transformers
    from max.driver import CPU

    from course.outline import SOLUTIONS
    from course.programs.build import compile_model
    from course.programs.generate import import_steps
    from course.programs.quantize import QuantizedLinear
    from reference import hf_config, seeded

    assert "q6_k" in ONE_ROW_KERNELS, ONE_ROW_KERNELS  # (the check below picks a format that has one)
    with torch.device("meta"):
        model = transformers.GPT2LMHeadModel(hf_config(**(GEN | {"n_embd": 256, "n_layer": 1})))
    model = seeded(model.to_empty(device="cpu"), seed=16)
    model.tie_weights()
    steps = import_steps("solutions", SOLUTIONS, [11, 13, 14, 15, 16])
    for kernel in (True, False):
        pretrained = steps[14].Pretrained(solution(1).GPT2Config.from_hf(model.config), to_max_state(model), None)
        runner = compile_model(steps, pretrained, CPU(), cached=True, quantize="q6_k", decode=True, kernel=kernel,
                               prefill_from=GEN["n_positions"])  # no prompt that short: its prefill graph waits
        layers = [module for _, module in runner.model.descendants if isinstance(module, QuantizedLinear)]
        assert len(layers) == 5 and runner.model.head in layers, len(layers)  # c_attn, c_proj, c_fc, c_proj, the head
        assert [layer.kernel for layer in layers] == [kernel] * 5, (kernel, [layer.kernel for layer in layers])


#: A model the k-quants can block (widths of 256), two blocks, and a vocabulary that is no multiple of 32: the
#: head's rows are padded to 352 and the fused op computes the first 333.
K_QUANTS = GEN | {"n_embd": 256, "n_layer": 2, "vocab_size": 333}


@pytest.mark.parametrize("name", ONE_ROW_KERNELS)
def test_the_fused_kernel_road_gives_the_rounded_models_logits(name, mojo_kernels, monkeypatch):
    """q4_k and q6_k through bench's kernel road: a block's decode step is four fused ops (ln_1 and c_attn, c_proj and
    the residual, ln_2 and c_fc and GELU, c_proj and the residual) in the format, then ln_f and the head; and the
    logits are Hugging Face's with the same rounded weights, but for the float16 cache and x's 8 bits, with its
    greedy token wherever its top two are further apart than that"""
    import torch
    import transformers
    from max.driver import CPU

    from course.outline import SOLUTIONS
    from course.programs.build import compile_model
    from course.programs.generate import import_steps
    from course.programs.quantize import logits_along
    from reference import hf_config, seeded

    with torch.device("meta"):
        model = transformers.GPT2LMHeadModel(hf_config(**K_QUANTS))
    model = seeded(model.to_empty(device="cpu"), seed=17)
    model.tie_weights()
    steps = import_steps("solutions", SOLUTIONS, [11, 13, 14, 15, 16])
    step = steps[16]
    calls = []

    def recording(op, kernel, linear_at):
        def record(*args, **kwargs):
            calls.append((op, kwargs.get("gelu", False), kwargs["format"] if linear_at is None else decoding.format_of(args[linear_at])))
            return kernel(*args, **kwargs)
        return record

    from course import decoding  # step 16's given kernel model, whose decode calls these

    monkeypatch.setattr(decoding, "norm_one_row_kernel", recording("norm", decoding.norm_one_row_kernel, None))
    monkeypatch.setattr(decoding, "one_row_add_kernel", recording("add", decoding.one_row_add_kernel, 1))
    pretrained = steps[14].Pretrained(solution(1).GPT2Config.from_hf(model.config), to_max_state(model), None)
    runner = compile_model(steps, pretrained, CPU(), cached=True, quantize=name, decode=True, kernel=True)
    got = logits_along(runner, IDS[:8], IDS[8:32])  # a prefill of 8, then 24 decode steps
    block = [("norm", False, name), ("add", False, name), ("norm", True, name), ("add", False, name)]
    assert calls == block * K_QUANTS["n_layer"] + [("norm", False, name)], (
        f"{name}: building the decode graph called {calls or 'no fused op'} (op, gelu, format); expected for each "
        f"of the {K_QUANTS['n_layer']} blocks {block}, then ln_f and the head")
    expected = rounded_logits(model, name, IDS[:32])[0][7:-1]
    worst = float(np.abs(got - expected).max() / np.abs(expected).max())
    # Measured 1.86% (q4_k) and 2.07% (q6_k): x rounded to 8 bits, as MAX's qmatmul does (q4_0's cached road, float32
    # cache, gives 1.8%), and the cache's float16. A group read with its neighbour's scale gave 67%.
    print(f"{name}: the fused kernel road vs Hugging Face with the rounded weights: largest |Δ| {worst:.2%} of the "
          f"largest logit (bound 3%)")
    assert worst <= 0.03, (f"{name}: the fused kernel road vs Hugging Face with the same rounded weights: largest "
                           f"|Δ| is {worst:.1%} of the largest logit")
    top_two = np.sort(expected, axis=-1)[:, -2:]
    clear = (top_two[:, 1] - top_two[:, 0]) > 2 * worst * np.abs(expected).max()
    differ = np.flatnonzero(clear & (got.argmax(-1) != expected.argmax(-1)))
    assert clear.sum() >= len(clear) // 2 and not differ.size, (
        f"{name}: the fused kernel road picks another token than Hugging Face's at steps {differ.tolist()} "
        f"({clear.sum()} of {len(clear)} steps have a clear winner)")


def test_refusals_name_the_reason():
    """a width the format cannot block, a GPU, an unknown format: a ValueError that says so"""
    from course.programs.quantize import check

    config = solution(1).GPT2Config(**{k: v for k, v in GEN.items()})

    class Device:
        def __init__(self, label):
            self.label = label

    with pytest.raises(ValueError, match=r"multiples of 256; n_embd is 64 \(q4_0 needs a multiple of 32\)"):
        check("q4_k", config, Device("cpu"))
    with pytest.raises(ValueError, match="CPU only"):
        check("q4_0", config, Device("gpu"))
    with pytest.raises(ValueError, match="must be one of q4_0, q4_k, q6_k"):
        check("q8_0", config, Device("cpu"))
    check("q4_0", config, Device("cpu"))  # 64 and 256 are multiples of 32
    check("q4_0", config, object())  # a device without a label (a stand-in) counts as the CPU
    odd = solution(1).GPT2Config(**(GEN | {"n_embd": 48, "n_head": 4}))  # 48 wide; the MLP 192
    with pytest.raises(ValueError, match=r"--quantize q4_0 needs widths that are multiples of 32; n_embd is 48$"):
        check("q4_0", odd, Device("cpu"))  # q4_0's own refusal gives no hint about q4_0
    inner = solution(1).GPT2Config(**(GEN | {"n_embd": 256, "n_head": 4, "n_inner": 800}))
    with pytest.raises(ValueError, match=r"multiples of 256; the MLP's inner width is 800 \(q4_0 needs"):
        check("q6_k", inner, Device("cpu"))


def test_the_mojo_kernel_is_refused_where_it_does_not_serve(small_model):
    """compile_model's kernel=True without step 16's decode graph, or on a GPU: a ValueError naming it"""
    from course.programs.build import compile_model

    _, steps, pretrained = small_model

    class Device:
        def __init__(self, label):
            self.label = label

    for options, device, said in [(dict(quantize="q4_0", decode=False), "cpu", r"decode=False on cpu"),
                                  (dict(decode=False), "cpu", r"decode=False on cpu"),
                                  (dict(decode=True), "gpu", r"decode=True on gpu")]:
        with pytest.raises(ValueError, match=rf"the Mojo kernels serve step 16's decode graph on the CPU, not {said}"):
            compile_model(steps, pretrained, Device(device), cached=True, kernel=True, **options)


# --- bench's accuracy columns: the held-out windows and the scores (course.programs.quantize) ------------


class _Characters:
    """A tokenizer with one token a character (its code point), so that windows are easy to count."""

    @staticmethod
    def encode(text: str) -> list[int]:
        return [ord(c) for c in text]


def test_held_out_windows_cover_the_tokens_asked_for(tmp_path):
    """held_out: windows of at most min(n_positions, 256) tokens, each predicting all but its first, together
    exactly `tokens` predictions, spread evenly over the checkpoint's own heldout.txt"""
    from course.programs.quantize import held_out

    text = "".join(chr(256 + i) for i in range(2000))  # every character a different token
    (tmp_path / "heldout.txt").write_text(text, encoding="utf-8")
    ids = _Characters.encode(text)
    cases = [(64, 200), (1024, 600), (64, 63), (1024, 5), (8, 0)] + [(8, tokens) for tokens in range(1, 30)]
    for n_positions, tokens in cases:
        windows = held_out(tmp_path, _Characters, n_positions, tokens)
        length = min(n_positions, 256)
        predicted = sum(len(w) - 1 for w in windows)
        assert predicted == tokens, f"n_positions {n_positions}, {tokens} tokens: the windows predict {predicted}"
        fewest = -(-tokens // (length - 1))  # each window predicts all but its first token
        assert len(windows) == fewest, f"{tokens} tokens in windows of {length}: {len(windows)} windows, not {fewest}"
        if not windows:
            continue  # nothing asked for
        assert all(2 <= len(w) <= length for w in windows), [len(w) for w in windows]
        starts = [ids.index(w[0]) for w in windows]
        assert all(ids[s:s + len(w)] == w and s % length == 0 for s, w in zip(starts, windows)), starts
        assert starts == sorted(set(starts)) and starts[0] == 0, f"windows not in order from the start: {starts}"
        if len(windows) > 2:  # spread: the last window starts past the middle of the text
            assert starts[-1] > len(ids) // 2, f"windows bunched at the start: {starts}"


def test_held_out_takes_all_of_a_short_text(tmp_path):
    """asked for more than heldout.txt holds, held_out gives all of it: windows one after another to its end, none
    with fewer than two tokens (a lone last token is predicted by nothing and predicts nothing)"""
    from course.programs.quantize import held_out

    for size in (49, 50):  # 6 windows of 8 and a lone token; 6 windows of 8 and one of 2
        text = "".join(chr(256 + i) for i in range(size))
        (tmp_path / "heldout.txt").write_text(text, encoding="utf-8")
        windows = held_out(tmp_path, _Characters, 8, 1000)
        ids = _Characters.encode(text)
        assert all(2 <= len(w) <= 8 for w in windows), f"{size} tokens: windows of {[len(w) for w in windows]}"
        assert sum(windows, []) == ids[: len(sum(windows, []))] and len(sum(windows, [])) >= size - 1, (
            f"{size} tokens: the windows hold {len(sum(windows, []))} of them, not one after another to the end")


def test_held_out_falls_back_to_the_course_models_text(tmp_path):
    """a checkpoint without heldout.txt is scored on the course model's held-out text"""
    from course.outline import COURSE_MODEL
    from course.programs.quantize import held_out

    windows = held_out(tmp_path, _Characters, 1024, 300)
    expected = _Characters.encode((COURSE_MODEL / "heldout.txt").read_text(encoding="utf-8"))
    assert windows[0] == expected[: len(windows[0])], "the first window is not the course model's held-out text"


def test_compare_scores_agreement_error_and_perplexity():
    """compare: top-1 agreement, the largest |Δ logit|, float32's spread and both perplexities, by hand on
    two models whose logits are known"""
    from course.programs.quantize import compare, log_probs

    table = np.random.default_rng(3).standard_normal((10, 7)).astype(np.float32)
    reference = lambda ids: table[len(ids)]  # noqa: E731
    nudged = table.copy()
    nudged[2] = nudged[2] - 4.0 * (nudged[2] == nudged[2].max())  # step 2's top token drops: top-1 differs there
    nudged[5] += 0.25  # a shift leaves softmax (and the top token) unchanged, but not the logits
    quantized = lambda ids: nudged[len(ids)]  # noqa: E731
    windows = [[0, 1, 2, 3, 4], [6, 5, 4]]  # predicts 4 + 2 tokens, after prefixes of lengths 1-4 and 1-2
    got = compare(reference, quantized, windows)
    steps = [(1, 1), (2, 2), (3, 3), (4, 4), (1, 5), (2, 4)]  # (prefix length, the token it predicts)
    by_hand = lambda logits, t: np.log(np.exp(logits.astype(np.float64)).sum()) - logits[t]  # noqa: E731
    nll = [by_hand(table[n], t) for n, t in steps]
    nll_q = [by_hand(nudged[n], t) for n, t in steps]
    assert got["steps"] == 6 and got["top1"] == pytest.approx(4 / 6), got  # prefix length 2 twice: both differ
    assert got["max_abs_err"] == pytest.approx(4.0), got
    assert got["logit_std"] == pytest.approx(np.mean([table[n].std() for n, _ in steps]), rel=1e-6), got
    assert got["perplexity_fp32"] == pytest.approx(np.exp(np.mean(nll))), got
    assert got["perplexity"] == pytest.approx(np.exp(np.mean(nll_q))), got
    shifted = compare(reference, lambda ids: table[len(ids)] + 0.25, windows)  # every logit up by a quarter
    assert shifted["max_abs_err"] == pytest.approx(0.25) and shifted["top1"] == 1, shifted
    assert np.allclose(log_probs(np.zeros(4, np.float32)), np.log(0.25)), log_probs(np.zeros(4, np.float32))
    big = np.array([1000.0, 0.0], dtype=np.float32)
    assert np.allclose(log_probs(big), [0.0, -1000.0]), f"log_probs is not stable for large logits: {log_probs(big)}"
    assert log_probs(big).dtype == np.float64
