# Your file for step 14: fill in its TODOs, then run `pixi run s14`.
# (Rendered from solutions/step_14_pretrained.py by `python -m course.authoring.render`.)
"""Step 14 · Pretrained weights.

Steps 01-11 built GPT-2 with random weights. OpenAI's trained weights are
published as a **checkpoint**: a folder of files on the Hugging Face Hub.

    config.json          the sizes: n_embd, n_layer, n_head, vocab_size, n_positions
    model.safetensors    every weight, by name ("h.0.attn.c_attn.weight": [768, 2304])
    pytorch_model.bin    the same in PyTorch's older pickle format (the fallback)
    vocab.json           the tokenizer's files (step 12)
    merges.txt

Loading is a conversion, name by name, from how Hugging Face stores GPT-2 to how
the model of step 11 is built:

    checkpoint key               shape [in, out]   ->  model parameter                      shape [out, in]
    h.0.attn.c_attn.weight       [768, 2304]           transformer.h.0.attn.c_attn.weight   [2304, 768]
    wte.weight                   [50257, 768]          transformer.wte.weight               [50257, 768]
    h.0.attn.bias                [1, 1, 1024, 1024]    (dropped: a saved causal mask, not a weight)
    lm_head.weight               [50257, 768]          (dropped: the tied head is wte, step 11)

* **Names.** The model's parameters sit under ``transformer.``. The original
  ``gpt2`` checkpoint has no prefix; ``save_pretrained`` writes it.
* **Conv1D.** GPT-2's code stores ``c_attn``, ``c_proj`` and ``c_fc`` as Conv1D
  layers, with the weight as ``[in, out]``. MAX's ``Linear`` keeps ``[out, in]``,
  so those four weights are transposed. The embeddings, biases and layer norms
  are kept as they are.
* **Buffers and the head.** Old checkpoints also save each attention's causal
  mask (``attn.bias``, ``attn.masked_bias``); step 02 builds it instead. An
  ``lm_head.weight``, where there is one, must equal ``wte``: the head is tied.

Finding the files (given): a local folder is read as it is; a Hub id
(``gpt2``, ``gpt2-medium``, ``gpt2-large``, ``gpt2-xl``) is looked up in the local
Hugging Face cache first, and downloaded only when it is not there, only the
files above. Every problem raises :class:`CheckpointError` with one line that
says what is wrong and what to do.

Check this step with ``pixi run s14``.
"""

from __future__ import annotations

import json
import pickle
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
from huggingface_hub import constants, hf_hub_download, hf_hub_url, try_to_load_from_cache
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    HFValidationError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
)
from huggingface_hub.utils import validate_repo_id
from safetensors import SafetensorError

from step_01_config import GPT2Config
from step_11_lm_head import GPT2LMHeadModel
from step_12_tokenizer import Tokenizer

#: What a GPT-2 checkpoint folder holds. Of the two weight files, the first found is read.
CONFIG = "config.json"
WEIGHTS = ("model.safetensors", "pytorch_model.bin")
TOKENIZER_FILES = ("vocab.json", "merges.txt")
NEEDED = "config.json, model.safetensors (or pytorch_model.bin), vocab.json and merges.txt"

#: GPT-2's four sizes on the Hub; each is also published as "openai-community/<name>".
SIZES = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")

#: The name of GPT2LMHeadModel's body (step 11): every parameter's name starts with it.
PREFIX = "transformer."


class CheckpointError(Exception):
    """A checkpoint that cannot be loaded. ``str(error)`` is one line: what is wrong, what to do."""


@dataclass
class Pretrained:
    """A loaded checkpoint: its config, its weights in the model's layout, and its folder."""

    config: GPT2Config
    state: dict[str, np.ndarray]  # GPT2LMHeadModel(config)'s parameter names -> float32 arrays
    folder: Path  # holds config.json, vocab.json and merges.txt


# --- The conversion: the learner's part -------------------------------------------------


def config_from_json(values: dict) -> GPT2Config:
    """GPT-2's sizes from a checkpoint's config.json, already parsed into a dict."""
    # TODO 1: Build a GPT2Config from the entries of config.json whose key is one
    #   of GPT2Config's fields, and leave out the others (the file also holds
    #   "architectures", "n_ctx", "task_specific_params", ...). A field the file
    #   does not name keeps its default.
    # Hint: dataclasses.fields(GPT2Config) lists the fields; each has a .name.
    return None




def is_weight(key: str) -> bool:
    """Whether a checkpoint entry is one of the model's weights (True) or left out (False)."""
    # TODO 2: Return False for the entries the model has no parameter for, True
    #   for every other key:
    #   - the attention's buffers, keys ending in ".attn.bias" or ".attn.masked_bias":
    #     a causal mask that older checkpoints save (step 02 builds it instead);
    #   - "lm_head.weight", the tied head: the model reuses transformer.wte.weight.
    # Hint: mind the dot. "h.0.attn.c_attn.bias" is c_attn's bias, a weight; only
    #   a key ending in ".attn.bias" is the buffer.
    return None




