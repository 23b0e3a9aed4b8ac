"""The course's checkpoint loader (``course/checkpoints.py``), through step 14's ``load_pretrained``.

Finding, reading and vetting a checkpoint is the course's code, not a TODO, so it
is checked here rather than in ``pixi run s14``. Each broken checkpoint (truncated,
a missing, unexpected or mis-shaped weight, an untied head, no config.json, no
folder, a vocabulary larger than ``vocab_size``) and an uncached Hub id without a
network must raise ``CheckpointError`` with one line that names the problem,
within seconds. The Hub is never contacted: an uncached id meets a closed local
port (``HF_ENDPOINT``), the way a machine without a network does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from checkpoint_folders import (  # noqa: F401 - fixtures
    TEXT, TOKENIZER_FILES, checkpoints, offline_hub, reference, saved_weights, tokenizer_dir, write,
)
from course.checkpoints import CheckpointError, find
from course.outline import ROOT
from harness import solution

pytestmark = pytest.mark.course


def _edited(checkpoints, tmp_path, tokenizer_dir, edit) -> Path:
    weights = saved_weights(checkpoints)
    edit(weights)
    return write(tmp_path / "edited", weights, checkpoints["save_pretrained"], tokenizer_dir)


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
    offline_hub(monkeypatch, tmp_path / "empty-cache")
    return "gpt2"


def _untied_of_another_shape(checkpoints, tmp_path, tokenizer_dir, monkeypatch) -> str:
    def untie(weights):
        weights["lm_head.weight"] = np.zeros((301, 64), np.float32)
    return str(_edited(checkpoints, tmp_path, tokenizer_dir, untie))


def _untied_original_layout(checkpoints, tmp_path, tokenizer_dir, monkeypatch) -> str:
    from safetensors.numpy import load_file

    weights = load_file(checkpoints["original gpt2 layout"] / "model.safetensors")  # wte.weight, no transformer.
    weights["lm_head.weight"] = weights["wte.weight"] + 0.5
    return str(write(tmp_path / "edited", weights, checkpoints["save_pretrained"], tokenizer_dir))


def _too_many_tokens(checkpoints, tmp_path, tokenizer_dir, monkeypatch) -> str:
    folder = tmp_path / "big-vocab"
    shutil.copytree(checkpoints["save_pretrained"], folder)
    vocab = json.loads((folder / "vocab.json").read_text())
    vocab |= {f"extra{i}": len(vocab) + i for i in range(5)}
    (folder / "vocab.json").write_text(json.dumps(vocab))
    return str(folder)


#: case: (make the argument, what the one line must name).
BROKEN = {
    "truncated model.safetensors": (_truncated, ["model.safetensors", "truncated"]),
    "a missing weight": (_missing, ["h.1.mlp.c_fc.bias"]),
    "an unexpected weight": (_unexpected, ["edited/model.safetensors", "h.0.attn.c_attn.scale", "shape [3]",
                                           "config.json: n_layer=2, n_embd=64, vocab_size=300, n_positions=32"]),
    "a mis-shaped weight": (_misshaped, ["edited/model.safetensors", "ln_f.weight", "[63]", "[64]",
                                         "config.json: n_layer=2, n_embd=64, vocab_size=300, n_positions=32"]),
    "an untied lm_head": (_untied, ["lm_head.weight", "max |Δ| 0.5", "ties"]),
    "an untied lm_head of another shape": (_untied_of_another_shape, ["lm_head.weight", "shape [301, 64] vs [300, 64]"]),
    "an untied lm_head, original gpt2 layout": (_untied_original_layout, ["lm_head.weight", "max |Δ| 0.5"]),
    "no config.json": (_no_config, ["config.json", "no-config"]),
    "no such folder": (_no_folder, ["no-such-folder"]),
    "a vocab.json larger than vocab_size": (_too_many_tokens, ["big-vocab", "305 tokens", "vocab_size of 300"]),
    "a Hub id not in the cache, the Hub out of reach": (_uncached, ["'gpt2'", "cache", "Connection refused",
                                                                   "hf download gpt2 config.json model.safetensors "
                                                                   "vocab.json merges.txt"]),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_checkpoint_fails_clearly(case, checkpoints, tokenizer_dir, tmp_path, monkeypatch):
    """a broken checkpoint raises CheckpointError with one line that names the problem, within seconds"""
    make, named = BROKEN[case]
    model = make(checkpoints, tmp_path, tokenizer_dir, monkeypatch)
    started = time.perf_counter()
    with pytest.raises(CheckpointError) as raised:
        solution(14).load_pretrained(model)
    seconds, message = time.perf_counter() - started, str(raised.value)
    assert "\n" not in message.strip(), f"the CheckpointError for {case} is not one line: {message}"
    for name in named:
        assert name in message, f"the CheckpointError for {case} does not name {name!r}: {message}"
    assert seconds <= 10, f"load_pretrained took {seconds:.0f} s to give up on {case}; it should fail within seconds"
    print(f"{case} ({seconds:.2f} s): {message}")


def test_a_good_folder_is_found_as_it_is(checkpoints):
    """find(folder) reads a folder in place, config.json parsed, and picks model.safetensors before the .bin"""
    for layout, weights in (("save_pretrained", "model.safetensors"), ("pytorch_model.bin", "pytorch_model.bin")):
        found = find(str(checkpoints[layout]))
        assert found.folder == checkpoints[layout] and found.weights_file.name == weights, found
        assert found.config["n_embd"] == 64 and found.config["model_type"] == "gpt2", found.config


#: A folder's files -> what find's one line says it lacks (find reads none of them: empty files will do).
INCOMPLETE_FOLDERS = {
    "an empty folder": ((), "has no config.json, no model.safetensors or pytorch_model.bin, no vocab.json, "
                            "no merges.txt;"),
    "no weights": (("config.json", *TOKENIZER_FILES), "has no model.safetensors or pytorch_model.bin;"),
    "a sharded checkpoint": (("config.json", *TOKENIZER_FILES, "model.safetensors.index.json",
                              "model-00001-of-00002.safetensors"), "has no model.safetensors (a sharded checkpoint"),
    "no merges.txt": (("config.json", "model.safetensors", "vocab.json"), "has no merges.txt;"),
    "tokenizer.json, no config.json": (("model.safetensors", "tokenizer.json"), "has no config.json;"),
    "tokenizer.json, no weights": (("config.json", "tokenizer.json"), "has no model.safetensors or pytorch_model.bin;"),
}


@pytest.mark.parametrize("case", list(INCOMPLETE_FOLDERS))
def test_a_folder_without_a_needed_file_is_refused(case, tmp_path):
    """a folder that lacks a needed file (or holds a sharded checkpoint) is refused in one line that names the
    folder and every file it lacks"""
    names, says = INCOMPLETE_FOLDERS[case]
    folder = tmp_path / "incomplete"
    folder.mkdir()
    for name in names:
        (folder / name).write_bytes(b"")
    with pytest.raises(CheckpointError) as refused:
        find(str(folder))
    assert f"{folder} {says}" in str(refused.value), str(refused.value)


@pytest.mark.parametrize("name", ["./no-such-folder", "/no-such-folder", "~/no-such-folder", "a/b/c", "a\\b"])
def test_a_path_that_is_no_folder_is_refused(name):
    """a path (./, /, ~/, two slashes, a backslash) where there is no folder is refused as a folder, not looked
    up on the Hub"""
    with pytest.raises(CheckpointError) as refused:
        find(name)
    assert f"there is no folder {name};" in str(refused.value), str(refused.value)


def test_a_file_or_a_bad_id_is_refused(tmp_path):
    """a file where a folder should be, and a name that is neither a folder nor a Hub id, are refused by name"""
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(CheckpointError) as refused:
        find(str(tmp_path / "config.json"))
    assert f"{tmp_path / 'config.json'} is a file;" in str(refused.value), str(refused.value)
    with pytest.raises(CheckpointError) as refused:
        find("not an id!")
    message = str(refused.value)
    assert "'not an id!' is neither a folder nor a Hugging Face model id (Repo id must" in message, message
    assert message.endswith(")") and "not an id!'." not in message, "only the rule it breaks, not its repetition"


def test_the_course_models_are_found_by_name():
    """--model course and --model course-llama name the course's own folders, not a folder called course/"""
    from course.outline import COURSE_LLAMA, COURSE_MODEL

    for name, folder in (("course", COURSE_MODEL), ("course-llama", COURSE_LLAMA)):
        found = find(name)
        assert (found.folder, found.weights_file) == (folder, folder / "model.safetensors"), found


