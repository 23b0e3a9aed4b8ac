"""Quantized weights: ``--quantize q4_0 | q4_k | q6_k`` for ``main``, ``gpt2`` and ``bench``.

A decode step reads every weight of the model once to produce one token, so on a
CPU its time goes into reading memory: GPT-2 small's 124M float32 weights are
0.5 GB per token. GGUF's block formats (llama.cpp's) store each row of a weight
matrix in small blocks that share a scale, a few bits per weight:

    q4_0   blocks of 32: one fp16 scale, 32 4-bit values           4.5 bits a weight
    q4_k   blocks of 256: fp16 scale and min, 8 6-bit sub-scales
           and sub-mins, 256 4-bit values                           4.5 bits a weight
    q6_k   blocks of 256: fp16 scale, 16 int8 sub-scales,
           256 6-bit values                                       6.56 bits a weight

MAX multiplies by such a matrix directly (``F.qmatmul``, CPU kernels): it
quantizes the activations to 8 bits, multiplies in integers, and returns
float32. The block runs along a row's input width, so q4_0 needs widths that
are multiples of 32 and q4_k / q6_k multiples of 256 (GPT-2's 768 and 3072
are; gpt2-xl's 1600 is not).

What is quantized: every ``Linear`` of the blocks (c_attn, c_proj, c_fc) and the
head (step 11's ``head``, the tied ``wte`` read as an output matrix). The
embedding lookups, layer norms and biases stay float32.

``gguf`` (llama.cpp's Python package) writes q4_0 and reads all three formats;
it has no NumPy quantizer for the k-quants, so :func:`quantize_rows` packs those
itself (round to nearest, without llama.cpp's search for the best scales), and
the tests unpack them with ``gguf`` to check the bytes.

With ``kernel`` (step 16's decode graph, on the CPU), a single row times a quantized
matrix goes instead through the course's own Mojo kernels (``course/kernels/q4_0.mojo``,
``q4_k.mojo`` and ``q6_k.mojo``), which round the row to 8 bits as MAX does and multiply
bytes by bytes (AVX-512's byte products); step 16's ``KernelGPT2LMHeadModel`` calls them
inside its fused ops (``course/kernels/layer.mojo``), with each layer norm, bias, GELU and
residual add.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from max.experimental import functional as F
from max.experimental.nn import Linear, Module
from max.experimental.tensor import Tensor
from max.graph.quantization import QuantizationEncoding

from course.programs.generate import ONE_ROW_KERNELS

#: The encodings, with their block width (elements) and bits per weight.
FORMATS = {"q4_0": (32, 4.5), "q4_k": (256, 4.5), "q6_k": (256, 6.5625)}
ROWS = 32  # MAX's q4_0 kernel needs a multiple of 32 rows; the vocabulary is padded to one


def encoding(name: str) -> QuantizationEncoding:
    return {"q4_0": QuantizationEncoding.Q4_0, "q4_k": QuantizationEncoding.Q4_K, "q6_k": QuantizationEncoding.Q6_K}[name]


def gguf_type(name: str):
    from gguf import GGMLQuantizationType

    return getattr(GGMLQuantizationType, name.upper())


# --- packing (NumPy) -----------------------------------------------------------------------


def quantize_rows(w: np.ndarray, name: str) -> np.ndarray:
    """``w`` [rows, width] float32 -> [rows, width / block * bytes per block] uint8, in GGUF's layout."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    if name == "q4_0":
        from gguf import quants

        return quants.quantize(w, gguf_type(name))
    blocks = w.reshape(-1, 256)
    packed = _q6_k(blocks) if name == "q6_k" else _q4_k(blocks)
    return packed.reshape(w.shape[0], -1)


