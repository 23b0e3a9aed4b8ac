"""Checkpoint folders written on the spot, and a Hugging Face cache without the Hub, for the
step 14 checks (``test_step_14_pretrained.py``) and the course's loader (``test_checkpoints.py``).

Every checkpoint comes from one seeded small GPT-2 (``SMALL`` with the vocabulary of a
300-token byte-level BPE trained here with ``tokenizers``, so that ``vocab.json`` and
``merges.txt`` fit the model), in three layouts:

* ``save_pretrained``: what ``GPT2LMHeadModel.save_pretrained`` writes
  (``model.safetensors``, keys under ``transformer.``, no ``lm_head.weight``);
* ``original gpt2 layout``: keys without the prefix, as in the ``gpt2`` Hub
  checkpoint, with the ``attn.bias`` / ``attn.masked_bias`` buffers and an
  ``lm_head.weight`` stored as a copy of ``wte``;
* ``pytorch_model.bin``: ``torch.save`` of the state dict and no safetensors file
  (the fallback; ``lm_head.weight`` and ``wte`` share one tensor there).

The test modules import the fixtures by name (``from checkpoint_folders import checkpoints, …``).
"""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from reference import SMALL, hf_config, seeded

END_OF_TEXT = "<|endoftext|>"
TEXT = "Hello world! The quick brown fox jumps over the lazy dog."
TOKENIZER_FILES = ("vocab.json", "merges.txt")


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


def finish(folder: Path, tokenizer_dir: Path, config: Path | None) -> Path:
    """Adds config.json (copied from ``config``) and the tokenizer files to a checkpoint folder."""
    if config is not None:
        shutil.copy(config, folder / "config.json")
    for name in TOKENIZER_FILES:
        shutil.copy(tokenizer_dir / name, folder / name)
    return folder


def write(folder: Path, weights: dict[str, np.ndarray], like: Path, tokenizer_dir: Path) -> Path:
    """A checkpoint folder with these weights (as model.safetensors) and ``like``'s config.json."""
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file({key: np.ascontiguousarray(value) for key, value in weights.items()}, str(folder / "model.safetensors"))
    return finish(folder, tokenizer_dir, like / "config.json")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, reference, tokenizer_dir) -> dict[str, Path]:
    """The three layouts of the same weights, each a complete checkpoint folder."""
    root = tmp_path_factory.mktemp("checkpoints")
    saved = root / "save_pretrained"
    reference.save_pretrained(saved)
    finish(saved, tokenizer_dir, None)

    weights = {key: value.numpy() for key, value in reference.state_dict().items()}
    n, p = reference.config.n_layer, reference.config.n_positions
    old = {key.removeprefix("transformer."): value for key, value in weights.items()}
    old["lm_head.weight"] = old["wte.weight"].copy()
    for i in range(n):  # what older versions of GPT2Attention registered and saved
        old[f"h.{i}.attn.bias"] = np.tril(np.ones((p, p), np.float32))[None, None]
        old[f"h.{i}.attn.masked_bias"] = np.array(-1e4, np.float32)
    original = write(root / "original", old, saved, tokenizer_dir)

    pickled = root / "pytorch_bin"
    pickled.mkdir()
    torch.save(reference.state_dict(), pickled / "pytorch_model.bin")
    finish(pickled, tokenizer_dir, saved / "config.json")
    return {"save_pretrained": saved, "original gpt2 layout": original, "pytorch_model.bin": pickled}


def saved_weights(checkpoints) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(checkpoints["save_pretrained"] / "model.safetensors")


def fake_hub(tmp_path: Path, repo: str, checkpoint: Path) -> Path:
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


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def offline_hub(monkeypatch, cache: Path, endpoint: str | None = None) -> None:
    """Points huggingface_hub at ``cache`` and at ``endpoint`` instead of the Hub: by default a
    closed local port, so that nothing can be downloaded.

    huggingface_hub reads HF_HUB_CACHE and HF_ENDPOINT when it is imported, so its
    constants are patched as well as the environment."""
    from huggingface_hub import constants

    endpoint = endpoint or closed_port()
    cache.mkdir(parents=True, exist_ok=True)
    for key, value in {"HF_HUB_CACHE": str(cache), "HF_ENDPOINT": endpoint, "HF_HUB_OFFLINE": "0"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}")