#: A file of the checkpoint, overwritten with these bytes -> what load_pretrained's one line must say.
UNREADABLE = {
    "config.json not JSON": ("save_pretrained", "config.json", b"{not json",
                             ["config.json cannot be read as JSON", "line 1 column 2"]),
    "config.json a list": ("save_pretrained", "config.json", b"[64]", ["config.json holds a JSON list"]),
    "vocab.json not JSON": ("save_pretrained", "vocab.json", b"", ["Expecting value: line 1 column 1 (char 0)"]),
    "vocab.json a list": ("save_pretrained", "vocab.json", b"[]", ["vocab.json holds a JSON list"]),
    "an empty pytorch_model.bin": ("pytorch_model.bin", "pytorch_model.bin", b"",
                                   ["pytorch_model.bin cannot be read (EOFError)", "delete it"]),
}


@pytest.mark.parametrize("case", list(UNREADABLE))
def test_a_file_that_cannot_be_read_is_refused(case, checkpoints, tmp_path):
    """a config.json, vocab.json or weights file that is not what it should be is refused in one line that
    names the file (or its folder) and what its reader found"""
    layout, name, data, says = UNREADABLE[case]
    folder = tmp_path / "unreadable"
    shutil.copytree(checkpoints[layout], folder)
    (folder / name).write_bytes(data)
    with pytest.raises(CheckpointError) as refused:
        solution(14).load_pretrained(str(folder))
    message = str(refused.value)
    assert str(folder) in message and "\n" not in message and all(text in message for text in says), message


