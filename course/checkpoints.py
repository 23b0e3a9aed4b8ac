"""Finding, reading and vetting a GPT-2 checkpoint: the machinery around step 14.

Step 14's ``load_pretrained`` is the lesson: config.json into a ``GPT2Config``,
checkpoint keys into the model's names, Conv1D weights transposed. Everything
around it lives here, so that the learner's file stays short:

* :func:`find` takes a local folder as it is, or a Hub id (``gpt2``,
  ``openai-community/gpt2-medium``, ...) from the local Hugging Face cache, and
  downloads only the needed files when the id is not cached. Without a network
  it says so within seconds, instead of huggingface_hub's retries.
* :meth:`Checkpoint.read_weights` reads ``model.safetensors`` (float32, float16 or
  bfloat16) or ``pytorch_model.bin``, and refuses an untied head.
* :meth:`Checkpoint.check` vets the converted weights against the model the
  config describes, and the tokenizer's vocabulary against ``vocab_size``.
* :func:`read_tokenizer` reads GPT-2's vocabulary and merges from vocab.json and
  merges.txt, or from the tokenizer.json that transformers 5 saves instead
  (step 12's ``Tokenizer.from_dir`` calls it).

Every problem raises :class:`CheckpointError`, whose text is one line: what is
wrong and what to do. ``tests/test_checkpoints.py`` checks each of them.
"""

from __future__ import annotations

import json
import pickle
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from course.outline import COURSE_LLAMA, COURSE_MODEL

#: What a GPT-2 checkpoint folder holds. Of the two weight files, the first found is read.
CONFIG = "config.json"
WEIGHTS = ("model.safetensors", "pytorch_model.bin")
TOKENIZER_FILES = ("vocab.json", "merges.txt")
TOKENIZER_JSON = "tokenizer.json"  # the same vocabulary and merges, as transformers 5 saves them
NEEDED = "config.json, model.safetensors (or pytorch_model.bin), and vocab.json and merges.txt (or tokenizer.json)"

#: GPT-2's four sizes on the Hub; each is also published as "openai-community/<name>".
SIZES = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")

#: The name of the course's own small GPT-2 (course/gpt2-book): ``--model course``.
COURSE = "course"
#: Part II's own small Llama, trained the same way (course/llama-book): ``--model course-llama``.
COURSE_LLAMA_NAME = "course-llama"

#: config.json settings the course's GPT-2 does not compute: key -> the values it does (first: the default).
COMPUTED = {"activation_function": ("gelu_new", "gelu_pytorch_tanh"), "tie_word_embeddings": (True,),
            "scale_attn_weights": (True,), "scale_attn_by_inverse_layer_idx": (False,)}
#: Refused settings a checkpoint may well ask for, and what the course says of them: (key, value) -> why.
NEAR_MISSES = {("activation_function", "gelu"): "the exact GELU (with erf); the course's GPT-2 computes its tanh "
               "approximation only (activation_function='gelu_new' or 'gelu_pytorch_tanh', step 04), and would "
               "run this model slightly wrong"}
#: The same for Part II's Llama (steps 17-23): no biases, SiLU, RoPE without scaling and with rotate-half pairs.
LLAMA_COMPUTED = {"hidden_act": ("silu",), "attention_bias": (False,), "mlp_bias": (False,),
                  "rope_scaling": (None,), "rope_interleaved": (False,), "pretraining_tp": (1,)}
#: Each model family the course builds: its config.json model_type -> what it does not compute, its name, the
#: step that loads it.
FAMILIES = {"gpt2": (COMPUTED, "GPT-2", "step 14"), "llama": (LLAMA_COMPUTED, "Llama", "step 23")}
#: The sizes a checkpoint error quotes from the config, where the config has them (GPT-2's or Llama's names).
SIZE_NAMES = ("n_layer", "num_hidden_layers", "n_embd", "hidden_size", "num_attention_heads", "num_key_value_heads",
              "vocab_size", "n_positions", "max_position_embeddings")


class CheckpointError(Exception):
    """A checkpoint that cannot be loaded. ``str(error)`` is one line: what is wrong, what to do."""


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


