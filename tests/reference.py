"""The Hugging Face side of every check: configs, seeded modules, and weight conversion.

Two configurations:

* ``SMALL``: one small GPT-2 shared by every step (width 64, 4 heads, 2 layers,
  a 96-token vocabulary). Shared shapes keep checks fast.
* ``GEN``: ``SMALL`` with a 64-token context, for generation (steps 13-15).
* ``GPT2_SMALL``: the real GPT-2 small dimensions (768 wide, 12 heads, 12 layers,
  50257 tokens), used where a step's shapes matter.

Weights are seeded random numbers, never ones or zeros: a transposed square
matrix or a swapped scale and shift would go unnoticed otherwise.
"""

from __future__ import annotations

import inspect

import numpy as np
import torch
import transformers
from transformers import DynamicCache
from transformers.masking_utils import create_causal_mask
from transformers.pytorch_utils import Conv1D

from course.weights import random_weights, shapes_of

SMALL = dict(vocab_size=96, n_positions=32, n_embd=64, n_layer=2, n_head=4)
GPT2_SMALL = dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12)
CONFIGS = {"small": SMALL, "gpt2-small": GPT2_SMALL}
#: Generation (steps 13-15) and the programs: SMALL with room for a prompt and 32
#: new tokens, and a vocabulary big enough for a byte-level BPE (256 bytes, some
#: merges, <|endoftext|>). One shared config, so that its graphs compile once.
GEN = dict(SMALL, n_positions=64, vocab_size=320)


