"""Step 23 · loading Llama-family checkpoints, against Hugging Face's LlamaForCausalLM.

Every checkpoint is written on the spot, offline, by ``save_pretrained`` of a seeded
Hugging Face ``LlamaForCausalLM``, with the byte-level BPE that ``checkpoint_folders.py``
trains: the small config with its head tied and untied, a SmolLM2-shaped one (SmolLM2-135M's
widths, 9 query heads sharing 3 key/value heads, its 49,152-token vocabulary; 2 layers of
its 30), and an older layout (a ``LlamaModel``'s keys without ``model.``, each layer's
``rotary_emb.inv_freq`` buffer, and a copy of the tied head). Each loads through the
learner's ``from_pretrained(folder)``; the logits on the same ids are compared with
Hugging Face's. The learner's three functions are checked first, each on its own, on
SmolLM2-135M's published config.json (transformers 4's, ``rope_theta`` at the top level)
and on what transformers 5 writes (under ``rope_parameters``). The course's refusals
(another model type, scaled RoPE, a SiLU-less or biased Llama) are checked in
``test_checkpoints.py``.

Tolerance: the harness default, 1e-4 + 1e-4·|expected|. Measured worst case |Δ| on
solutions/: 6.7e-6 for the small checkpoints' logits, 2.3e-5 for the SmolLM2-shaped one (576-wide sums).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from checkpoint_folders import TOKENIZER_FILES, tokenizer_dir  # noqa: F401 - fixtures
from course.check.hints import explain_exception, todo_label, todos_in
from harness import assert_close, attribute, call, check_convert, fail, forward, solution, todo_in
from reference import LLAMA_SMALL, SMOLLM2_135M, llama_hf_config, seeded, token_ids

pytestmark = pytest.mark.step23

#: SmolLM2-135M's config.json on the Hub (HuggingFaceTB/SmolLM2-135M), as published (transformers 4.42).
SMOLLM2_CONFIG_JSON = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 0,
    "eos_token_id": 0, "hidden_act": "silu", "hidden_size": 576, "initializer_range": 0.041666666666666664,
    "intermediate_size": 1536, "is_llama_config": True, "max_position_embeddings": 8192, "model_type": "llama",
    "num_attention_heads": 9, "num_hidden_layers": 30, "num_key_value_heads": 3, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05, "rope_interleaved": False, "rope_scaling": None, "rope_theta": 100000,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.42.3", "use_cache": True,
    "vocab_size": 49152,
}
#: The checkpoints: a name -> the Hugging Face config's sizes (the vocabulary: the trained tokenizer's, or SmolLM2's).
CHECKPOINTS = {
    "small, tied": dict(LLAMA_SMALL),
    "small, untied": dict(LLAMA_SMALL, tie_word_embeddings=False),
    "SmolLM2-shaped, 2 layers": dict(SMOLLM2_135M, num_hidden_layers=2),
}
SEQ = 7


# --- the learner's functions ---------------------------------------------------------------


def test_config_from_json(step):
    """config.json becomes a LlamaConfig: SmolLM2's published file, and rope_theta where transformers 5 puts it"""
    small = llama_hf_config(**dict(LLAMA_SMALL, rope_theta=500000.0)).to_dict()  # what transformers 5 writes
    cases = {
        "SmolLM2-135M's config.json": (SMOLLM2_CONFIG_JSON, SMOLLM2_135M),
        "a transformers 5 config.json with rope_theta 500,000": (small, dict(LLAMA_SMALL, rope_theta=500000.0)),
    }
    fn = attribute(step, "config_from_json")
    for what, (values, expected) in cases.items():
        got = call(fn, json.loads(json.dumps(values)), what=f"config_from_json({what})")
        if type(got).__name__ != "LlamaConfig":
            fail(f"config_from_json({what}) returned a {type(got).__name__}; expected a LlamaConfig (step 17) "
                 f"— {todo_in(fn)}")
        for field, theirs in expected.items():
            mine = getattr(got, field, None)
            if mine == theirs:
                continue
            if field == "rope_theta" and "rope_parameters" in values:
                fail(f"config_from_json({what}).rope_theta is {mine!r}; transformers 5 writes it under "
                     f"rope_parameters, as {theirs!r} — {todo_in(fn)}")
            fail(f"config_from_json({what}).{field} is {mine!r}, the file says {theirs!r} — {todo_in(fn)}")