@dataclass
class Checkpoint:
    """A checkpoint's files, found: its folder (config.json, the tokenizer) and its weights file."""

    folder: Path
    weights_file: Path

    @property
    def config(self) -> dict:
        """config.json as a dict, refused where it asks for something the course's GPT-2 does not compute."""
        return self.config_of("gpt2")

    @property
    def family(self) -> str:
        """The family config.json names ("gpt2" or "llama", a key of FAMILIES; GPT-2's when it names none or
        another): which loader to run. That loader refuses what it cannot load, with its reasons."""
        try:
            found = json.loads((self.folder / CONFIG).read_text(encoding="utf-8")).get("model_type", "gpt2")
        except (OSError, ValueError, AttributeError):
            return "gpt2"
        return found if found in FAMILIES else "gpt2"

    def config_of(self, family: str) -> dict:
        """config.json as a dict, refused unless it describes a model of ``family`` ("gpt2" or "llama", a
        key of FAMILIES) that the course's model of that family computes."""
        path = self.folder / CONFIG
        computed, course_model, _ = FAMILIES[family]
        try:
            values = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise CheckpointError(f"{path} cannot be read as JSON: {one_line(error)}") from None
        if not isinstance(values, dict):
            raise CheckpointError(f"{path} holds a JSON {type(values).__name__}, not a model's settings")
        found = values.get("model_type", "gpt2" if family == "gpt2" else None)
        if found != family:
            where = (f"; the course loads {FAMILIES[found][1]} checkpoints in {FAMILIES[found][2]}"
                     if found in FAMILIES else "")
            raise CheckpointError(f"{path} describes a {found!r} model; this loader builds the course's "
                                  f"{course_model} (model_type {family!r}){where}")
        for key, allowed in computed.items():
            if values.get(key, allowed[0]) not in allowed:
                why = next((why for (name, value), why in NEAR_MISSES.items() if (name, value) == (key, values[key])),
                           None)
                if why is not None:
                    raise CheckpointError(f"{path} sets {key}={values[key]!r}, {why}")
                raise CheckpointError(f"{path} sets {key}={values[key]!r}; the course's {course_model} computes "
                                      f"{key}={allowed[0]!r} only")
        if family == "llama":
            _check_llama_shapes(values, path)
        return values

    def read_weights(self) -> dict[str, np.ndarray]:
        """Every tensor in the weights file, by its stored name, as NumPy; an untied head refused."""
        checkpoint = read_weights(self.weights_file)
        check_tied_head(checkpoint)
        return checkpoint

    def check(self, state: dict[str, np.ndarray], model_class, config) -> None:
        """``state`` holds every parameter of ``model_class(config)``, of its shape, and nothing else;
        the tokenizer's vocabulary fits ``config.vocab_size``."""
        check_state(state, expected_shapes(model_class, config), config, str(self.weights_file))
        tokens = vocabulary_size(self.folder)
        if tokens > config.vocab_size:
            raise CheckpointError(f"the tokenizer in {self.folder} has {tokens} tokens, more than the model's "
                                  f"vocab_size of {config.vocab_size}")


# --- reading ----------------------------------------------------------------------------------


def read_weights(path: Path) -> dict[str, np.ndarray]:
    """Every tensor in model.safetensors or pytorch_model.bin, by name, as NumPy arrays."""
    from safetensors import SafetensorError

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
            f"{path} cannot be read ({one_line(error)}): the file is truncated or damaged, as an interrupted "
            "download leaves it; delete it and download it again"
        ) from None


def vocabulary_size(folder: Path) -> int:
    """How many tokens the checkpoint's tokenizer names (its merges are not read)."""
    return len(_tokenizer(Path(folder), with_merges=False)[0])


def read_tokenizer(folder: Path) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """GPT-2's vocabulary (token -> id) and merges (in rank order) from ``folder``: vocab.json and
    merges.txt, or else tokenizer.json, which transformers 5's ``save_pretrained`` writes instead."""
    return _tokenizer(Path(folder), with_merges=True)


def read_files(vocab_json: Path, merges_txt: Path | None) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """GPT-2's two tokenizer files as they are: vocab.json's dict, merges.txt's pairs (none without it)."""
    vocab = json.loads(Path(vocab_json).read_text(encoding="utf-8"))
    lines = Path(merges_txt).read_text(encoding="utf-8").splitlines() if merges_txt else []
    merges = []
    for line in lines:
        if line.strip() and not line.startswith("#version"):
            left, right = line.split()  # a ValueError for a line that is not one pair
            merges.append((left, right))
    return vocab, merges


