"""Step 21 · LlamaAttention (grouped-query, with RoPE) against Hugging Face's LlamaAttention.

``LlamaAttention`` on its own is not causal (``LlamaModel`` builds the mask), so the
reference is given the mask ``LlamaModel`` builds (``reference.hf_causal_mask`` with a
Llama config) and the cos/sin tables of ``LlamaRotaryEmbedding``, as ``LlamaModel``
passes them. ``repeat_kv`` is checked on its own first, against Hugging Face's, so that a
failure names the method to fix. The whole module is checked with 1 key/value head
(multi-query), 2 (grouped: 2 query heads each) and 4 (one per query head: multi-head) on
the small config, and at SmolLM2-135M's sizes (9 query heads sharing 3), for 1, 7 and 19
tokens.

Tolerance: the harness default, 1e-4 + 1e-4·|expected|. Measured worst case |Δ| on
solutions/ (float32 noise): 0 for ``repeat_kv`` (a copy), 1.7e-6 for the module on the
small configs and 7.9e-6 at SmolLM2's widths. The common wrong attentions (RoPE left
out, on q or k only, on v as well, on the attention's output instead of q and k, or with
a hard-coded theta; the key/value heads tiled instead of repeated in place; k and v
swapped) are computed in NumPy below, so that a ✗ names the mistake and its TODO. (GPT-J's
pairs are named too, for a rotation written here in place of step 19's: the check imports
the course's own step 19, so its pairs are step 19's to get right.)
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding, repeat_kv

from course.runtime import from_numpy, to_numpy
from harness import Mistake, assert_close, call, fail, forward, llama_twin, matching_mistake
from reference import LLAMA_SMALL, SMOLLM2_135M, hf_causal_mask, hidden_states, llama_hf_config, run, seeded, softmax
from reference import to_max_state
from test_step_19_rope import rotations, tables

pytestmark = pytest.mark.step21

#: LLAMA_SMALL's 4 query heads with 1 key/value head (multi-query), 2 (grouped) and 4 (multi-head); SmolLM2's 9 and 3.
CONFIGS = {f"small-kv{kv}": dict(LLAMA_SMALL, num_key_value_heads=kv) for kv in (1, 2, 4)}
CONFIGS["smollm2-135m"] = SMOLLM2_135M
#: One token, a short prompt, and one longer than 16.
LENGTHS = [1, 7, 19]

TILED = ("the key/value heads are tiled ([k0, k1, k0, k1]); each must be repeated in place ([k0, k0, k1, k1]), "
         "so that query heads 0 … G-1 share key/value head 0, as the checkpoint was trained")


# --- the common mistakes, in NumPy -------------------------------------------------------------


def heads(x: np.ndarray, head_dim: int) -> np.ndarray:
    """[B, T, n·D] -> [B, n, T, D]."""
    batch, seq, width = x.shape
    return x.reshape(batch, seq, width // head_dim, head_dim).transpose(0, 2, 1, 3)


def repeated(x: np.ndarray, groups: int, tiled: bool = False) -> np.ndarray:
    """[B, K, T, D] -> [B, K·groups, T, D]: each head repeated in place, or (a mistake) the heads tiled."""
    return np.tile(x, (1, groups, 1, 1)) if tiled else np.repeat(x, groups, axis=1)


def llama_attention(x: np.ndarray, state: dict[str, np.ndarray], sizes: dict, *, rope: str = "qk",
                    tiled: bool = False, theta: float | None = None, gptj: bool = False,
                    kv_swapped: bool = False) -> np.ndarray:
    """Llama's attention in float64; the keywords make the common mistakes. ``rope`` names what is
    rotated: "qk" (right), "", "q", "k", "qkv", or "out" (the attention's output, after the scores)."""
    n_head, n_kv = sizes["num_attention_heads"], sizes["num_key_value_heads"]
    head_dim, seq = sizes["hidden_size"] // n_head, x.shape[1]
    x = x.astype(np.float64)
    q, k, v = (heads(x @ state[f"{name}.weight"].T, head_dim) for name in ("q_proj", "k_proj", "v_proj"))
    if kv_swapped:
        k, v = v, k
    cos, sin = tables(head_dim, sizes["rope_theta"] if theta is None else theta, seq, interleaved=gptj)
    turn = "interleaved" if gptj else "right"

    def rotate(t):
        return t * cos + rotations(t)[turn] * sin

    q, k, v = (rotate(t) if name in rope else t for name, t in zip("qkv", (q, k, v)))
    k, v = repeated(k, n_head // n_kv, tiled), repeated(v, n_head // n_kv, tiled)
    scores = q @ k.swapaxes(-1, -2) / np.sqrt(head_dim) + np.triu(np.full((seq, seq), -np.inf), k=1)
    y = softmax(scores) @ v
    if rope == "out":
        y = rotate(y)
    merged = y.transpose(0, 2, 1, 3).reshape(*x.shape[:2], n_head * head_dim)
    return merged @ state["o_proj.weight"].T


def attention_mistakes(x: np.ndarray, state: dict[str, np.ndarray], sizes: dict) -> list[Mistake]:
    """The common wrong attentions on the check's input and weights, each with its TODO."""

    def wrong(**kwargs):
        return lambda: llama_attention(x, state, sizes, **kwargs)

    found = [
        Mistake("no RoPE: q and k must be rotated by their positions (step 19's apply_rope); Llama has no other "
                "position information", 3, wrong(rope="")),
        Mistake("only q is rotated: RoPE turns both q and k, so that their scores depend on the distance", 3,
                wrong(rope="q")),
        Mistake("only k is rotated: RoPE turns both q and k, so that their scores depend on the distance", 3,
                wrong(rope="k")),
        Mistake("v is rotated too: RoPE turns only q and k, the two sides of the scores; the values are passed on "
                "as they are", 3, wrong(rope="qkv")),
        Mistake("RoPE is applied to the attention's output, after the scores; it turns q and k before q·kᵀ", 3,
                wrong(rope="out")),
        Mistake("RoPE pairs neighbouring numbers (GPT-J's interleaved layout); step 19's rope_tables and apply_rope "
                "pair the two halves, as Hugging Face's Llama does", 3, wrong(gptj=True)),
        Mistake("k and v trade places: k comes from k_proj, v from v_proj", 3, wrong(kv_swapped=True)),
    ]
    found += [
        Mistake(f"RoPE uses theta = {other:g}, not the config's rope_theta ({sizes['rope_theta']:g}): pass "
                f"self.rope_theta to rope_tables", 3, wrong(theta=other))
        for other in (10000.0, 500000.0) if other != sizes["rope_theta"]
    ]
    if 1 < sizes["num_key_value_heads"] < sizes["num_attention_heads"]:  # tiling one head, or H of H, is no mistake
        found.append(Mistake(TILED, 2, wrong(tiled=True)))
    return found


# --- the checks ----------------------------------------------------------------------------------


def _attention(step, sizes: dict, seed: int = 21):
    """The learner's LlamaAttention and a seeded LlamaAttention with the same weights."""
    hf = llama_hf_config(**sizes)
    reference = seeded(LlamaAttention(hf, layer_idx=0), seed=seed)
    return llama_twin(step, "LlamaAttention", reference, hf), reference, hf


def hf_attention(reference: LlamaAttention, hf, x: np.ndarray) -> np.ndarray:
    """Hugging Face's LlamaAttention on x with what LlamaModel gives it: RoPE's tables and the causal mask."""
    seq = x.shape[1]
    with torch.no_grad():
        cos, sin = LlamaRotaryEmbedding(hf)(torch.zeros(1), torch.arange(seq)[None])
    mask = torch.from_numpy(hf_causal_mask(seq, config=hf))[None, None]
    return run(reference, x, position_embeddings=(cos, sin), attention_mask=mask)


@pytest.mark.parametrize("name", ["small-kv2", "smollm2-135m"])
def test_repeat_kv_matches_hugging_face(step, name):
    """repeat_kv gives each query head its group's key/value head, as Hugging Face's repeat_kv does"""
    check_repeat_kv(step, name)


def check_repeat_kv(step, name: str) -> None:
    sizes = CONFIGS[name]
    mine, _, _ = _attention(step, sizes)
    groups = sizes["num_attention_heads"] // sizes["num_key_value_heads"]
    head_dim = sizes["hidden_size"] // sizes["num_attention_heads"]
    x = hidden_states(2, sizes["num_key_value_heads"], 5, head_dim)
    method = getattr(mine, "repeat_kv", None)
    if method is None:
        fail("LlamaAttention has no method `repeat_kv` — keep the name the stub gives it")
    got = to_numpy(call(method, from_numpy(x), what="LlamaAttention.repeat_kv(k)"))
    assert_close(got, repeat_kv(torch.from_numpy(x), groups).numpy(),
                 f"repeat_kv(k) for {sizes['num_key_value_heads']} key/value heads, {groups} query heads each ({name})",
                 mistakes=[Mistake(TILED, 2, lambda: repeated(x, groups, tiled=True))], step=step)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_matches_llama_attention(step, name):
    """LlamaAttention matches Hugging Face's LlamaAttention under LlamaModel's mask and RoPE tables"""
    sizes = CONFIGS[name]
    mine, reference, hf = _attention(step, sizes)
    state = to_max_state(reference)
    for seq in LENGTHS:
        x = hidden_states(2, seq, sizes["hidden_size"], seed=seq)
        got, expected, mistakes = forward(mine, x), hf_attention(reference, hf, x), attention_mistakes(x, state, sizes)
        if matching_mistake(got, [Mistake("", 0, lambda: expected), *mistakes]) is None:
            check_repeat_kv(step, "small-kv2")  # forward runs repeat_kv (TODO 2): a wrong one is named first
        assert_close(got, expected, f"attention output for {seq} tokens vs Hugging Face LlamaAttention ({name})",
                     mistakes=mistakes, step=step)