#: (checkpoint key, tied head?, the model's name for it, or None where it is no weight, why).
KEYS = [
    ("model.layers.0.self_attn.q_proj.weight", True, "model.layers.0.self_attn.q_proj.weight", "a weight"),
    ("layers.0.mlp.gate_proj.weight", True, "model.layers.0.mlp.gate_proj.weight", "a weight of a LlamaModel's save"),
    ("model.layers.2.self_attn.rotary_emb.inv_freq", True, None,
     "RoPE's frequencies, a buffer of older checkpoints, not a weight (step 19 computes them)"),
    ("layers.0.self_attn.rotary_emb.inv_freq", False, None, "RoPE's frequencies, a buffer, not a weight"),
    ("lm_head.weight", True, None, "the tied head's copy: the model reuses model.embed_tokens.weight (step 22)"),
    ("lm_head.weight", False, "lm_head.weight", "the untied head's own matrix, a weight (and not under model.)"),
    ("model.embed_tokens.weight", True, "model.embed_tokens.weight", "the token embedding"),
    ("embed_tokens.weight", False, "model.embed_tokens.weight", "the token embedding of a LlamaModel's save"),
    ("model.norm.weight", True, "model.norm.weight", "the final norm's scale"),
    ("norm.weight", True, "model.norm.weight", "the final norm's scale of a LlamaModel's save"),
]


def test_keys_become_the_models_names(step):
    """checkpoint keys become the model's names; RoPE's buffers and a tied head's copy are left out"""
    keep, rename = attribute(step, "is_weight"), attribute(step, "max_name")
    configs = {tied: solution(17).LlamaConfig(tie_word_embeddings=tied) for tied in (True, False)}
    for key, tied, name, what in KEYS:
        head = "tied" if tied else "untied"
        kept = call(keep, key, configs[tied], what=f"is_weight({key!r}, a config with the head {head})")
        if bool(kept) != (name is not None):
            fail(f"is_weight({key!r}) with the head {head} is {kept!r}, but it is {what} — {todo_in(keep)}")
        if name is None:
            continue
        got = call(rename, key, what=f"max_name({key!r})")
        if got != name:
            twice = "; the prefix is there twice" if str(got).startswith("model.model.") else ""
            fail(f"max_name({key!r}) is {got!r}, expected {name!r} (LlamaForCausalLM's name){twice} "
                 f"— {todo_in(rename)}")


def test_convert_gives_float32_and_refuses_a_weight_twice(step):
    """convert (given) makes every weight float32, and refuses a weight stored under both of its names

    It runs with the course's own TODO functions (they have checks of their own). A checkpoint may store float16 or float64; "norm.weight" (a LlamaModel's save) and
    "model.norm.weight" are one weight."""
    stored = {"model.embed_tokens.weight": np.ones((10, 4), np.float16), "model.norm.weight": np.ones(4, np.float64),
              "model.layers.0.mlp.up_proj.weight": np.ones((16, 4), np.float16)}
    twice = {"norm.weight": np.ones(4, np.float32), "model.norm.weight": np.ones(4, np.float32)}
    check_convert(step, solution(23), ("is_weight", "max_name"), stored, twice, "model.norm.weight",
                  solution(17).LlamaConfig())


# --- loading, and the model's logits ----------------------------------------------------------