def _tokenizer(folder: Path, with_merges: bool) -> tuple[dict[str, int], list[tuple[str, str]]]:
    vocab_json, merges_txt = folder / TOKENIZER_FILES[0], folder / TOKENIZER_FILES[1]
    try:
        if vocab_json.is_file() and merges_txt.is_file():
            vocab, merges = read_files(vocab_json, merges_txt if with_merges else None)
        else:
            vocab, merges = _from_tokenizer_json(folder / TOKENIZER_JSON)
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as error:
        raise CheckpointError(f"the tokenizer files in {folder} cannot be read: {one_line(error)}") from None
    if not isinstance(vocab, dict):  # (tokenizer.json's is always a dict)
        raise CheckpointError(f"{vocab_json} holds a JSON {type(vocab).__name__}, not GPT-2's vocabulary (token -> id)")
    bad = next((merge for merge in merges if len(merge) != 2), None)
    if bad is not None:
        raise CheckpointError(f"the tokenizer files in {folder} are not GPT-2's format (a merge is {bad!r})")
    return vocab, merges


def _from_tokenizer_json(path: Path) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """The vocabulary and merges of a byte-level BPE in Hugging Face's tokenizer.json."""
    data = json.loads(path.read_text(encoding="utf-8"))
    model = data["model"]
    if model.get("type") != "BPE" or (data.get("pre_tokenizer") or {}).get("type") != "ByteLevel":
        raise CheckpointError(f"{path} holds a {model.get('type')} tokenizer, not GPT-2's byte-level BPE")
    vocab = dict(model["vocab"]) | {token["content"]: token["id"] for token in data.get("added_tokens", [])}
    merges = [tuple(merge.split(" ")) if isinstance(merge, str) else tuple(merge) for merge in model["merges"]]
    return vocab, merges


# --- vetting ------------------------------------------------------------------------------------


def _check_llama_shapes(values: dict, path: Path) -> None:
    """RoPE without scaling, and heads of hidden_size / num_attention_heads: what Part II's Llama computes."""
    rope = values.get("rope_parameters") or {}
    kind = rope.get("rope_type", "default")
    if kind != "default":
        raise CheckpointError(f"{path} sets rope_parameters.rope_type={kind!r} (RoPE with scaled frequencies, as "
                              "Llama 3.1 and 3.2 use); the course's RoPE (step 19) computes 'default' only")
    heads, width = values.get("num_attention_heads"), values.get("hidden_size")
    head_dim = values.get("head_dim")
    if head_dim is not None and heads and width and head_dim * heads != width:
        raise CheckpointError(f"{path} sets head_dim={head_dim}, but hidden_size={width} / num_attention_heads="
                              f"{heads} is {width / heads:g}; the course's Llama (step 17) derives head_dim from them")


def check_tied_head(checkpoint: dict[str, np.ndarray]) -> None:
    """An lm_head.weight, where there is one, must be wte's: the model's head is tied (step 11)."""
    head = checkpoint.get("lm_head.weight")
    wte = checkpoint.get("transformer.wte.weight", checkpoint.get("wte.weight"))
    if head is None or wte is None:
        return
    if head.shape != wte.shape or not np.array_equal(head, wte):
        differs = f"shape {list(head.shape)} vs {list(wte.shape)}" if head.shape != wte.shape else (
            f"max |Δ| {float(np.max(np.abs(head.astype(np.float64) - wte))):.3g}")
        raise CheckpointError(
            f"lm_head.weight differs from wte.weight ({differs}): this checkpoint has a separate output "
            "matrix, and the course's GPT2LMHeadModel ties its head to the token embedding (step 11)"
        )


def expected_shapes(model_class, config) -> dict[str, tuple[int, ...]]:
    """``model_class(config)``'s parameter names and shapes, built lazily (no weight computed)."""
    from max.experimental import functional as F

    with F.lazy():
        model = model_class(config)
    return {name: tuple(int(d) for d in value.shape) for name, value in model.parameters}


def check_state(state: dict[str, np.ndarray], expected: dict[str, tuple[int, ...]], config, source: str) -> None:
    """Every expected parameter, of its shape, and nothing else."""
    sizes = "config.json: " + ", ".join(f"{name}={getattr(config, name)}" for name in SIZE_NAMES
                                         if hasattr(config, name))
    missing = [name for name in expected if name not in state]
    if missing:
        raise CheckpointError(f"{source} lacks {len(missing)} of the model's {len(expected)} weights, first "
                              f"{missing[0]} (shape {list(expected[missing[0]])})")
    for name, value in state.items():
        if name not in expected:
            raise CheckpointError(f"{source} has a weight the model does not: {name} (shape {list(value.shape)}); "
                                  f"{sizes}")
    for name, shape in expected.items():
        found = tuple(state[name].shape)
        if found != shape:
            raise CheckpointError(f"{source}: {name} is {list(found)} as loaded, but the model's is {list(shape)} "
                                  f"({sizes})")


# --- finding: a folder, the Hugging Face cache, or a download -------------------------------------