def max_name(key: str) -> str:
    """The model's name for a checkpoint weight: "h.0.mlp.c_fc.weight" -> "transformer.h.0.mlp.c_fc.weight"."""
    # TODO 3: Put every weight under PREFIX ("transformer."), the name of
    #   GPT2LMHeadModel's body (step 11). The original gpt2 checkpoint has no prefix
    #   ("wte.weight", "h.0.ln_1.bias"); what save_pretrained writes already has it.
    # Hint: add the prefix only where it is missing, never twice.
    return None




def to_max_layout(name: str, value: np.ndarray) -> np.ndarray:
    """A weight as the model keeps it: Conv1D weights transposed, everything else as stored."""
    # TODO 4: GPT-2's code stores attn.c_attn, attn.c_proj, mlp.c_fc and mlp.c_proj
    #   as Conv1D layers, whose weight is [in, out]; MAX's Linear (steps 04 and 07)
    #   keeps [out, in]. Return those four weights transposed, and every other value
    #   as it is: wte and wpe are tables of rows, [rows, n_embd], not Linear weights,
    #   and biases and layer-norm parameters are 1-D.
    # Hint: name.endswith(("c_attn.weight", ...)) takes a tuple; value.T is the
    #   transpose. A square weight (c_proj is [n_embd, n_embd]) loads either way,
    #   so only the numbers show a missed one.
    return None




# --- Given: the conversion around them, and its checks -----------------------------------


def convert(checkpoint: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A checkpoint's weights -> the model's names and layouts, in float32 (given).

    Empties ``checkpoint`` as it goes, so that a 6 GB checkpoint is never held twice.
    """
    check_tied_head(checkpoint)
    state, source = {}, {}
    for key in list(checkpoint):
        value = checkpoint.pop(key)
        if not is_weight(key):
            continue
        name = max_name(key)
        if name in state:
            raise CheckpointError(f"the checkpoint has both {source[name]} and {key}, which are the same weight {name}")
        state[name] = np.ascontiguousarray(to_max_layout(name, value), dtype=np.float32)
        source[name] = key
    return state




def check_tied_head(checkpoint: dict[str, np.ndarray]) -> None:
    """An lm_head.weight, where there is one, must be wte's: the model's head is tied (step 11)."""
    head = checkpoint.get("lm_head.weight")
    wte = checkpoint.get(PREFIX + "wte.weight", checkpoint.get("wte.weight"))
    if head is None or wte is None:
        return
    if head.shape != wte.shape or not np.array_equal(head, wte):
        differs = f"shape {list(head.shape)} vs {list(wte.shape)}" if head.shape != wte.shape else (
            f"max |Δ| {float(np.max(np.abs(head.astype(np.float64) - wte))):.3g}")
        raise CheckpointError(
            f"lm_head.weight differs from wte.weight ({differs}): this checkpoint has a separate output "
            "matrix, and the course's GPT2LMHeadModel ties its head to the token embedding (step 11)"
        )


def expected_shapes(config: GPT2Config) -> dict[str, tuple[int, ...]]:
    """GPT2LMHeadModel(config)'s parameter names and shapes, built lazily (no weight computed)."""
    from max.experimental import functional as F

    with F.lazy():
        model = GPT2LMHeadModel(config)
    return {name: tuple(int(d) for d in value.shape) for name, value in model.parameters}


def check_state(state: dict[str, np.ndarray], config: GPT2Config, source: str,
                stored: dict[str, tuple[int, ...]] | None = None) -> None:
    """Every parameter of the model, of its shape, and nothing else (given)."""
    expected = expected_shapes(config)
    stored = stored or {}
    sizes = (f"config.json: n_layer={config.n_layer}, n_embd={config.n_embd}, vocab_size={config.vocab_size}, "
             f"n_positions={config.n_positions}")
    missing = [name for name in expected if name not in state]
    if missing:
        raise CheckpointError(
            f"{source} lacks {len(missing)} of the model's {len(expected)} weights, first {missing[0]} "
            f"(shape {list(expected[missing[0]])})"
        )
    for name, value in state.items():
        if name not in expected:
            raise CheckpointError(
                f"{source} has a weight the model does not: {name} (shape {list(value.shape)}); {sizes}"
            )
    for name, shape in expected.items():
        found = tuple(state[name].shape)
        if found != shape:
            was = stored.get(name, found)
            how = f"{list(was)}, which converts to {list(found)}" if tuple(was) != found else f"{list(found)}"
            raise CheckpointError(f"{source}: {name} is {how}, but the model's is {list(shape)} ({sizes})")


# --- Given: reading the files ------------------------------------------------------------


def read_config(path: Path) -> GPT2Config:
    """config.json -> GPT2Config, refusing what the course's model does not compute."""
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path} cannot be read as JSON: {_one_line(error)}") from None
    if not isinstance(values, dict):
        raise CheckpointError(f"{path} holds a JSON {type(values).__name__}, not GPT-2's settings")
    if values.get("model_type", "gpt2") != "gpt2":
        raise CheckpointError(f"{path} describes a {values['model_type']!r} model; this course builds GPT-2")
    unsupported = {"activation_function": ("gelu_new", "gelu_pytorch_tanh"), "tie_word_embeddings": (True,),
                   "scale_attn_weights": (True,), "scale_attn_by_inverse_layer_idx": (False,)}
    for key, allowed in unsupported.items():
        if values.get(key, allowed[0]) not in allowed:
            raise CheckpointError(
                f"{path} sets {key}={values[key]!r}; the course's GPT-2 computes {key}={allowed[0]!r} only"
            )
    try:
        return config_from_json(values)
    except ValueError as error:  # GPT2Config's own check (step 01)
        raise CheckpointError(f"{path}: {_one_line(error)}") from None


