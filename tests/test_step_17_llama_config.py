"""Step 17 · LlamaConfig against transformers.LlamaConfig and LlamaAttention's sizes.

No numbers to compare within a tolerance here: sizes are integers and compared
exactly. ``num_key_value_groups`` is compared with what Hugging Face's own
``LlamaAttention`` derives from the same config.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import transformers
from transformers.models.llama.modeling_llama import LlamaAttention

from harness import call, config_class, config_property, fail, todo_in, todo_label
from reference import LLAMA_CONFIGS, SMOLLM2_135M, llama_hf_config

pytestmark = pytest.mark.step17

SIZES = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
         "vocab_size", "max_position_embeddings")
GIVEN = ("rms_norm_eps", "rope_theta", "tie_word_embeddings")

#: Llama shapes beyond SmolLM2: Llama 2 7B (one key/value head per query head), Llama 3 8B (4 queries per
#: key/value head, theta 500,000), and a multi-query config (a single key/value head).
SHAPES = {
    "llama-2-7b": dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=32, rope_theta=10000.0),
    "llama-3-8b": dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, rope_theta=500000.0),
    "multi-query": dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=1, rope_theta=100000.0),
}


def _config_class(step):
    return config_class(step, "LlamaConfig", SIZES + GIVEN)


def test_defaults_are_smollm2_135m(step):
    """defaults are SmolLM2-135M's"""
    cls = _config_class(step)
    config = call(cls, what="LlamaConfig()")
    for name in SIZES + GIVEN:
        mine, theirs = getattr(config, name), SMOLLM2_135M[name]
        if mine != theirs:
            where = todo_label(1, step.__file__) if name in SIZES else "keep the given value"
            fail(f"LlamaConfig().{name} is {mine!r}, but SmolLM2-135M's is {theirs!r} — {where}")


@pytest.mark.parametrize("name", ["smollm2-135m", *SHAPES])
def test_head_dim_and_groups_match_llama_attention(step, name):
    """head_dim and num_key_value_groups are the ones Hugging Face's LlamaAttention uses"""
    cls = _config_class(step)
    sizes = SMOLLM2_135M if name == "smollm2-135m" else SHAPES[name]
    config = call(cls, **sizes, what=f"LlamaConfig({name})")
    hf = llama_hf_config(**sizes)
    with torch.device("meta"):  # sizes only: no weights are made
        attention = LlamaAttention(hf, layer_idx=0)
    for prop, expected in (("head_dim", attention.head_dim), ("num_key_value_groups", attention.num_key_value_groups)):
        got = config_property(config, prop)
        if got != expected or not isinstance(got, int):
            fail(
                f"LlamaConfig.{prop} is {got!r} for {_sizes(sizes)}; LlamaAttention uses the int {expected} "
                f"(a count or a width is a whole number: `//` divides without a fraction) — "
                f"{todo_in(getattr(type(config), prop).fget)}"
            )


def _sizes(sizes: dict) -> str:
    return ", ".join(f"{key}={value}" for key, value in sizes.items() if key.startswith(("hidden", "num_")))


@pytest.mark.parametrize(
    "sizes, numbers",
    [
        (dict(hidden_size=64, num_attention_heads=5, num_key_value_heads=5), ("64", "5")),
        (dict(hidden_size=576, num_attention_heads=9, num_key_value_heads=2), ("9", "2")),
    ],
    ids=["heads-vs-width", "kv-heads-vs-heads"],
)
def test_rejects_uneven_splits(step, sizes, numbers):
    """sizes that do not split evenly raise a ValueError that names them"""
    cls = _config_class(step)
    where = todo_in(getattr(cls, "__post_init__", cls))
    given = f"LlamaConfig({', '.join(f'{key}={value}' for key, value in sizes.items())})"
    try:
        cls(**sizes)
    except ValueError as error:
        message = str(error)
        missing = [number for number in numbers if number not in message]
        if missing:
            fail(f"{given} raised ValueError({message!r}); say which numbers disagree ({', '.join(numbers)}) — {where}")
        return
    except Exception as error:  # noqa: BLE001
        fail(f"{given} raised {type(error).__name__}, expected ValueError — {where}")
    fail(f"{given} was accepted; {numbers[0]} does not split into {numbers[1]} equal parts — {where}")


@pytest.mark.parametrize("name", [*LLAMA_CONFIGS, *SHAPES])
def test_round_trips_with_transformers(step, name):
    """round-trips with transformers.LlamaConfig (rope_theta from its rope_parameters)"""
    cls = _config_class(step)
    sizes = LLAMA_CONFIGS.get(name) or SHAPES[name]
    hf = llama_hf_config(**sizes)
    where = todo_in(cls.from_hf)
    config = _from_hf(cls, hf)
    if not isinstance(config, cls):
        fail(f"LlamaConfig.from_hf returned a {type(config).__name__}, not a LlamaConfig — {where}")
    for field in dataclasses.fields(cls):
        expected = hf.rope_parameters["rope_theta"] if field.name == "rope_theta" else getattr(hf, field.name)
        got = getattr(config, field.name)
        if got != expected:
            source = ('rope_parameters["rope_theta"] (transformers 5 keeps no number in config.rope_theta)'
                      if field.name == "rope_theta" else field.name)
            fail(f"from_hf gave {field.name}={got!r}, but the transformers config has {expected!r} in {source} "
                 f"— {where}")
    back = transformers.LlamaConfig(**dataclasses.asdict(config))
    again = _from_hf(cls, back)
    if again != config:
        fail(f"a round trip through transformers.LlamaConfig changed the config: {again} != {config} — {where}")


def _from_hf(cls, hf):
    """The learner's from_hf on ``hf``; reading the number from ``hf.rope_theta`` gets its own hint."""
    try:
        return call(cls.from_hf, hf, what="LlamaConfig.from_hf")
    except pytest.fail.Exception as error:
        if "no attribute 'rope_theta'" not in str(error):
            raise
    fail(
        "from_hf read hf_config.rope_theta, which transformers 5 no longer has: the base is in "
        f'hf_config.rope_parameters["rope_theta"] (here {hf.rope_parameters["rope_theta"]}) — {todo_in(cls.from_hf)}'
    )