def hf_config(**sizes) -> transformers.GPT2Config:
    """A Hugging Face GPT-2 config in float32 with the eager attention implementation."""
    vocab = sizes.get("vocab_size", 50257)
    config = transformers.GPT2Config(
        **sizes,
        # Inside the vocabulary (a small vocab would otherwise warn about 50256).
        bos_token_id=vocab - 1,
        eos_token_id=vocab - 1,
        # Inference only: no dropout anywhere, so outputs are deterministic.
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    config._attn_implementation = "eager"  # the reference that can return attention weights
    return config


def hf_causal_mask(seq_len: int, past_len: int = 0, sizes: dict | None = None, *,
                   config: transformers.PreTrainedConfig | None = None) -> np.ndarray:
    """The additive ``[seq_len, past_len + seq_len]`` mask that ``GPT2Model`` builds (``LlamaModel``'s,
    given a Llama ``config``).

    ``GPT2Attention`` and ``GPT2Block`` called on their own are *not* causal: the mask
    comes from ``GPT2Model``, through ``create_causal_mask``. This calls it as the model
    does, with a cache holding ``past_len`` tokens. Blocked entries hold float32's most
    negative number (about -3.4e38), not ``-inf``.

    Written against what transformers 5.12 (MAX 26.7's serving pin) and the newest 5.x
    share: with the eager attention implementation the mask is always materialized, so
    no version-specific argument (5.13's ``allow_is_causal_skip``) is needed.
    """
    config = config or hf_config(**(sizes or SMALL))
    head_dim = config.hidden_size // config.num_attention_heads
    cache = DynamicCache(config=config)
    if past_len:
        past = torch.zeros(1, getattr(config, "num_key_value_heads", config.num_attention_heads), past_len, head_dim)
        cache.update(past, past, 0)
    # Newer transformers call this argument cache (5.24 warns that past_key_values goes in 5.40); 5.12 knows only the old name.
    named = "cache" if "cache" in inspect.signature(create_causal_mask).parameters else "past_key_values"
    mask = create_causal_mask(
        config=config,
        inputs_embeds=torch.zeros(1, seq_len, config.hidden_size),
        attention_mask=None,
        position_ids=torch.arange(past_len, past_len + seq_len)[None],
        **{named: cache},
    )
    return mask[0, 0].numpy()


def seeded(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Gives every parameter of ``module`` the course's seeded check weights (``course.weights``):
    matrices scaled by their fan-in, so activations stay O(1) and GELU's curve is exercised;
    layer-norm scales around 1 and other vectors around 0, never exactly."""
    conv1d = _conv1d_weights(module)
    params = dict(module.named_parameters())  # a tied tensor is listed once
    values = random_weights(shapes_of(params.items()), seed,
                            fan_in=lambda name, shape: shape[0] if name in conv1d else shape[-1])
    with torch.no_grad():
        for name, value in values.items():
            params[name].copy_(torch.from_numpy(value))
    return module.eval()


def _conv1d_weights(module: torch.nn.Module) -> set[str]:
    """The names of the weights Hugging Face stores as Conv1D, ``[in, out]``."""
    return {
        f"{name}.weight" if name else "weight"
        for name, sub in module.named_modules()
        if isinstance(sub, Conv1D)
    }


def to_max_state(module: torch.nn.Module) -> dict[str, np.ndarray]:
    """Hugging Face weights as MAX expects them, keyed by the checkpoint's names.

    * Conv1D layers (``c_attn``, ``c_proj``, ``c_fc``) store their weight as
      ``[in, out]``; MAX's ``Linear`` keeps ``[out, in]``, so those are transposed.
    * The attention's ``bias``/``masked_bias`` buffers are not parameters, so they
      are not here.
    * ``lm_head.weight`` is tied to ``transformer.wte.weight``: the same tensor.
      It appears once, as ``transformer.wte.weight``; a MAX model ties its head to
      its token embedding instead of loading a second copy.
    """
    conv1d = _conv1d_weights(module)
    state = {}
    for name, param in module.named_parameters():  # a tied tensor is listed once, first name
        value = param.detach().to(torch.float32).numpy()
        state[name] = np.ascontiguousarray(value.T if name in conv1d else value)
    return state


def hidden_states(*shape: int, seed: int = 1, scale: float = 1.0) -> np.ndarray:
    """Seeded float32 activations of the given shape."""
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def run(module: torch.nn.Module, *inputs: np.ndarray, **kwargs) -> np.ndarray:
    """Runs a Hugging Face module on NumPy inputs (keyword arguments passed as they are);
    returns float32 NumPy."""
    with torch.no_grad():
        out = module(*(torch.from_numpy(x) for x in inputs), **kwargs)
    if isinstance(out, tuple):
        out = out[0]
    return out.numpy().astype(np.float32)


#: The epsilon a LayerNorm gets when it is built without the config's (step 03's default).
DEFAULT_EPS = 1e-5


def run_layer_norm(norm: torch.nn.LayerNorm, x: np.ndarray, eps: float | None = None) -> np.ndarray:
    """Runs a Hugging Face layer norm's weights on ``x`` with ``eps`` (its own when None)."""
    return run(lambda t: torch.nn.functional.layer_norm(t, norm.normalized_shape, norm.weight, norm.bias,
                                                        norm.eps if eps is None else eps), x)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """NumPy softmax in float64; ``-inf`` entries get weight 0."""
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """NumPy log-softmax in float64."""
    x = np.asarray(x, dtype=np.float64)
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


# --- steps 05-11


def token_ids(batch: int, seq: int, vocab_size: int, seed: int = 2) -> np.ndarray:
    """Seeded int64 token ids ``[batch, seq]`` that include both ends of the vocabulary."""
    ids = np.random.default_rng(seed).integers(0, vocab_size, size=(batch, seq), dtype=np.int64)
    ids.flat[0] = 0
    ids.flat[-1] = vocab_size - 1
    return ids


def run_masked(module: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    """Runs ``GPT2Attention`` or ``GPT2Block`` on ``x`` ``[batch, seq, n_embd]`` with the causal mask.

    Called on their own, those modules are not causal (``GPT2Model`` builds the
    mask), so this passes the mask ``GPT2Model`` would, from :func:`hf_causal_mask`.
    """
    return run(module, x, attention_mask=torch.from_numpy(hf_causal_mask(x.shape[1]))[None, None])


# --- steps 13-15 and the programs


def generation_model(seed: int = 13, **sizes) -> transformers.GPT2LMHeadModel:
    """The small random GPT-2 every generation check uses (weights tied); ``sizes`` change GEN's.

    Greedy decoding of a random GPT-2 soon loops over the few tokens whose
    embeddings are longest (2-4 distinct tokens in 96 here), a weak test. Rows of
    wte with equal norms, no shift in ln_f and the blocks' matrices doubled make
    it wander: 21 distinct tokens in the 96 of PROMPTS.
    """
    with torch.device("meta"):
        model = transformers.GPT2LMHeadModel(hf_config(**(GEN | sizes)))
    model = model.to_empty(device="cpu")
    model.tie_weights()
    seeded(model, seed=seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.ndim == 2 and ".h." in name:
                param.mul_(2.0)
        wte = model.transformer.wte.weight
        wte.mul_(wte.norm(dim=1).mean() / wte.norm(dim=1, keepdim=True))
        model.transformer.ln_f.bias.zero_()
    return model


def hf_greedy(model: transformers.GPT2LMHeadModel, prompt: list[int], new_tokens: int, eos_id: int):
    """Hugging Face's greedy tokens after ``prompt`` and the logits it chose each one from."""
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            max_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=eos_id,
            eos_token_id=eos_id,
            output_scores=True,
            return_dict_in_generate=True,
        )
    return out.sequences[0, len(prompt) :].tolist(), [score[0].numpy() for score in out.scores]


def rounded_logits(model: transformers.GPT2LMHeadModel, name: str, ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Hugging Face's logits for ``ids`` with every block matrix and the head read back from ``name``'s
    GGUF blocks (``--quantize``), and the float32 ones; both ``[len(ids), vocab]``."""
    import copy

    from course.programs.quantize import dequantize_rows, quantize_rows

    def rounded(w: np.ndarray) -> np.ndarray:
        return dequantize_rows(quantize_rows(np.ascontiguousarray(w), name), name)

    model = copy.deepcopy(model)  # its matrices are rounded below
    tokens = torch.tensor([ids])
    with torch.no_grad():
        exact = model(tokens).logits[0].numpy()
        wte = model.transformer.wte.weight.numpy().copy()  # the embedding lookup stays float32
        for block in model.transformer.h:
            for layer in (block.attn.c_attn, block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj):
                layer.weight.copy_(torch.from_numpy(rounded(layer.weight.numpy().T).T.copy()))  # Conv1D: [in, out]
        hidden = model.transformer(tokens).last_hidden_state[0].numpy()
    return hidden @ rounded(wte).T, exact


# --- Part II: the Llama family (steps 17-21)

#: SmolLM2-135M (Hugging Face's HuggingFaceTB/SmolLM2-135M config.json): the default of step 17's LlamaConfig.
SMOLLM2_135M = dict(
    hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
    vocab_size=49152, max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True,
)
#: One small Llama shared by Part II's checks: width 64, 4 query heads of 16 sharing 2 key/value heads.
#: Its rope_theta is SmolLM2's 100,000, not the 10,000 of the RoPE paper, so a hard-coded base shows.
LLAMA_SMALL = dict(
    hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    vocab_size=96, max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True,
)
LLAMA_CONFIGS = {"small": LLAMA_SMALL, "smollm2-135m": SMOLLM2_135M}
#: The Llama that generates in step 24's checks and the programs' (a checkpoint saved in test_programs.py): the small
#: sizes with GEN's 320-token vocabulary and 128 positions. One size for both, so that they compile the same two
#: graphs (cached and not): each Llama graph costs minutes cold.
GEN_LLAMA = dict(LLAMA_SMALL, vocab_size=GEN["vocab_size"], max_position_embeddings=128)


def llama_hf_config(**sizes) -> transformers.LlamaConfig:
    """A Hugging Face Llama config in float32 with the eager attention implementation.

    ``rope_theta`` may be given as a keyword: transformers 5 files it under
    ``config.rope_parameters["rope_theta"]`` (``config.rope_theta`` itself is None).
    """
    vocab = sizes.get("vocab_size", 32000)
    config = transformers.LlamaConfig(**sizes, bos_token_id=0, eos_token_id=vocab - 1, attention_dropout=0.0)
    config._attn_implementation = "eager"
    return config