def test_a_pickle_that_is_more_than_tensors_is_refused(checkpoints, tmp_path):
    """a pytorch_model.bin that holds other objects than tensors (a pickle can run code as it loads) is refused,
    never unpickled"""
    import datetime

    import torch

    folder = tmp_path / "pickle"
    shutil.copytree(checkpoints["pytorch_model.bin"], folder)
    state = torch.load(folder / "pytorch_model.bin", weights_only=True)
    torch.save(state | {"saved_on": datetime.date(2019, 2, 14)}, folder / "pytorch_model.bin")
    with pytest.raises(CheckpointError) as refused:
        find(str(folder)).read_weights()
    assert "pytorch_model.bin cannot be read (" in str(refused.value) and "datetime" in str(refused.value)


def test_a_bin_saved_on_a_gpu_is_read_on_the_cpu(checkpoints, tmp_path, monkeypatch):
    """a pytorch_model.bin saved from a GPU (its tensors tagged cuda:0) is read to its values on a machine without
    one"""
    import torch

    folder = tmp_path / "saved-on-a-gpu"
    shutil.copytree(checkpoints["pytorch_model.bin"], folder)
    state = torch.load(folder / "pytorch_model.bin", weights_only=True)
    with monkeypatch.context() as saving:  # what torch.save writes for a tensor in a GPU's memory
        saving.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        torch.save(state, folder / "pytorch_model.bin")
    read = find(str(folder)).read_weights()
    assert sorted(read) == sorted(state), sorted(set(read) ^ set(state))
    assert all(np.array_equal(read[key], value.float().numpy()) for key, value in state.items())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_weights_are_read(dtype, checkpoints, tmp_path):
    """a model.safetensors in float16, or in bfloat16 (which NumPy has no type for: read as float32), is read to
    the values it stores"""
    import torch
    from safetensors.torch import save_file

    folder = tmp_path / dtype
    shutil.copytree(checkpoints["save_pretrained"], folder)
    stored = {key: torch.from_numpy(value).to(getattr(torch, dtype)) for key, value in saved_weights(checkpoints).items()}
    save_file(stored, folder / "model.safetensors")
    read = find(str(folder)).read_weights()
    wte = read["transformer.wte.weight"]
    assert wte.dtype == (np.float16 if dtype == "float16" else np.float32), wte.dtype
    assert np.array_equal(wte.astype(np.float32), stored["transformer.wte.weight"].float().numpy())


def test_a_folder_saved_by_transformers_5_loads(checkpoints, tokenizer_dir, tmp_path):
    """a folder from model.save_pretrained and tokenizer.save_pretrained (tokenizer.json, no vocab.json or
    merges.txt) loads, and step 12's tokenizer reads it to Hugging Face's ids"""
    from transformers import GPT2TokenizerFast

    folder = tmp_path / "transformers-5"
    shutil.copytree(checkpoints["save_pretrained"], folder)
    hf = GPT2TokenizerFast.from_pretrained(tokenizer_dir)  # (5.23 ignores vocab_file= and merges_file=)
    hf.save_pretrained(folder)
    for name in TOKENIZER_FILES:  # whatever this transformers writes besides tokenizer.json: test that alone
        (folder / name).unlink(missing_ok=True)
    assert (folder / "tokenizer.json").is_file(), sorted(path.name for path in folder.iterdir())
    loaded = solution(14).load_pretrained(str(folder))
    assert loaded.folder == folder and loaded.config.vocab_size == 300
    tokenizer = solution(12).Tokenizer.from_dir(folder)
    text = f"{TEXT} <|endoftext|> It's naïve: 1,234 dogs!\n  fox"
    assert tokenizer.encode(text) == hf.encode(text), (tokenizer.encode(text), hf.encode(text))


def test_random_weights_take_the_same_road(tmp_path):
    """bench's random checkpoint (GPT-2 small's sizes, GPT-2's initialization) loads through step 14's
    load_pretrained with every check, as a real checkpoint does"""
    from course.weights import random_checkpoint, random_weights

    folder = random_checkpoint(tmp_path / "random-gpt2", n_layer=1)  # seed 0, bench's
    loaded = solution(14).load_pretrained(str(folder))
    config, state = loaded.config, loaded.state
    assert (config.n_layer, config.n_embd, config.vocab_size) == (1, 768, 50257), config
    assert abs(float(state["transformer.wte.weight"].std()) - 0.02) < 1e-3, "matrices ~ N(0, 0.02²)"
    seeded = random_weights({"transformer.wte.weight": (50257, 768)}, seed=0, std=0.02)["transformer.wte.weight"]
    assert np.array_equal(state["transformer.wte.weight"], seeded), "wte is not the first draw of seed 0"
    assert np.all(state["transformer.h.0.ln_1.weight"] == 1) and not state["transformer.h.0.attn.c_attn.bias"].any()
    assert state["transformer.h.0.attn.c_attn.weight"].shape == (2304, 768), "Conv1D weights come back [out, in]"


