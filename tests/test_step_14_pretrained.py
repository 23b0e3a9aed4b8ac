"""Step 14 · loading GPT-2 checkpoints, against Hugging Face's GPT2LMHeadModel.

Every checkpoint here is written on the spot, offline, from one seeded small
GPT-2 (``SMALL`` with the vocabulary of a 300-token byte-level BPE trained here
with ``tokenizers``, so that ``vocab.json`` and ``merges.txt`` fit the model):

* ``save_pretrained``: what ``GPT2LMHeadModel.save_pretrained`` writes
  (``model.safetensors``, keys under ``transformer.``, no ``lm_head.weight``);
* ``original gpt2 layout``: keys without the prefix, as in the ``gpt2`` Hub
  checkpoint, with the ``attn.bias`` / ``attn.masked_bias`` buffers and an
  ``lm_head.weight`` stored as a copy of ``wte``;
* ``pytorch_model.bin``: ``torch.save`` of the state dict and no safetensors file
  (the fallback; ``lm_head.weight`` and ``wte`` share one tensor there).

Each loads through ``from_pretrained(folder)``; the logits on a sentence encoded
by the loaded tokenizer are compared with Hugging Face's, with the argmax. The
learner's four functions are checked first, each on its own, so that a mistake
names its TODO. Broken checkpoints (truncated, a missing, unexpected or
mis-shaped weight, an untied head, no config.json, no folder) and Hub ids must
each raise ``CheckpointError`` with one line naming the problem. The Hub is never
contacted: a fake Hugging Face cache serves ``gpt2``, and an uncached id meets a
closed local port (``HF_ENDPOINT``), the way a machine without a network does,
and must fail within seconds. With GPT-2's real weights in the local Hugging
Face cache, one more check compares real logits and the next token; otherwise
it is skipped, saying how to get them.

Tolerance: the harness default, 1e-4 + 1e-4·|expected|. Measured worst case |Δ|
on solutions/: 4.3e-6 on the small model (logits of size ~10). A missed
transpose of the square ``attn.c_proj`` loads without complaint and is off by
more than 1.
"""

from __future__ import annotations

import json
import shutil
import socket
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from course.check.hints import explain_exception, shown, todo_label, todos_in
from harness import assert_close, attribute, call, fail, forward, solution, todo_in
from reference import SMALL, hf_config, seeded, to_max_state

pytestmark = pytest.mark.step14

END_OF_TEXT = "<|endoftext|>"
TEXT = "Hello world! The quick brown fox jumps over the lazy dog."
TOKENIZER_FILES = ("vocab.json", "merges.txt")

#: GPT-2's own config.json on the Hub (openai-community/gpt2), as published.
GPT2_CONFIG_JSON = {
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
    "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
    "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "summary_activation": None,
    "summary_first_dropout": 0.1, "summary_proj_to_labels": True, "summary_type": "cls_index",
    "summary_use_proj": True, "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
    "vocab_size": 50257,
}

HOW_TO_GET_GPT2 = (
    "GPT-2's weights are not in the Hugging Face cache; `hf download gpt2 config.json model.safetensors "
    "vocab.json merges.txt` (550 MB, once) makes this check run"
)


# --- the checkpoints ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    """vocab.json and merges.txt of a small byte-level BPE trained here."""
    from tokenizers import ByteLevelBPETokenizer

    trainer = ByteLevelBPETokenizer(add_prefix_space=False)
    trainer.train_from_iterator([TEXT * 20, "The lazy dog sleeps; the fox does not."], vocab_size=300,
                                min_frequency=2, special_tokens=[END_OF_TEXT], show_progress=False)
    folder = tmp_path_factory.mktemp("tokenizer")
    trainer.save_model(str(folder))
    return folder


@pytest.fixture(scope="module")
def reference(tokenizer_dir) -> transformers.GPT2LMHeadModel:
    """A seeded small GPT-2 whose vocabulary is the trained tokenizer's."""
    vocab = len(json.loads((tokenizer_dir / "vocab.json").read_text()))
    with torch.device("meta"):
        model = transformers.GPT2LMHeadModel(hf_config(**dict(SMALL, vocab_size=vocab)))
    model = model.to_empty(device="cpu")
    model.tie_weights()
    return seeded(model, seed=14)