@pytest.fixture(scope="module")
def llama_checkpoints(tmp_path_factory, tokenizer_dir) -> dict[str, tuple[Path, transformers.LlamaForCausalLM]]:  # noqa: F811
    """Each checkpoint folder with the Hugging Face model that wrote it."""
    import shutil

    from safetensors.numpy import save_file

    vocab = len(json.loads((tokenizer_dir / "vocab.json").read_text()))
    root, found = tmp_path_factory.mktemp("llama-checkpoints"), {}
    for name, sizes in CHECKPOINTS.items():
        own_vocabulary = "SmolLM2" in name  # 49,152 tokens, more than the tokenizer names; the others: the tokenizer's
        hf = llama_hf_config(**dict(sizes, vocab_size=sizes["vocab_size"] if own_vocabulary else vocab))
        reference = seeded(transformers.LlamaForCausalLM(hf), seed=23)
        folder = root / name.replace(" ", "").replace(",", "-")
        reference.save_pretrained(folder)
        found[name] = (folder, reference)
    # The older layout: a LlamaModel's keys (no "model."), RoPE's buffers, and the tied head saved as a copy.
    folder, reference = found["small, tied"]
    weights = {key.removeprefix("model."): value.numpy().copy() for key, value in reference.state_dict().items()}
    weights["lm_head.weight"] = weights["embed_tokens.weight"].copy()
    inv_freq = 1.0 / LLAMA_SMALL["rope_theta"] ** (np.arange(0, 16, 2, dtype=np.float32) / 16)
    for i in range(LLAMA_SMALL["num_hidden_layers"]):
        weights[f"layers.{i}.self_attn.rotary_emb.inv_freq"] = inv_freq
    older = root / "older-layout"
    older.mkdir()
    save_file(weights, str(older / "model.safetensors"))
    shutil.copy(folder / "config.json", older / "config.json")
    found["older layout"] = (older, reference)
    for path, _ in found.values():
        for file in TOKENIZER_FILES:
            shutil.copy(tokenizer_dir / file, path / file)
    return found


def _ready(step) -> None:
    """Each of the three TODOs returns something (a stub fails here, naming its TODO)."""
    config = call(attribute(step, "config_from_json"), dict(SMOLLM2_CONFIG_JSON),
                  what="config_from_json(SmolLM2-135M's config.json)")
    call(attribute(step, "is_weight"), "model.norm.weight", config, what="is_weight('model.norm.weight', …)")
    call(attribute(step, "max_name"), "model.norm.weight", what="max_name('model.norm.weight')")


def _load(step, folder: Path, what: str):
    """The learner's from_pretrained(folder); a CheckpointError or a crash becomes a hint."""
    load = attribute(step, "from_pretrained")
    try:
        return load(str(folder))
    except attribute(step, "CheckpointError") as error:
        todos = todos_in(step.config_from_json) + todos_in(step.is_weight) + todos_in(step.max_name)
        fail(f"from_pretrained({what}) raised CheckpointError: {error} — {todo_label(todos, step.__file__)}")
    except Exception as error:  # noqa: BLE001 - the learner's line, explained
        fail(f"from_pretrained({what}) failed: {explain_exception(error, step.__file__)}")


@pytest.mark.parametrize("name", [*CHECKPOINTS, "older layout"])
def test_checkpoint_loads_and_matches(step, llama_checkpoints, name):
    """a saved Llama checkpoint loads through from_pretrained, and its logits match Hugging Face's"""
    folder, reference = llama_checkpoints[name]
    _ready(step)
    model, tokenizer = _load(step, folder, f"the {name} checkpoint")
    ids = token_ids(1, SEQ, reference.config.vocab_size)
    with torch.no_grad():
        expected = reference(torch.from_numpy(ids)).logits.numpy()
    assert_close(forward(model, ids), expected, f"logits of the loaded {name} checkpoint vs Hugging Face's",
                 step=step)
    if tokenizer is None:
        fail("from_pretrained returned no tokenizer")