def _config_folder(tmp_path, values) -> str:
    """A folder with ``values`` as its config.json, and the weights and tokenizer files find needs, empty."""
    (tmp_path / "config.json").write_text(json.dumps(values))
    for name in ("model.safetensors", "tokenizer.json"):  # found, never read: config.json is refused first
        (tmp_path / name).write_bytes(b"")
    return str(tmp_path)


#: A Llama config.json edit -> the course's refusal (step 23's loader reads config.json through config_of("llama")).
LLAMA_REFUSALS = {
    "a GPT-2 checkpoint": ({"model_type": "gpt2"}, "describes a 'gpt2' model; this loader builds the course's Llama "
                           "(model_type 'llama'); the course loads GPT-2 checkpoints in step 14"),
    "a Mistral checkpoint": ({"model_type": "mistral"}, "describes a 'mistral' model; this loader builds the course's "
                             "Llama (model_type 'llama')"),
    "no model_type": ({"model_type": None}, "describes a None model; this loader builds the course's Llama "
                      "(model_type 'llama')"),
    "Llama 3's scaled RoPE": ({"rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 32.0}},
                              "sets rope_parameters.rope_type='llama3' (RoPE with scaled frequencies"),
    "scaled RoPE, transformers 4": ({"rope_scaling": {"type": "linear", "factor": 2.0}},
                                    "sets rope_scaling={'type': 'linear', 'factor': 2.0}; the course's Llama computes "
                                    "rope_scaling=None only"),
    "GELU": ({"hidden_act": "gelu"}, "sets hidden_act='gelu'; the course's Llama computes hidden_act='silu' only"),
    "attention biases (Qwen2's)": ({"attention_bias": True}, "sets attention_bias=True; the course's Llama computes "
                                   "attention_bias=False only"),
    "interleaved RoPE pairs": ({"rope_interleaved": True}, "sets rope_interleaved=True"),
    "a head_dim of its own": ({"head_dim": 32}, "sets head_dim=32, but hidden_size=64 / num_attention_heads=4 is 16"),
}


@pytest.mark.parametrize("case", list(LLAMA_REFUSALS))
def test_a_llama_config_the_course_does_not_compute_is_refused(case, tmp_path):
    """a Llama config.json asking for what Part II's model does not compute is refused, naming the setting"""
    from reference import LLAMA_SMALL, llama_hf_config

    edit, says = LLAMA_REFUSALS[case]
    values = llama_hf_config(**LLAMA_SMALL).to_dict() | edit
    values = {key: value for key, value in values.items() if not (key in edit and value is None)}  # None: left out
    with pytest.raises(CheckpointError) as refused:
        find(_config_folder(tmp_path, values)).config_of("llama")
    message = str(refused.value)
    assert f"{tmp_path / 'config.json'} {says}" in message, message
    if case in ("a Mistral checkpoint", "no model_type"):  # a family the course does not build: no step to name
        assert message.endswith(says), message


def test_a_llama_config_is_read_as_it_is(tmp_path):
    """SmolLM2's published config.json and what transformers 5 writes both pass config_of("llama") unchanged"""
    from reference import LLAMA_SMALL, llama_hf_config
    from test_step_23_llama_pretrained import SMOLLM2_CONFIG_JSON

    for values in (SMOLLM2_CONFIG_JSON, llama_hf_config(**LLAMA_SMALL).to_dict()):
        assert find(_config_folder(tmp_path, values)).config_of("llama") == json.loads(json.dumps(values))


#: A GPT-2 config.json edit -> the course's refusal (step 14's loader reads config.json through config_of("gpt2")).
GPT2_REFUSALS = {
    "the exact GELU": ({"activation_function": "gelu"}, "sets activation_function='gelu', the exact GELU (with erf); "
                       "the course's GPT-2 computes its tanh approximation only"),
    "ReLU": ({"activation_function": "relu"}, "sets activation_function='relu'; the course's GPT-2 computes "
             "activation_function='gelu_new' only"),
    "an untied head": ({"tie_word_embeddings": False}, "sets tie_word_embeddings=False; the course's GPT-2 computes "
                       "tie_word_embeddings=True only"),
    "unscaled attention scores": ({"scale_attn_weights": False}, "sets scale_attn_weights=False; the course's GPT-2 "
                                  "computes scale_attn_weights=True only"),
    "scores scaled by layer": ({"scale_attn_by_inverse_layer_idx": True}, "sets scale_attn_by_inverse_layer_idx=True; "
                               "the course's GPT-2 computes scale_attn_by_inverse_layer_idx=False only"),
    "a Llama checkpoint": ({"model_type": "llama"}, "describes a 'llama' model; this loader builds the course's GPT-2 "
                           "(model_type 'gpt2'); the course loads Llama checkpoints in step 23"),
    "another family": ({"model_type": "bert"}, "describes a 'bert' model; this loader builds the course's GPT-2 "
                       "(model_type 'gpt2')"),
}


@pytest.mark.parametrize("case", list(GPT2_REFUSALS))
def test_a_gpt2_config_the_course_does_not_compute_is_refused(case, tmp_path):
    """a GPT-2 config.json asking for what the course's GPT-2 does not compute (the exact GELU, an untied head,
    another family) is refused, naming the setting and its value"""
    from reference import SMALL, hf_config

    edit, says = GPT2_REFUSALS[case]
    with pytest.raises(CheckpointError) as refused:
        find(_config_folder(tmp_path, hf_config(**SMALL).to_dict() | edit)).config
    assert says in str(refused.value) and "\n" not in str(refused.value), str(refused.value)


@pytest.mark.parametrize("edit", [{"activation_function": "gelu_pytorch_tanh"}, {"activation_function": None},
                                  {"tie_word_embeddings": None, "scale_attn_weights": None}, {"model_type": None}])
def test_a_gpt2_config_the_course_computes_is_read(edit, tmp_path):
    """a GPT-2 config.json that the course computes is read as it is: the tanh GELU under either name, and
    a setting left out (None here: the key removed) taken as GPT-2's default"""
    from reference import SMALL, hf_config

    values = hf_config(**SMALL).to_dict() | edit
    values = {key: value for key, value in values.items() if value is not None}
    assert find(_config_folder(tmp_path, values)).config == json.loads(json.dumps(values))


def test_a_tokenizer_json_with_added_tokens(checkpoints, tokenizer_dir, tmp_path):
    """tokenizer.json's added tokens are part of the vocabulary: a fine-tuned model's pad token beyond
    vocab_size is refused by load_pretrained, and step 12's tokenizer decodes it as Hugging Face does"""
    from transformers import GPT2TokenizerFast

    folder = tmp_path / "added-token"
    shutil.copytree(checkpoints["save_pretrained"], folder)
    hf = GPT2TokenizerFast.from_pretrained(tokenizer_dir)
    hf.add_special_tokens({"pad_token": "<|pad|>"})
    hf.save_pretrained(folder)
    for name in TOKENIZER_FILES:
        (folder / name).unlink(missing_ok=True)
    pad = hf.convert_tokens_to_ids("<|pad|>")
    assert pad == 300 and "<|pad|>" not in json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]
    with pytest.raises(CheckpointError) as refused:
        solution(14).load_pretrained(str(folder))
    assert "has 301 tokens, more than the model's vocab_size of 300" in str(refused.value), str(refused.value)
    tokenizer = solution(12).Tokenizer.from_dir(folder)
    assert tokenizer.decode([5, pad, 7]) == hf.decode([5, pad, 7]), (tokenizer.decode([5, pad, 7]), hf.decode([5, pad, 7]))