def _finish(folder: Path, tokenizer_dir: Path, config: Path | None) -> Path:
    """Adds config.json (copied from ``config``) and the tokenizer files to a checkpoint folder."""
    if config is not None:
        shutil.copy(config, folder / "config.json")
    for name in TOKENIZER_FILES:
        shutil.copy(tokenizer_dir / name, folder / name)
    return folder


def _write(folder: Path, weights: dict[str, np.ndarray], like: Path, tokenizer_dir: Path) -> Path:
    """A checkpoint folder with these weights (as model.safetensors) and ``like``'s config.json."""
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file({key: np.ascontiguousarray(value) for key, value in weights.items()}, str(folder / "model.safetensors"))
    return _finish(folder, tokenizer_dir, like / "config.json")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, reference, tokenizer_dir) -> dict[str, Path]:
    """The three layouts of the same weights, each a complete checkpoint folder."""
    root = tmp_path_factory.mktemp("checkpoints")
    saved = root / "save_pretrained"
    reference.save_pretrained(saved)
    _finish(saved, tokenizer_dir, None)

    weights = {key: value.numpy() for key, value in reference.state_dict().items()}
    n, p = reference.config.n_layer, reference.config.n_positions
    old = {key.removeprefix("transformer."): value for key, value in weights.items()}
    old["lm_head.weight"] = old["wte.weight"].copy()
    for i in range(n):  # what older versions of GPT2Attention registered and saved
        old[f"h.{i}.attn.bias"] = np.tril(np.ones((p, p), np.float32))[None, None]
        old[f"h.{i}.attn.masked_bias"] = np.array(-1e4, np.float32)
    original = _write(root / "original", old, saved, tokenizer_dir)

    pickled = root / "pytorch_bin"
    pickled.mkdir()
    torch.save(reference.state_dict(), pickled / "pytorch_model.bin")
    _finish(pickled, tokenizer_dir, saved / "config.json")
    return {"save_pretrained": saved, "original gpt2 layout": original, "pytorch_model.bin": pickled}


def _saved_weights(checkpoints) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(checkpoints["save_pretrained"] / "model.safetensors")


# --- the learner's functions ---------------------------------------------------------------


def _ready(step) -> None:
    """Each of the four TODOs returns something (a stub fails here, naming its TODO)."""
    call(attribute(step, "config_from_json"), dict(GPT2_CONFIG_JSON), what="config_from_json(gpt2's config.json)")
    for key in ("h.0.attn.bias", "wte.weight"):
        call(attribute(step, "is_weight"), key, what=f"is_weight({key!r})")
    call(attribute(step, "max_name"), "wte.weight", what="max_name('wte.weight')")
    call(attribute(step, "to_max_layout"), "transformer.wte.weight", np.zeros((3, 2), np.float32),
         what="to_max_layout('transformer.wte.weight', …)")


def _load(step, model: str, what: str):
    """The learner's load_pretrained(model); a CheckpointError or a crash becomes a hint."""
    load = attribute(step, "load_pretrained")
    try:
        return load(model)
    except attribute(step, "CheckpointError") as error:
        todos = todos_in(step.is_weight) + todos_in(step.max_name) + todos_in(step.to_max_layout)
        fail(f"load_pretrained({what}) raised CheckpointError: {error} — {todo_label(todos, step.__file__)}")
    except Exception as error:  # noqa: BLE001 - the learner's line, explained
        fail(f"load_pretrained({what}) failed: {explain_exception(error, step.__file__)}")


