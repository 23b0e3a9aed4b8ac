"""Step 14 · loading GPT-2 checkpoints, against Hugging Face's GPT2LMHeadModel.

Every checkpoint is written on the spot, offline (``checkpoint_folders.py``): one
seeded small GPT-2 with a byte-level BPE trained there, in three layouts
(``save_pretrained``, the original ``gpt2`` layout with its buffers and a copied
``lm_head.weight``, and ``pytorch_model.bin`` alone). Each loads through the
learner's ``from_pretrained(folder)``; the logits on a sentence encoded by the
loaded tokenizer are compared with Hugging Face's, with the argmax. The
learner's four functions are checked first, each on its own, so that a mistake
names its TODO (a size read from the file's ``n_ctx``, the context length, is
found by giving ``n_ctx`` a number no other entry holds). A Hub id loads from a
fake Hugging Face cache, with the Hub replaced by a closed local port. With GPT-2's real weights in the local Hugging
Face cache, one more check compares real logits and the next token; otherwise
it is skipped, saying how to get them. Every check here fails on the untouched
stub; the course's own loader (finding, reading, refusing broken checkpoints)
is checked in ``test_checkpoints.py``.

Tolerance: the harness default, 1e-4 + 1e-4·|expected|. Measured worst case |Δ|
on solutions/: 4.3e-6 on the small model (logits of size ~10). A missed
transpose of the square ``attn.c_proj`` loads without complaint and is off by
more than 1.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from checkpoint_folders import TEXT, TOKENIZER_FILES, checkpoints, fake_hub, offline_hub, reference, tokenizer_dir  # noqa: F401 - fixtures
from course.check.hints import explain_exception, todo_label, todos_in
from harness import Mistake, assert_close, attribute, call, check_convert, fail, forward, solution, todo_in
from reference import SMALL, to_max_state

pytestmark = pytest.mark.step14

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


# --- the learner's functions ---------------------------------------------------------------


def _ready(step) -> None:
    """Each of the four TODOs returns something (a stub fails here, naming its TODO)."""
    _config_from_json(attribute(step, "config_from_json"), GPT2_CONFIG_JSON, "gpt2's config.json")
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


def _read_from_n_ctx(fn, values: dict) -> list[str]:
    """The fields config_from_json takes from the file's n_ctx entry, n_positions aside.

    n_ctx is the context length (the same as n_positions in every GPT-2 config.json) and
    no GPT2Config field. The fingerprint: ``values`` with n_ctx set to a number no other
    entry holds, one that still splits into the file's heads (so that a config with
    ``n_embd`` read from it builds), and the fields of the result that come out equal to it.
    """
    if "n_ctx" not in values:
        return []
    marker = values.get("n_head", 12) * 97
    try:
        got = fn(dict(values, n_ctx=marker))
    except Exception:  # noqa: BLE001 - the learner's own call reports any error
        return []
    names = {field.name for field in dataclasses.fields(solution(1).GPT2Config)} - {"n_positions"}
    return [name for name in sorted(names) if getattr(got, name, None) == marker]


def _config_from_json(fn, values: dict, what: str):
    """The learner's config_from_json(values); a field read from n_ctx is named before anything else."""
    for field in _read_from_n_ctx(fn, values):
        source = (f"the file's own {field} entry ({values[field]!r})" if field in values
                  else "GPT2Config's default, as the file does not name it")
        fail(f"config_from_json({what}) reads {field} from the file's n_ctx: n_ctx is the context length "
             f"({values['n_ctx']} here, as n_positions) and no GPT2Config field, so it is left out; {field} is "
             f"{source} — {todo_in(fn)}")
    return call(fn, dict(values), what=f"config_from_json({what})")


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
        got = _config_from_json(fn, values, what)
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
            square = " (it is square, so it would load without complaint and only the logits would be wrong)"
            fail(f"to_max_layout({name!r}, a {list(shape)} weight) returned it as stored; it is a Conv1D weight, "
                 f"stored [in, out], and MAX's Linear keeps [out, in]: return its transpose"
                 f"{square if shape[0] == shape[1] else ''} — {todo_in(fn)}")
        if name not in conv1d and np.array_equal(got, value.T):
            fail(f"to_max_layout({name!r}, a {list(shape)} weight) transposed it; only c_attn, c_proj and c_fc "
                 f"weights are stored [in, out], and this is {kept[name][1]} — {todo_in(fn)}")
        fail(f"to_max_layout({name!r}, a {list(shape)} weight) returned {list(got.shape)} values that are not "
             f"the {'transpose' if name in conv1d else 'weight as stored'} ({list(expected.shape)}) — {todo_in(fn)}")


def test_convert_gives_float32_and_refuses_a_weight_twice(step):
    """convert (given) makes every weight float32, and refuses a weight stored under both of its names

    It runs with the course's own TODO functions (they have checks of their own). A checkpoint may store float16 or float64; "h.0.ln_1.weight" and "transformer.h.0.ln_1.weight" are one weight."""
    stored = {"wte.weight": np.ones((10, 4), np.float16), "h.0.ln_1.bias": np.zeros(4, np.float64),
              "h.0.mlp.c_fc.weight": np.ones((4, 16), np.float16)}
    twice = {"h.0.ln_1.weight": np.ones(4, np.float32), "transformer.h.0.ln_1.weight": np.ones(4, np.float32)}
    check_convert(step, solution(14), ("is_weight", "max_name", "to_max_layout"), stored, twice,
                  "transformer.h.0.ln_1.weight")


# --- loading, and the model's logits ----------------------------------------------------------


def logits_mistakes(step, reference: transformers.GPT2LMHeadModel, ids: np.ndarray) -> list[Mistake]:
    """The common wrong loads: a square Conv1D weight (attn.c_proj, n_embd × n_embd) left as stored."""
    def square_conv1d(block):
        layers = {"attn.c_proj": block.attn.c_proj, "mlp.c_fc": block.mlp.c_fc, "mlp.c_proj": block.mlp.c_proj}
        return {name: layer for name, layer in layers.items() if layer.weight.shape[0] == layer.weight.shape[1]}

    def untransposed(name: str):
        def logits():
            model = copy.deepcopy(reference)
            with torch.no_grad():
                for block in model.transformer.h:
                    layer = square_conv1d(block)[name]
                    layer.weight.copy_(layer.weight.T.clone())
                return model(torch.from_numpy(ids)).logits.numpy()
        return logits

    return [
        Mistake(f"{name}'s weight is loaded as stored, [in, out]: it is square, so it loads without complaint, "
                f"but MAX's Linear reads it as [out, in]; transpose it like the other Conv1D weights",
                todos_in(step.to_max_layout), untransposed(name))
        for name in square_conv1d(reference.transformer.h[0])
    ]


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
    assert_close(got, expected, f"logits of the {layout} checkpoint vs Hugging Face GPT2LMHeadModel",
                 mistakes=logits_mistakes(step, reference, ids), step=step)
    if agree < total:
        fail(f"logits are within the tolerance, but the argmax agrees at only {agree} of {total} positions")


def test_hub_id_is_found_in_the_cache(step, checkpoints, reference, tmp_path, monkeypatch):
    """a Hub id ("gpt2") loads from the local Hugging Face cache, without the network"""
    _ready(step)
    snapshot = fake_hub(tmp_path, "openai-community/gpt2", checkpoints["save_pretrained"])
    offline_hub(monkeypatch, tmp_path / "hub")
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
