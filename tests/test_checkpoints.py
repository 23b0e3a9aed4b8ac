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
    "a Hub id not in the cache, the Hub out of reach": (_uncached, ["'gpt2'", "cache", "hf download gpt2"]),
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