def read_weights(path: Path) -> dict[str, np.ndarray]:
    """Every tensor in model.safetensors or pytorch_model.bin, by name, as NumPy arrays."""
    try:
        if path.suffix == ".safetensors":
            from safetensors.numpy import load_file

            try:
                return load_file(path)
            except TypeError:  # bfloat16, which NumPy has no type for: through PyTorch
                from safetensors.torch import load_file as load_torch

                return {key: value.float().numpy() for key, value in load_torch(path).items()}
        import torch

        loaded = torch.load(path, map_location="cpu", weights_only=True)
        return {key: value.float().numpy() for key, value in loaded.items() if isinstance(value, torch.Tensor)}
    except (SafetensorError, OSError, RuntimeError, EOFError, pickle.UnpicklingError, ValueError) as error:
        raise CheckpointError(
            f"{path} cannot be read ({_one_line(error)}): the file is truncated or damaged, as an interrupted "
            "download leaves it; delete it and download it again"
        ) from None


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


# --- Given: finding the files, in a folder or through the Hugging Face cache --------------


def locate(model: str) -> tuple[Path, Path]:
    """(the folder holding config.json and the tokenizer, the weights file) for a folder or Hub id."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path, _files_in(path)
    if path.exists():
        raise CheckpointError(f"{model} is a file; pass the folder that holds {NEEDED}")
    if model.startswith((".", "/", "~")) or "\\" in model or model.count("/") > 1:
        raise CheckpointError(f"there is no folder {model}; pass a folder that holds {NEEDED}, "
                              "or a Hub id such as gpt2")
    try:
        validate_repo_id(model)
    except HFValidationError as error:
        raise CheckpointError(
            f"{model!r} is neither a folder nor a Hugging Face model id ({_one_line(error).split(':')[0]})"
        ) from None
    for repo in _spellings(model):
        found = _in_cache(repo)
        if found is not None:
            return found
    return _download(model)


def _files_in(folder: Path) -> Path:
    """The weights file of a checkpoint folder, once every needed file is there."""
    weights = next((folder / name for name in WEIGHTS if (folder / name).is_file()), None)
    missing = [name for name in (CONFIG, *TOKENIZER_FILES) if not (folder / name).is_file()]
    if weights is None:
        sharded = (folder / "model.safetensors.index.json").is_file()
        missing.insert(1, "model.safetensors (a sharded checkpoint is not supported)" if sharded
                       else "model.safetensors or pytorch_model.bin")
    if missing:
        raise CheckpointError(f"{folder} has no {', no '.join(missing)}; a GPT-2 checkpoint folder holds {NEEDED}")
    return weights


def _spellings(model: str) -> list[str]:
    """The names a Hub model may be cached under: gpt2 is also openai-community/gpt2."""
    short = model.removeprefix("openai-community/")
    return [model, short if short != model else f"openai-community/{model}"] if short in SIZES else [model]


def _in_cache(repo: str) -> tuple[Path, Path] | None:
    """The files of ``repo`` in the local Hugging Face cache, without the network, or None."""
    def cached(name: str) -> Path | None:
        found = try_to_load_from_cache(repo, name)
        return Path(found) if isinstance(found, str) and Path(found).is_file() else None

    config, weights = cached(CONFIG), next(filter(None, map(cached, WEIGHTS)), None)
    tokenizer = [cached(name) for name in TOKENIZER_FILES]
    if config is None or weights is None or None in tokenizer:
        return None
    return config.parent, weights


def _download(model: str) -> tuple[Path, Path]:
    """Downloads only the needed files of a Hub model into the cache (after a quick look for the Hub)."""
    cache = constants.HF_HUB_CACHE
    how = (f"download it once with `hf download {model} {CONFIG} {WEIGHTS[0]} {' '.join(TOKENIZER_FILES)}`, "
           f"or pass a folder that holds {NEEDED}")
    why = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else _unreachable(hf_hub_url(model, CONFIG))
    if why is not None:
        where = "a folder here nor in" if "/" in model else "in"
        raise CheckpointError(f"{model!r} is not {where} the Hugging Face cache ({cache}), and the Hub cannot be "
                              f"reached ({why}); {how}")
    try:
        config = Path(hf_hub_download(model, CONFIG))
        for name in TOKENIZER_FILES:
            hf_hub_download(model, name)
        try:
            weights = Path(hf_hub_download(model, WEIGHTS[0]))
        except EntryNotFoundError as error:
            if isinstance(error, LocalEntryNotFoundError):
                raise
            weights = Path(hf_hub_download(model, WEIGHTS[1]))
    except RepositoryNotFoundError:
        raise CheckpointError(
            f"there is no model {model!r} on the Hugging Face Hub (or it is private); GPT-2's are {', '.join(SIZES)}"
        ) from None
    except LocalEntryNotFoundError:
        raise CheckpointError(f"downloading {model!r} failed: the connection to the Hub broke; {how}") from None
    except EntryNotFoundError as error:
        raise CheckpointError(f"{model!r} on the Hub lacks a file a GPT-2 checkpoint needs ({NEEDED}): "
                              f"{_one_line(error)[:200]}") from None
    except (HfHubHTTPError, OSError) as error:
        raise CheckpointError(f"downloading {model!r} failed: {_one_line(error)[:300]}; {how}") from None
    return config.parent, weights


def _unreachable(url: str, timeout: float = 5.0) -> str | None:
    """Why ``url`` gets no answer, or None when the Hub answers (even "not found").

    Asked before any download: without a network, huggingface_hub retries each file
    for more than 20 seconds before it gives up. This asks once and waits at most
    ``timeout`` seconds, in a thread, since a name lookup ignores timeouts.
    """
    answer: list[str | None] = []

    def ask() -> None:
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
            answer.append(None)
        except urllib.error.HTTPError:  # an answer, such as 404 for an unknown model
            answer.append(None)
        except Exception as error:  # noqa: BLE001 - no name, no route, no TLS, a timeout...
            reason = getattr(error, "reason", error)  # URLError wraps the socket's error
            why = getattr(reason, "strerror", None) or _one_line(reason)
            answer.append(f"{urllib.parse.urlsplit(url).netloc}: {why}")

    probe = threading.Thread(target=ask, daemon=True)
    probe.start()
    probe.join(timeout)
    return answer[0] if answer else f"{urllib.parse.urlsplit(url).netloc} did not answer within {timeout:g} s"


# --- Given: the API the programs use -----------------------------------------------------


def load_pretrained(model: str) -> Pretrained:
    """A GPT-2 checkpoint by Hub id ("gpt2", "gpt2-medium", ...) or local folder, converted for MAX."""
    folder, weights = locate(model)
    config = read_config(folder / CONFIG)
    checkpoint = read_weights(weights)
    stored = {max_name(key): tuple(value.shape) for key, value in checkpoint.items() if is_weight(key)}
    state = convert(checkpoint)
    check_state(state, config, str(weights), stored)
    return Pretrained(config=config, state=state, folder=folder)


def from_pretrained(model: str) -> tuple[GPT2LMHeadModel, Tokenizer]:
    """Step 11's model with a checkpoint's weights loaded, and step 12's tokenizer from its files."""
    from max.experimental import functional as F
    from max.experimental.tensor import Tensor

    loaded = load_pretrained(model)
    try:
        tokenizer = Tokenizer.from_dir(loaded.folder)
    except (OSError, ValueError, KeyError) as error:
        raise CheckpointError(f"the tokenizer files in {loaded.folder} cannot be read: {_one_line(error)}") from None
    if len(tokenizer.encoder) > loaded.config.vocab_size:
        raise CheckpointError(f"vocab.json in {loaded.folder} has {len(tokenizer.encoder)} tokens, more than the "
                              f"model's vocab_size of {loaded.config.vocab_size}")
    with F.lazy():
        gpt2 = GPT2LMHeadModel(loaded.config)
    gpt2.load_state_dict({name: Tensor.from_dlpack(value) for name, value in loaded.state.items()})
    return gpt2, tokenizer