def test_config_from_json(step):
    """config.json becomes a GPT2Config: the sizes it names, the defaults for the rest"""
    config_class = solution(1).GPT2Config
    small = dict(SMALL, n_inner=48, layer_norm_epsilon=0.1, model_type="gpt2", architectures=["GPT2LMHeadModel"],
                 n_ctx=32, tie_word_embeddings=True)
    cases = {
        "gpt2's config.json": (GPT2_CONFIG_JSON, config_class()),
        "a small config.json": (small, config_class(**{key: small[key] for key in (*SMALL, "n_inner",
                                                                                  "layer_norm_epsilon")})),
    }
    fn = attribute(step, "config_from_json")
    for what, (values, expected) in cases.items():
        got = call(fn, dict(values), what=f"config_from_json({what})")
        if type(got).__name__ != "GPT2Config":
            fail(f"config_from_json({what}) returned a {type(got).__name__}; expected a GPT2Config (step 01) "
                 f"— {todo_in(fn)}")
        for field in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner", "layer_norm_epsilon",
                      "activation_function"):
            mine, theirs = getattr(got, field, None), getattr(expected, field)
            if mine != theirs:
                source = f"the file says {theirs!r}" if field in values else (
                    f"the file does not name it, so it keeps GPT2Config's default {theirs!r}")
                fail(f"config_from_json({what}).{field} is {mine!r}, {source} — {todo_in(fn)}")


#: (checkpoint key, the model's name for it, or None where it is no weight, why).
#: Ordered so that each mistake shows first on the key that explains it best.
KEYS = [
    ("transformer.h.0.attn.c_attn.bias", "transformer.h.0.attn.c_attn.bias", "c_attn's bias, a weight"),
    ("h.0.attn.c_attn.bias", "transformer.h.0.attn.c_attn.bias", "c_attn's bias, a weight"),
    ("h.0.attn.c_proj.bias", "transformer.h.0.attn.c_proj.bias", "c_proj's bias, a weight"),
    ("h.0.attn.bias", None, "the attention's causal-mask buffer, not a weight (step 02 builds the mask)"),
    ("transformer.h.3.attn.masked_bias", None, "a buffer of old checkpoints (the masking value), not a weight"),
    ("lm_head.weight", None, "the tied head: the model reuses transformer.wte.weight (step 11)"),
    ("transformer.wte.weight", "transformer.wte.weight", "the token embedding"),
    ("wte.weight", "transformer.wte.weight", "the token embedding"),
    ("h.11.mlp.c_fc.weight", "transformer.h.11.mlp.c_fc.weight", "a weight"),
    ("transformer.ln_f.bias", "transformer.ln_f.bias", "a weight"),
    ("ln_f.weight", "transformer.ln_f.weight", "a weight"),
]


def test_keys_become_the_models_names(step):
    """checkpoint keys become the model's names; the buffers and the tied head are left out"""
    keep, rename = attribute(step, "is_weight"), attribute(step, "max_name")
    for key, name, what in KEYS:
        kept = call(keep, key, what=f"is_weight({key!r})")
        if bool(kept) != (name is not None):
            fail(f"is_weight({key!r}) is {kept!r}, but it is {what} — {todo_in(keep)}")
        if name is None:
            continue
        got = call(rename, key, what=f"max_name({key!r})")
        if got != name:
            twice = "; the prefix is there twice" if str(got).startswith("transformer.transformer.") else ""
            fail(f"max_name({key!r}) is {got!r}, expected {name!r} (GPT2LMHeadModel's name){twice} "
                 f"— {todo_in(rename)}")