def find(model: str) -> Checkpoint:
    """The files of a checkpoint folder or Hub id (cached, else downloaded), or of the course's own model."""
    if model == COURSE:  # before the folders: the course's package folder is also called course/
        return Checkpoint(COURSE_MODEL, _files_in(COURSE_MODEL))
    if model == COURSE_LLAMA_NAME:
        return Checkpoint(COURSE_LLAMA, _files_in(COURSE_LLAMA))
    path = Path(model).expanduser()
    if path.is_dir():
        return Checkpoint(path, _files_in(path))
    if path.exists():
        raise CheckpointError(f"{model} is a file; pass the folder that holds {NEEDED}")
    if model.startswith((".", "/", "~")) or "\\" in model or model.count("/") > 1:
        raise CheckpointError(f"there is no folder {model}; pass a folder that holds {NEEDED}, "
                              "or a Hub id such as gpt2")
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(model)
    except HFValidationError as error:
        raise CheckpointError(
            f"{model!r} is neither a folder nor a Hugging Face model id ({one_line(error).split(':')[0]})"
        ) from None
    for repo in _spellings(model):
        found = _in_cache(repo)
        if found is not None:
            return found
    return _download(model)


def default_model() -> tuple[str, str | None]:
    """What ``main`` runs without ``--model``: GPT-2 small when it is cached or the Hub answers (it is
    then downloaded), else the course's own model, with one line saying so."""
    from huggingface_hub import constants, hf_hub_url

    if any(_in_cache(repo) for repo in _spellings(SIZES[0])):
        return SIZES[0], None
    why = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else _unreachable(hf_hub_url(SIZES[0], CONFIG))
    if why is None:
        return SIZES[0], None
    return COURSE, (f"GPT-2 small is not in the Hugging Face cache and the Hub cannot be reached ({why}), so this is "
                    f"the course's own small GPT-2, trained on the King James Bible and this book's prose (--model {COURSE}; "
                    f"chapter 14)")


def _files_in(folder: Path) -> Path:
    """The weights file of a checkpoint folder, once every needed file is there."""
    weights = next((folder / name for name in WEIGHTS if (folder / name).is_file()), None)
    missing = [name for name in (CONFIG, *TOKENIZER_FILES) if not (folder / name).is_file()]
    if (folder / TOKENIZER_JSON).is_file():  # what transformers 5's save_pretrained writes instead
        missing = [name for name in missing if name not in TOKENIZER_FILES]
    if weights is None:
        sharded = (folder / "model.safetensors.index.json").is_file()
        missing.insert(1, "model.safetensors (a sharded checkpoint is not supported)" if sharded
                       else "model.safetensors or pytorch_model.bin")
    if missing:
        raise CheckpointError(f"{folder} has no {', no '.join(missing)}; a checkpoint folder holds {NEEDED}")
    return weights


def _spellings(model: str) -> list[str]:
    """The names a Hub model may be cached under: gpt2 is also openai-community/gpt2."""
    short = model.removeprefix("openai-community/")
    return [model, short if short != model else f"openai-community/{model}"] if short in SIZES else [model]


def _in_cache(repo: str) -> Checkpoint | None:
    """The files of ``repo`` in the local Hugging Face cache, without the network, or None."""
    from huggingface_hub import try_to_load_from_cache

    def cached(name: str) -> Path | None:
        found = try_to_load_from_cache(repo, name)
        return Path(found) if isinstance(found, str) and Path(found).is_file() else None

    config, weights = cached(CONFIG), next(filter(None, map(cached, WEIGHTS)), None)
    tokenizer = [cached(name) for name in TOKENIZER_FILES]
    if None in tokenizer and cached(TOKENIZER_JSON) is not None:
        tokenizer = []
    if config is None or weights is None or None in tokenizer:
        return None
    return Checkpoint(config.parent, weights)


def _download(model: str) -> Checkpoint:
    """Downloads only the needed files of a Hub model into the cache (after a quick look for the Hub)."""
    from huggingface_hub import constants, hf_hub_download, hf_hub_url
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

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
                              f"{one_line(error)[:200]}") from None
    except (HfHubHTTPError, OSError) as error:
        raise CheckpointError(f"downloading {model!r} failed: {one_line(error)[:300]}; {how}") from None
    return Checkpoint(config.parent, weights)


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
            why = getattr(reason, "strerror", None) or one_line(reason)
            answer.append(f"{urllib.parse.urlsplit(url).netloc}: {why}")

    probe = threading.Thread(target=ask, daemon=True)
    probe.start()
    probe.join(timeout)
    return answer[0] if answer else f"{urllib.parse.urlsplit(url).netloc} did not answer within {timeout:g} s"
