"""Step 01 · GPT2Config against transformers.GPT2Config."""

from __future__ import annotations

import dataclasses

import pytest
import transformers

from course.check.hints import todo_label
from harness import call, config_class, config_property, fail, todo_in
from reference import CONFIGS

pytestmark = pytest.mark.step01

SIZES = ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head")
GIVEN = ("n_inner", "layer_norm_epsilon", "activation_function")


def _config_class(step):
    return config_class(step, "GPT2Config", SIZES + GIVEN)


def test_defaults_are_gpt2_small(step):
    """defaults are GPT-2 small's, as in transformers"""
    config = call(_config_class(step), what="GPT2Config()")
    hf = transformers.GPT2Config()
    for name in SIZES + GIVEN:
        mine, theirs = getattr(config, name), getattr(hf, name)
        if mine != theirs:
            where = todo_label(1, step.__file__) if name in SIZES else "keep the given fields as given"
            fail(f"GPT2Config().{name} is {mine!r}, but GPT-2 small's is {theirs!r} — {where}")


def test_inner_dim(step):
    """inner_dim is 4 * n_embd by default and n_inner when set"""
    cls = _config_class(step)
    for n_embd, n_inner, expected in [(768, None, 3072), (64, None, 256), (64, 100, 100)]:
        config = call(cls, n_embd=n_embd, n_head=4, n_inner=n_inner, what="GPT2Config(...)")
        got = config_property(config, "inner_dim")
        if got != expected:
            fail(f"inner_dim is {got} for n_embd={n_embd}, n_inner={n_inner}; expected {expected} — "
                 f"{todo_label(3, step.__file__)}")


def test_head_dim(step):
    """head_dim is n_embd / n_head"""
    cls = _config_class(step)
    for n_embd, n_head in [(768, 12), (64, 4), (1600, 25)]:
        config = call(cls, n_embd=n_embd, n_head=n_head, what="GPT2Config(...)")
        got = config_property(config, "head_dim")
        if got != n_embd // n_head or not isinstance(got, int):
            fail(
                f"head_dim is {got!r} for n_embd={n_embd}, n_head={n_head}; expected the int "
                f"{n_embd // n_head} (a width is a whole number: `//` divides without a fraction) — "
                f"{todo_label(4, step.__file__)}"
            )


def test_rejects_uneven_heads(step):
    """uneven heads raise a ValueError that names both sizes"""
    cls = _config_class(step)
    validation = getattr(cls, "__post_init__", cls)
    try:
        cls(n_embd=64, n_head=5)
    except ValueError as error:
        if "64" not in str(error) or "5" not in str(error).replace("64", ""):
            fail(f"GPT2Config(n_embd=64, n_head=5) raised ValueError({str(error)!r}), which does not name the two "
                 f"sizes that disagree, 64 and 5: a learner who mistypes a size reads this message — {todo_in(validation)}")
        return
    except Exception as error:  # noqa: BLE001
        fail(f"GPT2Config(n_embd=64, n_head=5) raised {type(error).__name__}, expected ValueError — {todo_in(validation)}")
    fail(f"GPT2Config(n_embd=64, n_head=5) was accepted; 64 does not split into 5 heads — {todo_in(validation)}")


@pytest.mark.parametrize("name", list(CONFIGS))
def test_round_trips_with_transformers(step, name):
    """round-trips with transformers.GPT2Config"""
    cls = _config_class(step)
    hf = transformers.GPT2Config(**CONFIGS[name], n_inner=48, layer_norm_epsilon=1e-3)
    config = call(cls.from_hf, hf, what="GPT2Config.from_hf")
    for field in dataclasses.fields(cls):
        if getattr(config, field.name) != getattr(hf, field.name):
            fail(
                f"from_hf gave {field.name}={getattr(config, field.name)!r}, "
                f"but the transformers config has {getattr(hf, field.name)!r} — {todo_label(5, step.__file__)}"
            )
    back = transformers.GPT2Config(**dataclasses.asdict(config))
    again = call(cls.from_hf, back, what="GPT2Config.from_hf")
    if again != config:
        fail(f"a round trip through transformers.GPT2Config changed the config: {again} != {config} — "
             f"{todo_label(5, step.__file__)}")