def test_conv1d_weights_are_transposed(step):
    """the four Conv1D weights are transposed to [out, in]; embeddings, biases and norms are kept"""
    fn = attribute(step, "to_max_layout")
    rng = np.random.default_rng(14)
    e, inner = 4, 16
    conv1d = {  # stored [in, out]
        "transformer.h.0.attn.c_attn.weight": (e, 3 * e),
        "transformer.h.0.attn.c_proj.weight": (e, e),
        "transformer.h.0.mlp.c_fc.weight": (e, inner),
        "transformer.h.0.mlp.c_proj.weight": (inner, e),
    }
    kept = {
        "transformer.wte.weight": ((10, e), "the token table, one row per token"),
        "transformer.wpe.weight": ((e, e), "the position table, one row per position"),
        "transformer.h.0.attn.c_attn.bias": ((3 * e,), "a bias"),
        "transformer.h.0.ln_1.weight": ((e,), "a layer norm's scale"),
    }
    for name, shape in [*conv1d.items(), *((name, shape) for name, (shape, _) in kept.items())]:
        value = rng.standard_normal(shape).astype(np.float32)
        got = call(fn, name, value.copy(), what=f"to_max_layout({name!r}, …)")
        got = np.asarray(got)
        expected = value.T if name in conv1d else value
        if got.shape == expected.shape and np.array_equal(got, expected):
            continue
        if name in conv1d and got.shape == value.shape and np.array_equal(got, value):
            fail(f"to_max_layout({name!r}, a {list(shape)} weight) returned it as stored; it is a Conv1D weight, "
                 f"stored [in, out], and MAX's Linear keeps [out, in]: return its transpose — {todo_in(fn)}")
        if name not in conv1d and np.array_equal(got, value.T):
            fail(f"to_max_layout({name!r}, a {list(shape)} weight) transposed it; only c_attn, c_proj and c_fc "
                 f"weights are stored [in, out], and this is {kept[name][1]} — {todo_in(fn)}")
        fail(f"to_max_layout({name!r}, a {list(shape)} weight) returned {list(got.shape)} values that are not "
             f"the {'transpose' if name in conv1d else 'weight as stored'} ({list(expected.shape)}) — {todo_in(fn)}")


# --- loading, and the model's logits ----------------------------------------------------------


def _argmax_agreement(got: np.ndarray, expected: np.ndarray) -> tuple[int, int]:
    agree = got.argmax(-1) == expected.argmax(-1)
    return int(agree.sum()), agree.size


@pytest.mark.parametrize("layout", ["save_pretrained", "original gpt2 layout", "pytorch_model.bin"])
def test_logits_match_hugging_face(step, checkpoints, reference, layout, record_property):
    """a saved checkpoint loads, and its logits match Hugging Face's GPT2LMHeadModel"""
    _ready(step)
    folder = checkpoints[layout]
    loaded = _load(step, str(folder), f"the {layout} folder")
    expected_state = to_max_state(reference)
    for name, value in expected_state.items():  # the contract the programs rely on
        got = loaded.state.get(name)
        if got is None or got.dtype != np.float32 or not got.flags.c_contiguous or got.shape != value.shape:
            fail(f"load_pretrained gave {name} as {None if got is None else (got.dtype, got.shape)}; expected "
                 f"a contiguous float32 array of shape {list(value.shape)} — keep the given convert")
    model, tokenizer = call(attribute(step, "from_pretrained"), str(folder),
                            what=f"from_pretrained(the {layout} folder)")
    ids = np.array([tokenizer.encode(TEXT)], dtype=np.int64)
    assert 8 <= ids.shape[1] <= reference.config.n_positions, ids.shape  # the course's own setup
    got = forward(model, ids)
    with torch.no_grad():
        expected = reference(torch.from_numpy(ids)).logits.numpy()
    agree, total = _argmax_agreement(got, expected)
    record_property("argmax_agreement", f"{agree}/{total}")
    assert_close(got, expected, f"logits of the {layout} checkpoint vs Hugging Face GPT2LMHeadModel")
    if agree < total:
        fail(f"logits are within the tolerance, but the argmax agrees at only {agree} of {total} positions")