def dequantize_rows(q: np.ndarray, name: str) -> np.ndarray:
    """The float32 values that ``q`` stands for (``gguf``'s reader)."""
    from gguf import quants

    return quants.dequantize(q, gguf_type(name))


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a / b, with 0 where b is 0."""
    out = np.zeros(np.broadcast(a, b).shape, dtype=np.float32)
    np.divide(a, b, out=out, where=b != 0)
    return out


def _q6_k(x: np.ndarray) -> np.ndarray:
    """Blocks of 256: ql[128] (low 4 bits), qh[64] (high 2 bits), 16 int8 scales, fp16 d."""
    n = x.shape[0]
    sub = x.reshape(n, 16, 16)
    peak = np.take_along_axis(sub, np.abs(sub).argmax(-1)[..., None], -1)[..., 0]
    scale = peak / -32.0  # the largest value of each 16 maps to -32
    top = np.take_along_axis(scale, np.abs(scale).argmax(-1)[..., None], -1)
    d = (top / -128.0).astype(np.float16)  # and the largest scale to -128
    sc = np.clip(np.round(_ratio(scale, d.astype(np.float32))), -128, 127).astype(np.int8)
    q = np.round(_ratio(sub, (d.astype(np.float32) * sc)[..., None]))
    q = (np.clip(q, -32, 31) + 32).astype(np.uint8).reshape(n, 2, 128)
    low, high = q & 0x0F, q >> 4
    ql = (low[:, :, :64] | (low[:, :, 64:] << 4)).reshape(n, 128)
    high = high.reshape(n, 2, 4, 32)
    qh = (high[:, :, 0] | (high[:, :, 1] << 2) | (high[:, :, 2] << 4) | (high[:, :, 3] << 6)).reshape(n, 64)
    return np.concatenate([ql, qh, sc.view(np.uint8), d.view(np.uint8).reshape(n, 2)], axis=1)


def _q4_k(x: np.ndarray) -> np.ndarray:
    """Blocks of 256: fp16 d and dmin, 12 bytes of 6-bit scales and mins (8 each), qs[128]."""
    n = x.shape[0]
    sub = x.reshape(n, 8, 32)
    low = np.minimum(sub.min(-1), 0)
    scale, mins = (sub.max(-1) - low) / 15, -low  # value = scale * q - min, q in 0..15
    d = (scale.max(-1, keepdims=True) / 63).astype(np.float16)
    dmin = (mins.max(-1, keepdims=True) / 63).astype(np.float16)
    sc = np.clip(np.round(_ratio(scale, d.astype(np.float32))), 0, 63).astype(np.uint8)
    mn = np.clip(np.round(_ratio(mins, dmin.astype(np.float32))), 0, 63).astype(np.uint8)
    step, offset = (d.astype(np.float32) * sc)[..., None], (dmin.astype(np.float32) * mn)[..., None]
    q = np.clip(np.round(_ratio(sub + offset, step)), 0, 15).astype(np.uint8).reshape(n, 4, 64)
    qs = (q[:, :, :32] | (q[:, :, 32:] << 4)).reshape(n, 128)
    scales = np.concatenate(
        [sc[:, :4] | ((sc[:, 4:] & 0x30) << 2), mn[:, :4] | ((mn[:, 4:] & 0x30) << 2), (sc[:, 4:] & 0x0F) | ((mn[:, 4:] & 0x0F) << 4)],
        axis=1,
    )
    return np.concatenate([d.view(np.uint8).reshape(n, 2), dmin.view(np.uint8).reshape(n, 2), scales, qs], axis=1)


# --- the model (MAX) ---------------------------------------------------------------------------


def check(name: str, config, device) -> None:
    """A ValueError saying why ``name`` cannot run this model here (None if it can)."""
    if name not in FORMATS:
        raise ValueError(f"--quantize must be one of {', '.join(FORMATS)}, got {name!r}")
    block = FORMATS[name][0]
    widths = {"n_embd": config.n_embd, "the MLP's inner width": config.inner_dim}
    for what, width in widths.items():
        if width % block:
            hint = " (q4_0 needs a multiple of 32)" if block == 256 else ""
            raise ValueError(f"--quantize {name} needs widths that are multiples of {block}; {what} is {width}{hint}")
    if getattr(device, "label", "cpu") != "cpu":
        raise ValueError(f"--quantize {name}: MAX 26.7's q4_0 / q4_k / q6_k matmul kernels run on the CPU only; use --device cpu")


# ANCHOR: qlinear
class QuantizedLinear(Module):
    """``x @ W.T + b`` with W stored in a GGUF block format (rows padded to a multiple of 32)."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None, name: str, kernel: bool = False):
        self.out_dim, self.name, self.kernel = weight.shape[0], name, kernel and name in ONE_ROW_KERNELS
        padded = np.zeros((-(-weight.shape[0] // ROWS) * ROWS, weight.shape[1]), np.float32)
        padded[: weight.shape[0]] = weight
        self.weight = Tensor.from_dlpack(quantize_rows(padded, name))  # uint8 blocks
        self.bias = None if bias is None else Tensor.from_dlpack(np.ascontiguousarray(bias, np.float32))

    def forward(self, x: Tensor) -> Tensor:
        if self.kernel and all(size == 1 for size in x.shape[:-1]):  # one row: the course's Mojo kernel
            y = one_row_kernel(x, self.weight, self.name)
        else:
            y = F.qmatmul(encoding(self.name), None, x, self.weight)  # float32 out
        if self.weight.shape[0] != self.out_dim:
            y = y[..., : self.out_dim]  # drop the padding rows
        return y if self.bias is None else y + self.bias


# ANCHOR_END: qlinear


def one_row_kernel(x: Tensor, weight: Tensor, name: str) -> Tensor:
    """x (one row) times the rows of ``weight`` (``name``'s blocks) by the course's Mojo kernel ``one_row_<name>``."""
    from max.dtype import DType
    from max.graph import DeviceRef, TensorType

    from course.runtime import kernels, usable_cpus

    rows, width = weight.shape[0], x.shape[-1]
    device = DeviceRef.from_device(weight.device)
    (y,) = F.custom(f"one_row_{name}", device, [x.reshape([1, width]), weight],
                    [TensorType(DType.float32, [1, rows], device)], parameters={"bands": usable_cpus()},
                    custom_extensions=kernels())
    return y.reshape([*x.shape[:-1], rows])


def quantize_model(model, state: dict[str, np.ndarray], name: str, kernel: bool) -> dict[str, Tensor]:
    """Swaps every ``Linear`` in ``model`` and its ``head`` for quantized ones built from ``state``.

    ``state`` holds the checkpoint's float32 weights in MAX's layout and names (step
    14's ``convert``); the head is the tied ``transformer.wte.weight``. Returns the
    new modules' parameters by name, for ``load_state_dict`` to take as they are.
    ``kernel``: their single rows by the course's Mojo kernel, where ``name`` has one (:data:`ONE_ROW_KERNELS`).
    """
    swapped = {}
    # ANCHOR: swap
    for path, module in model.descendants:  # the blocks' Linears (GPT-2's root holds none)
        for attr, child in list(module.children):
            if isinstance(child, Linear):
                full = f"{path}.{attr}"
                quantized = QuantizedLinear(state[f"{full}.weight"], state.get(f"{full}.bias"), name, kernel)
                setattr(module, attr, quantized)
                swapped |= {f"{full}.{key}": value for key, value in quantized.parameters}
    # The head (step 11) reads wte as an output matrix; the embedding lookup keeps it in float32.
    model.head = QuantizedLinear(state["transformer.wte.weight"], None, name, kernel)
    # ANCHOR_END: swap
    return swapped | {f"head.{key}": value for key, value in model.head.parameters}


def held_out(folder, tokenizer, n_positions: int, tokens: int) -> list[list[int]]:
    """Windows of held-out text to score, together predicting ``tokens`` tokens.

    The text is the checkpoint's own ``heldout.txt`` where it has one (the course's
    model does: the tenth of each chapter it never trained on), else the course
    model's. Windows are at most 256 tokens (the course model's context), so that
    every model is scored on the same windows, and are taken evenly from the whole
    text, so that a few hundred tokens sample every chapter's held-out tenth.
    """
    from course.outline import COURSE_MODEL

    own = Path(folder) / "heldout.txt"
    text = (own if own.is_file() else COURSE_MODEL / "heldout.txt").read_text(encoding="utf-8")
    ids, length = tokenizer.encode(text), min(n_positions, 256)
    windows = [ids[i : i + length] for i in range(0, len(ids) - 1, length)]
    wanted = min(len(windows), -(-tokens // (length - 1)))  # the fewest windows: each predicts all but its first
    windows = [windows[round(i * len(windows) / wanted)] for i in range(wanted)]  # spread over every chapter
    out, left = [], tokens
    for window in windows:
        out.append(window[: left + 1])
        left -= len(out[-1]) - 1
    return out


def log_probs(logits: np.ndarray) -> np.ndarray:
    """log softmax in float64."""
    z = logits.astype(np.float64) - logits.max()
    return z - np.log(np.exp(z).sum())


def compare(reference, quantized, windows: list[list[int]]) -> dict:
    """Scores every next token of ``windows`` with both ``next_logits``: top-1 agreement, the largest
    logit error, the spread of float32's logits, and each model's perplexity on the text."""
    same, worst, spread, nll, nll_q = [], 0.0, [], [], []
    for window in windows:
        for i in range(1, len(window)):
            r, q = np.asarray(reference(window[:i])), np.asarray(quantized(window[:i]))
            same.append(r.argmax() == q.argmax())
            worst = max(worst, float(np.abs(r - q).max()))
            spread.append(float(r.std()))
            nll.append(-log_probs(r)[window[i]])
            nll_q.append(-log_probs(q)[window[i]])
    return {"top1": float(np.mean(same)), "steps": len(same), "max_abs_err": worst, "logit_std": float(np.mean(spread)),
            "perplexity_fp32": float(np.exp(np.mean(nll))), "perplexity": float(np.exp(np.mean(nll_q)))}


def logits_along(next_logits, prompt: list[int], tokens: list[int]) -> np.ndarray:
    """The logits before each of ``tokens`` (teacher-forced after ``prompt``): [len(tokens), vocab]."""
    return np.stack([next_logits(prompt + tokens[:i]) for i in range(len(tokens))])