@pytest.fixture
def local_hub(monkeypatch, tmp_path):
    """A Hub on a local port, serving the files put in the dict it returns ({repo: {name: bytes}}) the way
    huggingface_hub downloads them (HEAD, then GET, of /<repo>/resolve/main/<name>), and an empty cache.
    A file given as an int answers its GET with that HTTP status; one given as None, without the commit
    and ETag headers that huggingface_hub needs."""
    import hashlib
    import http.server
    import threading

    from huggingface_hub import constants

    repos: dict[str, dict[str, bytes]] = {}

    class Hub(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def answer(self, body: bool):
            repo, _, name = self.path.lstrip("/").partition("/resolve/main/")
            if repo not in repos:
                self.send_response(404)
                self.send_header("X-Error-Code", "RepoNotFound")
                self.end_headers()
                return
            if name not in repos[repo]:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.end_headers()
                return
            data = repos[repo][name]
            if isinstance(data, int) and body:
                self.send_response(data)
                self.end_headers()
                return
            data = data if isinstance(data, bytes) else b"?"  # (an empty file would be written without a GET)
            self.send_response(200)
            if repos[repo][name] is not None:
                self.send_header("X-Repo-Commit", "0123456789abcdef0123456789abcdef01234567")
                self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

        def do_HEAD(self):
            self.answer(body=False)

        def do_GET(self):
            self.answer(body=True)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    offline_hub(monkeypatch, tmp_path / "hub-cache", endpoint)  # the cache, and this server for the Hub
    yield repos
    server.shutdown()


def _files(folder, *names) -> dict[str, bytes]:
    return {name: (folder / name).read_bytes() for name in names}


def test_a_hub_id_is_downloaded_once(checkpoints, local_hub):
    """an uncached Hub id is downloaded (config.json, the tokenizer files, model.safetensors, or else
    pytorch_model.bin) into the cache and loads; the next find takes it from the cache, the Hub gone"""
    local_hub["someone/tiny-gpt2"] = _files(checkpoints["save_pretrained"], "config.json", "model.safetensors",
                                           *TOKENIZER_FILES)
    local_hub["someone/tiny-gpt2-bin"] = _files(checkpoints["pytorch_model.bin"], "config.json", "pytorch_model.bin",
                                               *TOKENIZER_FILES)
    for repo, weights in (("someone/tiny-gpt2", "model.safetensors"), ("someone/tiny-gpt2-bin", "pytorch_model.bin")):
        loaded = solution(14).load_pretrained(repo)
        assert loaded.config.vocab_size == 300 and loaded.folder.name == "0123456789abcdef0123456789abcdef01234567"
        assert sorted(path.name for path in loaded.folder.iterdir()) == sorted(["config.json", weights,
                                                                                *TOKENIZER_FILES]), loaded.folder
        local_hub.pop(repo)
        again = find(repo)
        assert (again.folder, again.weights_file.name) == (loaded.folder, weights), again


#: A Hub repository's files -> what the one line must say about it.
HUB_REFUSALS = {
    "no such model": (None, ["there is no model 'someone/nothing' on the Hugging Face Hub", "gpt2, gpt2-medium"]),
    "no vocab.json": (("config.json", "model.safetensors", "merges.txt"),
                      ["'someone/nothing' on the Hub lacks a file a GPT-2 checkpoint needs", "someone/nothing/resolve/main/vocab.json"]),
    "no weights": (("config.json", *TOKENIZER_FILES), ["'someone/nothing' on the Hub lacks a file", "pytorch_model.bin"]),
    "merges.txt forbidden": ({"merges.txt": 403}, ["downloading 'someone/nothing' failed: 403",
                                                  "hf download someone/nothing config.json"]),
    "merges.txt without metadata": ({"merges.txt": None}, ["downloading 'someone/nothing' failed",
                                                          "hf download someone/nothing config.json"]),
}


@pytest.mark.parametrize("case", list(HUB_REFUSALS))
def test_a_hub_id_that_cannot_be_downloaded(case, checkpoints, local_hub):
    """a Hub id the Hub does not have, or whose repository lacks a file, is refused in one line that says so"""
    names, says = HUB_REFUSALS[case]
    if isinstance(names, dict):  # every file, these ones served wrong
        names = _files(checkpoints["save_pretrained"], "config.json", "model.safetensors", *TOKENIZER_FILES) | names
    if names is not None:
        local_hub["someone/nothing"] = names if isinstance(names, dict) else _files(checkpoints["save_pretrained"], *names)
    with pytest.raises(CheckpointError) as refused:
        find("someone/nothing")
    message = str(refused.value)
    assert "\n" not in message and all(text in message for text in says), message


def test_main_without_model_takes_gpt2_or_says_why_not(checkpoints, local_hub, tmp_path, monkeypatch):
    """without --model, main runs GPT-2 small when it is cached or the Hub answers, and otherwise the course's
    own model, with one line that says why (the Hub out of reach, or HF_HUB_OFFLINE)"""
    from checkpoint_folders import fake_hub
    from course.checkpoints import COURSE, default_model

    assert default_model() == ("gpt2", None), "the Hub answers: GPT-2 small is downloaded"
    offline_hub(monkeypatch, tmp_path / "empty-cache")
    model, why = default_model()
    assert model == COURSE and "GPT-2 small is not in the Hugging Face cache and the Hub cannot be reached" in why, why
    assert "127.0.0.1" in why and "--model course" in why, why
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert "(HF_HUB_OFFLINE is set)" in default_model()[1], default_model()
    fake_hub(tmp_path, "openai-community/gpt2", checkpoints["save_pretrained"])
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert default_model() == ("gpt2", None), "GPT-2 small in the cache as openai-community/gpt2"


#: A repository in the cache, the id asked for, the files it lacks there -> found in the cache (else not).
CACHED = {
    "gpt2 as openai-community/gpt2": ("gpt2", "openai-community/gpt2", (), True),
    "openai-community/gpt2 as gpt2": ("openai-community/gpt2", "gpt2", (), True),
    "tokenizer.json instead of vocab.json and merges.txt": ("someone/tiny", "someone/tiny", TOKENIZER_FILES, True),
    "no config.json": ("someone/tiny", "someone/tiny", ("config.json",), False),
    "no weights": ("someone/tiny", "someone/tiny", ("model.safetensors",), False),
    "no merges.txt nor tokenizer.json": ("someone/tiny", "someone/tiny", ("merges.txt", "tokenizer.json"), False),
    "no tokenizer at all": ("someone/tiny", "someone/tiny", (*TOKENIZER_FILES, "tokenizer.json"), False),
}


@pytest.mark.parametrize("case", list(CACHED))
def test_a_hub_id_is_taken_from_the_cache_when_it_is_complete(case, checkpoints, tokenizer_dir, tmp_path, monkeypatch):
    """a Hub id is read from the Hugging Face cache (under either of GPT-2's names) when every needed file is
    there, the tokenizer as vocab.json and merges.txt or as tokenizer.json; else the Hub is asked (here: out of
    reach, and find says so)"""
    from checkpoint_folders import fake_hub
    from transformers import GPT2TokenizerFast

    cached, asked, lacks, found = CACHED[case]
    snapshot = fake_hub(tmp_path, cached, checkpoints["save_pretrained"])
    GPT2TokenizerFast.from_pretrained(tokenizer_dir).backend_tokenizer.save(str(snapshot / "tokenizer.json"))
    for name in lacks:
        (snapshot / name).unlink()
    offline_hub(monkeypatch, tmp_path / "hub")
    if found:
        assert find(asked).folder == snapshot, case
    else:
        with pytest.raises(CheckpointError) as refused:
            find(asked)
        assert f"'{asked}' is not a folder here nor in the Hugging Face cache" in str(refused.value), str(refused.value)


def _hanging_up_server() -> str:
    """A local Hub that takes each connection and closes it without an answer; its endpoint."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))

    def hang_up():
        while True:
            connection, _ = server.accept()
            connection.recv(65536)
            connection.close()

    threading.Thread(target=hang_up, daemon=True).start()
    return f"http://127.0.0.1:{server.getsockname()[1]}"


def _hanging_name_lookup(monkeypatch) -> str:
    """A Hub whose name lookup hangs for 8 s (a lookup ignores time-outs), then fails; its endpoint."""
    import socket

    lookup = socket.getaddrinfo

    def hang(host, *args, **kwargs):
        if host != "hub.hangs.invalid":
            return lookup(host, *args, **kwargs)
        time.sleep(8)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", hang)
    return "http://hub.hangs.invalid"


#: How the Hub is out of reach -> its endpoint, and why find and default_model say it cannot be reached.
UNREACHABLE = {
    "a closed port": (lambda monkeypatch: None, "{netloc}: Connection refused"),
    "a server that hangs up": (lambda monkeypatch: _hanging_up_server(), "{netloc}: Remote end closed connection "
                               "without response"),
    "HF_ENDPOINT not a URL": (lambda monkeypatch: "hub.invalid",
                              ": unknown url type: 'hub.invalid/{model}/resolve/main/config.json'"),
    "HF_HUB_OFFLINE": (lambda monkeypatch: None, "HF_HUB_OFFLINE is set"),
    "a name lookup that hangs": (_hanging_name_lookup, "{netloc} did not answer within 5 s"),
}


@pytest.mark.parametrize("case", list(UNREACHABLE))
def test_a_hub_out_of_reach_is_said_with_its_reason(case, tmp_path, monkeypatch):
    """an id that is not cached, the Hub out of reach, is refused within seconds (5 at most) with the cache's
    folder, the reason the Hub gave, and the command that downloads it; main without --model says the same"""
    from huggingface_hub import constants

    from course.checkpoints import COURSE, default_model

    endpoint, why = UNREACHABLE[case]
    offline_hub(monkeypatch, tmp_path / "empty-cache", endpoint(monkeypatch))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", case == "HF_HUB_OFFLINE")
    netloc = constants.ENDPOINT.split("://")[-1]
    for model, where in (("gpt2", "in"), ("someone/tiny", "a folder here nor in")):
        started = time.perf_counter()
        with pytest.raises(CheckpointError) as refused:
            find(model)
        message, seconds = str(refused.value), time.perf_counter() - started
        assert f"'{model}' is not {where} the Hugging Face cache ({tmp_path / 'empty-cache'})" in message, message
        assert f"hf download {model} config.json model.safetensors" in message, message
        assert "(" + why.format(netloc=netloc, model=model) + ")" in message and seconds < 6.5, (seconds, message)
        if case == "a name lookup that hangs":  # 5 s each: once is enough
            return
    model, said = default_model()
    assert model == COURSE and "(" + why.format(netloc=netloc, model="gpt2") + ")" in said, said


def _tokenizer_json(checkpoints, tokenizer_dir, tmp_path, edit):
    """A copy of the checkpoint whose tokenizer is a tokenizer.json alone, edited by ``edit(data)``; and HF's tokenizer."""
    from transformers import GPT2TokenizerFast

    folder = tmp_path / "edited-tokenizer"
    shutil.copytree(checkpoints["save_pretrained"], folder)
    hf = GPT2TokenizerFast.from_pretrained(tokenizer_dir)
    hf.save_pretrained(folder)
    for name in TOKENIZER_FILES:
        (folder / name).unlink(missing_ok=True)
    data = json.loads((folder / "tokenizer.json").read_text())
    edit(data)
    (folder / "tokenizer.json").write_text(json.dumps(data))
    return folder, hf


def test_a_tokenizer_json_of_older_tokenizers_loads(checkpoints, tokenizer_dir, tmp_path):
    """a tokenizer.json as older tokenizers wrote it (merges as "a b" strings, no added_tokens) reads to the
    same ids as Hugging Face's, and loads"""
    def older(data):
        data["model"]["merges"] = [" ".join(merge) for merge in data["model"]["merges"]]
        data.pop("added_tokens")

    folder, hf = _tokenizer_json(checkpoints, tokenizer_dir, tmp_path, older)
    text = f"{TEXT} The lazy dog sleeps."
    assert solution(12).Tokenizer.from_dir(folder).encode(text) == hf.encode(text)
    assert solution(14).load_pretrained(str(folder)).config.vocab_size == 300


@pytest.mark.parametrize("kind", ["WordPiece", "BPE without byte-level pre-tokenizer"])
def test_a_tokenizer_json_that_is_not_gpt2s_is_refused(kind, checkpoints, tokenizer_dir, tmp_path):
    """a tokenizer.json that is not a byte-level BPE (BERT's WordPiece, a BPE over whitespace words) is refused,
    naming what it is"""
    def edit(data):
        if kind == "WordPiece":
            data["model"]["type"] = "WordPiece"
        else:
            data["pre_tokenizer"] = {"type": "Whitespace"}

    folder, _ = _tokenizer_json(checkpoints, tokenizer_dir, tmp_path, edit)
    with pytest.raises(CheckpointError) as refused:
        solution(14).load_pretrained(str(folder))
    found = "WordPiece" if kind == "WordPiece" else "BPE"
    assert f"holds a {found} tokenizer, not GPT-2's byte-level BPE" in str(refused.value), str(refused.value)


def test_the_tokenizer_reads_alike_from_either_format(checkpoints, tokenizer_dir, tmp_path):
    """vocab.json and merges.txt (a blank line at its end, as an editor leaves it), and the tokenizer.json that
    transformers writes of them (alone, or beside a vocab.json without merges.txt), read to the same vocabulary
    and the same merges in the same order"""
    from course.checkpoints import read_tokenizer

    files = tmp_path / "files"
    shutil.copytree(tokenizer_dir, files)
    with open(files / "merges.txt", "a", encoding="utf-8") as merges:
        merges.write("\n")
    alone, _ = _tokenizer_json(checkpoints, tokenizer_dir, tmp_path, lambda data: None)
    beside = tmp_path / "beside"
    shutil.copytree(alone, beside)
    shutil.copy(tokenizer_dir / "vocab.json", beside / "vocab.json")
    vocab, merges = read_tokenizer(files)
    assert len(vocab) == 300 and merges[0] == tuple((tokenizer_dir / "merges.txt").read_text().splitlines()[1].split())
    for folder in (alone, beside):
        assert read_tokenizer(folder) == (vocab, merges), folder


@pytest.mark.parametrize("merge", [["a", "b", "c"], "a b c"])
def test_a_tokenizer_json_with_a_merge_of_three_is_refused(merge, checkpoints, tokenizer_dir, tmp_path):
    """a tokenizer.json with a merge that is not a pair (as a list or as a string) is refused, quoting it"""
    folder, _ = _tokenizer_json(checkpoints, tokenizer_dir, tmp_path, lambda data: data["model"]["merges"].append(merge))
    with pytest.raises(CheckpointError) as refused:
        solution(12).Tokenizer.from_dir(folder)
    assert f"the tokenizer files in {folder} are not GPT-2's format (a merge is ('a', 'b', 'c'))" in str(refused.value)


#: The checkpoint's files read in a child whose locale's text encoding is ASCII, as in a bare container (C, without
#: Python's coercion to UTF-8). Its first line sets the locale, so that its environment stays the parent's: decoded
#: as ASCII, a non-ASCII value there (mutmut's mutant names hold a 'ǁ') would not reach it intact.
READ_IN_A_CHILD = """
import locale
locale.setlocale(locale.LC_ALL, "C")
import json, sys
from course.checkpoints import find, read_tokenizer
found = find(sys.argv[1])
print(json.dumps([locale.getpreferredencoding(False), found.family, found.config["_name_or_path"],
                  *(read_tokenizer(folder) for folder in sys.argv[1:])]))
"""


def test_the_files_are_read_as_utf8_under_an_ascii_locale(checkpoints, tokenizer_dir, tmp_path):
    """config.json, vocab.json, merges.txt and tokenizer.json read as UTF-8 under an ASCII locale too (the C locale,
    without Python's UTF-8 mode, as in a bare container), to what they read to here"""
    from course.checkpoints import read_tokenizer

    folder = tmp_path / "accented"
    shutil.copytree(checkpoints["save_pretrained"], folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8")) | {"_name_or_path": "gpt2-café"}
    (folder / "config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    alone, _ = _tokenizer_json(checkpoints, tokenizer_dir, tmp_path, lambda data: None)
    data = json.loads((alone / "tokenizer.json").read_text(encoding="utf-8"))
    (alone / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")  # Ġ as itself
    child = subprocess.run([sys.executable, "-c", READ_IN_A_CHILD, str(folder), str(alone)], cwd=ROOT,
                           env=os.environ | {"PYTHONUTF8": "0"}, capture_output=True, text=True, encoding="utf-8",
                           timeout=120)
    assert child.returncode == 0, f"reading the checkpoint under the C locale failed:\n{child.stderr[-1500:]}"
    encoding, family, name, *tokenizers = json.loads(child.stdout)
    assert encoding.lower().replace("-", "") not in ("utf8", "utf_8"), f"the child's locale reads {encoding}, not ASCII"
    assert find(str(folder)).config["_name_or_path"] == "gpt2-café"  # here, as the child must read it
    expected = json.loads(json.dumps([read_tokenizer(folder), read_tokenizer(alone)]))  # tuples as JSON lists
    assert (family, name) == ("gpt2", "gpt2-café") and tokenizers == expected, (
        family, name, [len(vocab) for vocab, _ in tokenizers])
