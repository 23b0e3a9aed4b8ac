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