def _fake_hub(tmp_path: Path, repo: str, checkpoint: Path) -> Path:
    """A Hugging Face cache holding ``repo`` at one commit, as `hf download` leaves it; returns the snapshot."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    cached = tmp_path / "hub" / f"models--{repo.replace('/', '--')}"
    snapshot = cached / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (cached / "refs").mkdir()
    (cached / "refs" / "main").write_text(commit)
    for name in ("config.json", "model.safetensors", *TOKENIZER_FILES):
        shutil.copy(checkpoint / name, snapshot / name)
    return snapshot


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _offline_hub(monkeypatch, cache: Path) -> None:
    """Points huggingface_hub at ``cache`` and at a closed local port instead of the Hub.

    huggingface_hub reads HF_HUB_CACHE and HF_ENDPOINT when it is imported, so its
    constants are patched as well as the environment."""
    from huggingface_hub import constants

    endpoint = _closed_port()
    cache.mkdir(parents=True, exist_ok=True)
    for key, value in {"HF_HUB_CACHE": str(cache), "HF_ENDPOINT": endpoint, "HF_HUB_OFFLINE": "0"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}")


def test_hub_id_is_found_in_the_cache(step, checkpoints, reference, tmp_path, monkeypatch):
    """a Hub id ("gpt2") loads from the local Hugging Face cache, without the network"""
    _ready(step)
    snapshot = _fake_hub(tmp_path, "openai-community/gpt2", checkpoints["save_pretrained"])
    _offline_hub(monkeypatch, tmp_path / "hub")
    expected = to_max_state(reference)
    for model in ("gpt2", "openai-community/gpt2"):
        started = time.perf_counter()
        loaded = _load(step, model, repr(model))
        if Path(loaded.folder).resolve() != snapshot.resolve():
            fail(f"load_pretrained({model!r}).folder is {loaded.folder}, expected the cached snapshot {snapshot}")
        wrong = [name for name in expected if not np.array_equal(loaded.state.get(name), expected[name])]
        if wrong or set(loaded.state) != set(expected):
            fail(f"load_pretrained({model!r}) from the cache differs from the checkpoint at {wrong[:3]}")
        print(f"{model}: loaded from the cache in {time.perf_counter() - started:.2f} s")


# --- broken checkpoints: one clear line each -----------------------------------------------


def _edited(checkpoints, tmp_path, tokenizer_dir, edit) -> Path:
    weights = _saved_weights(checkpoints)
    edit(weights)
    return _write(tmp_path / "edited", weights, checkpoints["save_pretrained"], tokenizer_dir)


def _truncated(checkpoints, tmp_path, tokenizer_dir, monkeypatch) -> str:
    folder = tmp_path / "truncated"
    shutil.copytree(checkpoints["save_pretrained"], folder)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    return str(folder)


def _missing(checkpoints, tmp_path, tokenizer_dir, monkeypatch) -> str:
    return str(_edited(checkpoints, tmp_path, tokenizer_dir, lambda w: w.pop("transformer.h.1.mlp.c_fc.bias")))


def _unexpected(checkpoints, tmp_path, tokenizer_dir, monkeypatch) -> str:
    def add(weights):
        weights["transformer.h.0.attn.c_attn.scale"] = np.ones(3, np.float32)
    return str(_edited(checkpoints, tmp_path, tokenizer_dir, add))


def _misshaped(checkpoints, tmp_path, tokenizer_dir, monkeypatch) -> str:
    def cut(weights):
        weights["transformer.ln_f.weight"] = weights["transformer.ln_f.weight"][:-1]
    return str(_edited(checkpoints, tmp_path, tokenizer_dir, cut))


def _untied(checkpoints, tmp_path, tokenizer_dir, monkeypatch) -> str:
    def untie(weights):
        weights["lm_head.weight"] = weights["transformer.wte.weight"] + 0.5
    return str(_edited(checkpoints, tmp_path, tokenizer_dir, untie))


def _no_config(checkpoints, tmp_path, tokenizer_dir, monkeypatch) -> str:
    folder = tmp_path / "no-config"
    shutil.copytree(checkpoints["save_pretrained"], folder)
    (folder / "config.json").unlink()
    return str(folder)


def _no_folder(checkpoints, tmp_path, tokenizer_dir, monkeypatch) -> str:
    return str(tmp_path / "no-such-folder")


def _uncached(checkpoints, tmp_path, tokenizer_dir, monkeypatch) -> str:
    _offline_hub(monkeypatch, tmp_path / "empty-cache")
    return "gpt2"


#: case: (make the argument, whether it reaches the learner's functions, what the one line must name).
BROKEN = {
    "truncated model.safetensors": (_truncated, False, ["model.safetensors", "truncated"]),
    "a missing weight": (_missing, True, ["h.1.mlp.c_fc.bias"]),
    "an unexpected weight": (_unexpected, True, ["h.0.attn.c_attn.scale"]),
    "a mis-shaped weight": (_misshaped, True, ["ln_f.weight", "[63]", "[64]"]),
    "an untied lm_head": (_untied, False, ["lm_head.weight", "ties"]),
    "no config.json": (_no_config, False, ["config.json", "no-config"]),
    "no such folder": (_no_folder, False, ["no-such-folder"]),
    "a Hub id not in the cache, the Hub out of reach": (_uncached, False, ["'gpt2'", "cache", "hf download gpt2"]),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_checkpoint_fails_clearly(step, case, checkpoints, tokenizer_dir, tmp_path, monkeypatch):
    """a broken checkpoint raises CheckpointError with one line that names the problem"""
    make, needs_todos, named = BROKEN[case]
    if needs_todos:
        _ready(step)
    model = make(checkpoints, tmp_path, tokenizer_dir, monkeypatch)
    load, error_class = attribute(step, "load_pretrained"), attribute(step, "CheckpointError")
    started = time.perf_counter()
    try:
        load(model)
    except error_class as error:
        message = str(error)
    except Exception as error:  # noqa: BLE001 - the learner's line, explained
        fail(f"load_pretrained on {case} raised {explain_exception(error, step.__file__)}; expected a CheckpointError "
             f"naming {', '.join(named)}")
    else:
        fail(f"load_pretrained accepted {case} — keep the given checks in {shown(step.__file__)}")
    seconds = time.perf_counter() - started
    if "\n" in message.strip():
        fail(f"the CheckpointError for {case} is {message.count(chr(10)) + 1} lines; one line is what a user reads")
    for name in named:
        if name not in message:
            fail(f"the CheckpointError for {case} does not name {name!r}: {message}")
    if seconds > 10:
        fail(f"load_pretrained took {seconds:.0f} s to give up on {case}; it should fail within seconds")
    print(f"{case} ({seconds:.2f} s): {message}")


# --- GPT-2 itself, when its weights are on this machine ----------------------------------


def _cached_gpt2() -> str | None:
    """The Hub id under which GPT-2's files are in the local cache, or None."""
    from huggingface_hub import try_to_load_from_cache

    def cached(repo, name):
        return isinstance(try_to_load_from_cache(repo, name), str)

    for repo in ("openai-community/gpt2", "gpt2"):
        if all(cached(repo, name) for name in ("config.json", *TOKENIZER_FILES)) and (
            cached(repo, "model.safetensors") or cached(repo, "pytorch_model.bin")
        ):
            return repo
    return None


def test_real_gpt2_predicts_like_hugging_face(step, record_property):
    """GPT-2's real weights give Hugging Face's logits and next token"""
    repo = _cached_gpt2()
    if repo is None:
        pytest.skip(HOW_TO_GET_GPT2)
    _ready(step)
    model, tokenizer = call(attribute(step, "from_pretrained"), repo, what=f"from_pretrained({repo!r})")
    folder = _load(step, repo, repr(repo)).folder
    ids = np.array([tokenizer.encode("The capital of France is the city of")], dtype=np.int64)
    got = forward(model, ids)
    reference = transformers.GPT2LMHeadModel.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        expected = reference(torch.from_numpy(ids)).logits.numpy()
    agree, total = _argmax_agreement(got, expected)
    record_property("argmax_agreement", f"{agree}/{total}")
    assert_close(got, expected, f"GPT-2 ({repo}) logits vs Hugging Face")
    mine, theirs = int(got[0, -1].argmax()), int(expected[0, -1].argmax())
    if mine != theirs:
        fail(f"the next token is {tokenizer.decode([mine])!r}, Hugging Face's {tokenizer.decode([theirs])!r}")
    print(f"next token: {tokenizer.decode([mine])!r}; argmax agrees at {agree} of {total} positions")
