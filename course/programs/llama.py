"""llama.cpp as a peer in ``bench``: the same checkpoint as GGUF, timed with ``llama-cpp-python``.

    pip install -e ".[llama]"        # or: pixi run -e llama bench   (builds llama.cpp, ~10 min)

The checkpoint folder (Hugging Face's GPT-2 layout) is written as a float32 GGUF file
with the ``gguf`` package, as llama.cpp's own ``convert_hf_to_gguf.py`` writes GPT-2:
the ``Conv1D`` weights transposed to ``[out, in]``, ``wte`` as ``token_embd`` (llama.cpp
reads it again as the output matrix, the tied head), GPT-2's BPE vocabulary and merges.
Each quantized file is made from it by llama.cpp's own quantizer
(``llama_model_quantize``) with ``pure`` set, so that every matrix, the head included,
is in the one format, as in the course's ``--quantize`` (without ``pure``, llama.cpp
keeps some matrices at higher precision: that is its Q4_K_M, not Q4_K).

Timing matches the course's paths: the prompt's token ids go in as they are (no text,
no BOS), greedy (temperature 0), one warm-up generation first, the prefill is the time
to the first new token, decode tok/s counts the rest. The KV cache is in the type of
the course path it is compared with (``bench.llama_cache``): float32 for the f32 file, as
the course's float32 paths keep theirs, float16 (llama.cpp's default) for the quantized
formats, as the course's kernel paths.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

#: The course's --quantize formats and llama.cpp's file types for them (``pure``: every tensor in it).
FILE_TYPES = {"f32": "LLAMA_FTYPE_ALL_F32", "q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0", "q4_k": "LLAMA_FTYPE_MOSTLY_Q4_K_M",
              "q6_k": "LLAMA_FTYPE_MOSTLY_Q6_K"}
INSTALL = 'pip install -e ".[llama]" (or pixi run -e llama bench): llama-cpp-python builds llama.cpp in about 10 minutes'


def version() -> str | None:
    """llama-cpp-python's version, or None when it is not installed."""
    try:
        import llama_cpp
    except ImportError:
        return None
    return llama_cpp.__version__


def threads() -> int:
    """The thread count every engine in bench uses: the CPUs this process may use (runtime.usable_cpus)."""
    from course.runtime import usable_cpus

    return usable_cpus()


def write_f32(folder: Path, out: Path) -> Path:
    """The checkpoint in ``folder`` as a float32 GGUF file (llama.cpp's ``gpt2`` architecture)."""
    import gguf
    from safetensors.numpy import load_file

    config = json.loads((folder / "config.json").read_text())
    state = {key.removeprefix("transformer."): value for key, value in load_file(folder / "model.safetensors").items()}
    width, layers = config["n_embd"], config["n_layer"]
    writer = gguf.GGUFWriter(str(out), "gpt2")
    writer.add_context_length(config["n_positions"])
    writer.add_embedding_length(width)
    writer.add_feed_forward_length(config.get("n_inner") or 4 * width)
    writer.add_block_count(layers)
    writer.add_head_count(config["n_head"])
    writer.add_layer_norm_eps(config["layer_norm_epsilon"])
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    tokens = sorted(vocab, key=vocab.get) + [f"[PAD{i}]" for i in range(config["vocab_size"] - len(vocab))]
    merges = [line for line in (folder / "merges.txt").read_text(encoding="utf-8").splitlines()
              if not line.startswith("#version")]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if t.startswith("<|") else gguf.TokenType.NORMAL for t in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(config["bos_token_id"])
    writer.add_eos_token_id(config["eos_token_id"])
    names = {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output", "ln_2": "ffn_norm",
             "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}
    tensors = {"token_embd.weight": state["wte.weight"], "position_embd.weight": state["wpe.weight"],
               "output_norm.weight": state["ln_f.weight"], "output_norm.bias": state["ln_f.bias"]}
    for i in range(layers):
        for ours, theirs in names.items():
            weight, bias = state[f"h.{i}.{ours}.weight"], state[f"h.{i}.{ours}.bias"]
            tensors[f"blk.{i}.{theirs}.weight"] = weight.T  # Conv1D's [in, out] as [out, in]; a LayerNorm's is 1-D
            tensors[f"blk.{i}.{theirs}.bias"] = bias
    for name, value in tensors.items():
        writer.add_tensor(name, np.ascontiguousarray(value, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def quantize(f32: Path, out: Path, name: str) -> Path:
    """``f32`` quantized by llama.cpp's own quantizer into ``name``'s format, every tensor in it (``pure``).
    Its log (a line a tensor, written by C to the process's stderr) is kept out of bench's output, and shown
    only if it fails."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, FILE_TYPES[name])
    params.nthread = threads()
    params.pure = True
    with tempfile.TemporaryFile() as log, io.StringIO() as logged, _whole_log():
        with _stderr_to(log), contextlib.redirect_stderr(logged):  # C's writes, and llama-cpp-python's log callback
            failed = llama_cpp.llama_model_quantize(str(f32).encode(), str(out).encode(), params) != 0
        if failed:
            log.seek(0)
            tail = (log.read().decode(errors="replace") + logged.getvalue()).strip().splitlines()[-3:]
            raise RuntimeError(f"llama.cpp could not quantize {f32} to {name}: {' / '.join(tail)}")
    return out


@contextlib.contextmanager
def _whole_log():
    """llama.cpp's whole log for the block: llama-cpp-python prints it at or above its logger's level, which any
    ``Llama(verbose=False)`` opened before in this process has set to errors only (a failed quantize's reason is not
    one)."""
    logger = logging.getLogger("llama-cpp-python")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def _stderr_to(file):
    """The process's stderr (file descriptor 2, where C code writes) sent to ``file`` for the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(file.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def files(folder: Path, scratch: Path, formats: list[str]) -> dict[str, Path]:
    """``{"f32": path, "q4_0": path, …}``: the checkpoint as GGUF, float32 and each of ``formats``."""
    f32 = write_f32(folder, scratch / "model-f32.gguf")
    return {"f32": f32} | {name: quantize(f32, scratch / f"model-{name}.gguf", name) for name in formats}


def open_model(path: Path, n_ctx: int, n_batch: int, cache: str):
    """``path`` in llama.cpp, on bench's threads, with its KV cache in ``cache``'s type: float16 (llama.cpp's
    default, as the course's kernel paths) or float32 (as the course's float32 paths: like with like)."""
    import llama_cpp

    kv = {"float16": llama_cpp.GGML_TYPE_F16, "float32": llama_cpp.GGML_TYPE_F32}[cache]
    return llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads(), n_threads_batch=threads(),
                           n_batch=n_batch, type_k=kv, type_v=kv, verbose=False)


def time_generation(path: Path, prompt: list[int], new_tokens: int, n_ctx: int,
                    cache: str) -> tuple[list[float], list[int]]:
    """Greedy generation with llama.cpp: ``[start, time of each new token]`` and the tokens."""
    model = open_model(path, n_ctx, max(len(prompt), 8), cache)

    def run(count: int) -> tuple[list[float], list[int]]:
        model.reset()  # forget the last run's tokens: the prompt is evaluated anew
        times, tokens = [time.perf_counter()], []
        for token in model.generate(prompt, temp=0.0):
            times.append(time.perf_counter())
            tokens.append(int(token))
            if len(tokens) == count:
                break
        return times, tokens

    run(8)  # warm-up
    return run(new_tokens)
