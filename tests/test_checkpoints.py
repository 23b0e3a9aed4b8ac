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
import shutil
import time

import numpy as np
import pytest

from checkpoint_folders import (  # noqa: F401 - fixtures
    TEXT, TOKENIZER_FILES, checkpoints, offline_hub, reference, saved_weights, tokenizer_dir, write,
)
from course.checkpoints import CheckpointError, find
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
    "an unexpected weight": (_unexpected, ["h.0.attn.c_attn.scale"]),
    "a mis-shaped weight": (_misshaped, ["ln_f.weight", "[63]", "[64]"]),
    "an untied lm_head": (_untied, ["lm_head.weight", "ties"]),
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
    from course.weights import random_checkpoint

    folder = random_checkpoint(tmp_path / "random-gpt2", n_layer=1)
    loaded = solution(14).load_pretrained(str(folder))
    config, state = loaded.config, loaded.state
    assert (config.n_layer, config.n_embd, config.vocab_size) == (1, 768, 50257), config
    assert abs(float(state["transformer.wte.weight"].std()) - 0.02) < 1e-3, "matrices ~ N(0, 0.02²)"
    assert np.all(state["transformer.h.0.ln_1.weight"] == 1) and not state["transformer.h.0.attn.c_attn.bias"].any()
    assert state["transformer.h.0.attn.c_attn.weight"].shape == (2304, 768), "Conv1D weights come back [out, in]"


#: A Llama config.json edit -> the course's refusal (step 23's loader reads config.json through config_of("llama")).
LLAMA_REFUSALS = {
    "a GPT-2 checkpoint": ({"model_type": "gpt2"}, "describes a 'gpt2' model; this loader builds the course's Llama "
                           "(model_type 'llama'); the course loads GPT-2 checkpoints in step 14"),
    "a Mistral checkpoint": ({"model_type": "mistral"}, "describes a 'mistral' model; this loader builds the course's "
                             "Llama (model_type 'llama')"),
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
    (tmp_path / "config.json").write_text(json.dumps(values))
    for name in ("model.safetensors", "tokenizer.json"):  # found, never read: config.json is refused first
        (tmp_path / name).write_bytes(b"")
    with pytest.raises(CheckpointError) as refused:
        find(str(tmp_path)).config_of("llama")
    assert says in str(refused.value), str(refused.value)


def test_a_llama_config_is_read_as_it_is(tmp_path):
    """SmolLM2's published config.json and what transformers 5 writes both pass config_of("llama") unchanged"""
    from reference import LLAMA_SMALL, llama_hf_config
    from test_step_23_llama_pretrained import SMOLLM2_CONFIG_JSON

    for values in (SMOLLM2_CONFIG_JSON, llama_hf_config(**LLAMA_SMALL).to_dict()):
        (tmp_path / "config.json").write_text(json.dumps(values))
        for name in ("model.safetensors", "tokenizer.json"):
            (tmp_path / name).write_bytes(b"")
        assert find(str(tmp_path)).config_of("llama") == json.loads(json.dumps(values))


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


def _gpt2_config_folder(tmp_path, values) -> str:
    (tmp_path / "config.json").write_text(json.dumps(values))
    for name in ("model.safetensors", "tokenizer.json"):  # found, never read: config.json is refused first
        (tmp_path / name).write_bytes(b"")
    return str(tmp_path)


@pytest.mark.parametrize("case", list(GPT2_REFUSALS))
def test_a_gpt2_config_the_course_does_not_compute_is_refused(case, tmp_path):
    """a GPT-2 config.json asking for what the course's GPT-2 does not compute (the exact GELU, an untied head,
    another family) is refused, naming the setting and its value"""
    from reference import SMALL, hf_config

    edit, says = GPT2_REFUSALS[case]
    with pytest.raises(CheckpointError) as refused:
        find(_gpt2_config_folder(tmp_path, hf_config(**SMALL).to_dict() | edit)).config
    assert says in str(refused.value) and "\n" not in str(refused.value), str(refused.value)


@pytest.mark.parametrize("edit", [{"activation_function": "gelu_pytorch_tanh"}, {"activation_function": None},
                                  {"tie_word_embeddings": None, "scale_attn_weights": None}, {"model_type": None}])
def test_a_gpt2_config_the_course_computes_is_read(edit, tmp_path):
    """a GPT-2 config.json that the course computes is read as it is: the tanh GELU under either name, and
    a setting left out (None here: the key removed) taken as GPT-2's default"""
    from reference import SMALL, hf_config

    values = hf_config(**SMALL).to_dict() | edit
    values = {key: value for key, value in values.items() if value is not None}
    assert find(_gpt2_config_folder(tmp_path, values)).config == json.loads(json.dumps(values))


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
    huggingface_hub downloads them (HEAD, then GET, of /<repo>/resolve/main/<name>), and an empty cache."""
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
            self.send_response(200)
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
                      ["'someone/nothing' on the Hub lacks a file a GPT-2 checkpoint needs", "vocab.json"]),
    "no weights": (("config.json", *TOKENIZER_FILES), ["'someone/nothing' on the Hub lacks a file", "pytorch_model.bin"]),
}


@pytest.mark.parametrize("case", list(HUB_REFUSALS))
def test_a_hub_id_that_cannot_be_downloaded(case, checkpoints, local_hub):
    """a Hub id the Hub does not have, or whose repository lacks a file, is refused in one line that says so"""
    names, says = HUB_REFUSALS[case]
    if names is not None:
        local_hub["someone/nothing"] = _files(checkpoints["save_pretrained"], *names)
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
