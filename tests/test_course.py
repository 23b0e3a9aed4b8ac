"""Checks of the course itself: steps/ is rendered, every stub fails well, and the
checks catch planted bugs. They run on a scratch copy, never on your steps/."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from transformers.models.gpt2.modeling_gpt2 import GPT2MLP

from course.authoring import experiments, render
from course.check import hints
from course.outline import ROOT, SOLUTIONS, available, step_path
from harness import assert_close, build, forward, load_weights, solution, weight_reads
from reference import SMALL, hf_config, hidden_states, run, seeded, to_max_state

pytestmark = pytest.mark.course

#: Bugs planted in a copy of a solution: (step, the code as written, the buggy code, what
#: the *first* ✗ must then report). To plant several edits, give tuples of equal length.
PLANTED = {
    "exact GELU instead of tanh": (
        4, 'approximate="tanh"', 'approximate="none"', r"\(small\): the GELU is the exact, erf-based one.* — TODO 3 in "
    ),
    # F.relu is a kernel the course runs nowhere else: CI's cold first run compiles it once (20-60 s).
    "ReLU instead of GELU": (
        4, 'F.gelu(self.c_fc(x), approximate="tanh")', "F.relu(self.c_fc(x))", r"the activation is a ReLU.* — TODO 3 in "
    ),
    "c_fc hard-codes 4 * n_embd": (
        4, "Linear(config.n_embd, config.inner_dim)", "Linear(config.n_embd, 4 * config.n_embd)",
        r"MLP\.c_fc\.weight has shape \[256, 64\], but GPT-2's is \[64, 64\] — TODO 1 in ",
    ),
    "c_proj without a bias": (
        4, "Linear(config.inner_dim, config.n_embd)", "Linear(config.inner_dim, config.n_embd, bias=False)",
        r"MLP has no `c_proj\.bias` .* — TODO 2 in ",
    ),
    "wrong LayerNorm epsilon": (
        3, "eps: float = 1e-5", "eps: float = 1e-6", r"the output matches eps = 1e-06, not the eps = 1e-05 .* — TODO 3 in "
    ),
    "LayerNorm eps outside the root": (
        3, "(x - mean) * F.rsqrt(var + self.eps)", "(x - mean) / (1 / F.rsqrt(var) + self.eps)",
        r"eps is added outside the square root.* — TODO 3 in ",
    ),
    "LayerNorm with the sample variance": (
        3, "var = F.mean((x - mean) * (x - mean), axis=-1)",
        "n = int(x.shape[-1])\n        var = F.mean((x - mean) * (x - mean), axis=-1) * (n / (n - 1))",
        r"the variance divides by n - 1 \(the sample variance\).* — TODO 2 in ",
    ),
    "LayerNorm weight of the wrong shape": (
        3, "self.weight = Tensor.ones([dim])", "self.weight = Tensor.ones([1, dim])",
        r"LayerNorm\.weight has shape \[1, 64\], but GPT-2's is \[64\] — TODO 1 in ",
    ),
    "causal mask off by one, too open": (
        2, "num_upper=past_len,", "num_upper=past_len + 1,", r"too open by 1: .* sees the next 1 key"
    ),
    # What a newcomer hit: -1 reads as "no limit" at past_len 0, so nothing is masked there.
    "causal mask off by one, too closed": (
        2, "num_upper=past_len,", "num_upper=past_len - 1,", r"off by one, too closed: .* its own position"
    ),
    "causal mask shifted by 2": (2, "num_upper=past_len,", "num_upper=past_len + 2,", r"too open by 2"),
    "causal mask inverted": (2, "past_len, exclude=True)", "past_len, exclude=False)", r"the mask is inverted"),
    "causal mask ignores past_len": (2, "num_upper=past_len,", "num_upper=0,", r"ignores past_len"),
    "boolean causal mask": (
        2, "past_len, exclude=True)", "past_len, exclude=True) == 0", r"is a bool tensor; the mask is \*added\*.* TODO 1, 2 in "
    ),
    "1/0 causal mask": (
        2,
        ('float("-inf"))', "past_len, exclude=True)"),
        ("1.0)", "past_len, exclude=False)"),
        r"holds the values 0, 1 — that is a 1/0 \(boolean-style\) mask; an additive mask holds only 0",
    ),
    "layer norm size as a Dim": (
        3,
        "var = F.mean((x - mean) * (x - mean), axis=-1)",
        "n = x.shape[-1]\n        var = F.sum((x - mean) * (x - mean), axis=-1) / n",
        r"Unsafe cast from si64 to f\d+.*int\(x\.shape\[-1\]\).* \(TODO 2\)",
    ),
    "layer norm over the wrong axis": (
        3,
        ("mean = F.mean(x, axis=-1)", "(x - mean), axis=-1)"),
        ("mean = F.mean(x, axis=1)", "(x - mean), axis=1)"),
        r"statistics were not taken over the last axis: .* over axis 1 instead.* — TODO 2 in ",
    ),
    # Steps 05-11.
    "positions starting at 1": (
        6,
        "F.arange(past_len, past_len + seq_len,",
        "F.arange(past_len + 1, past_len + seq_len + 1,",
        r"embeddings of 7 tokens vs Hugging Face hidden_states\[0\] \(small\): positions start at 1, not 0.* — TODO 2 in ",
    ),
    "positions ignore past_len": (
        6, "F.arange(past_len, past_len + seq_len,", "F.arange(0, seq_len,",
        r"after past_len=5 .*: past_len is ignored: positions start at 0, not at past_len = 5 — TODO 2 in ",
    ),
    "wpe sized by the vocabulary": (
        6, "Embedding(config.n_positions, dim=config.n_embd)", "Embedding(config.vocab_size, dim=config.n_embd)",
        r"Embeddings\.wpe\.weight has shape \[96, 64\], but GPT-2's is \[32, 64\] — TODO 1 in ",
    ),
    "position embeddings not added": (
        6, "return super().forward(input_ids) + self.wpe(positions)", "return super().forward(input_ids)",
        r"\(small\): wpe is not added: these are the token embeddings alone — TODO 3 in ",
    ),
    "q, k, v split in the wrong order": (
        7, "q, k, v = F.split(", "k, q, v = F.split(",
        r"attention output for 2 tokens .* \(small\): c_attn's output was split as k, q, v; .* — TODO 5 in ",
    ),
    "no 1/sqrt(d) scaling": (
        7, " / math.sqrt(self.head_dim)", "", r"attend\(q, k, v, past_len=0\) .*: the scores are not scaled.* — TODO 3 in "
    ),
    "scores divided by head_dim": (
        7, " / math.sqrt(self.head_dim)", " / self.head_dim",
        r"attend\(q, k, v, past_len=0\) .*: the scores are divided by head_dim \(16\), not by √head_dim \(4\) — TODO 3 in ",
    ),
    "softmax over the query axis": (
        7, "F.softmax(scores, axis=-1)", "F.softmax(scores, axis=-2)",
        r"attend\(q, k, v, past_len=0\) .*: the softmax runs over the queries .* — TODO 3 in ",
    ),
    "no causal mask": (
        7, "        scores = scores + self.mask(seq_len, past_len)\n", "",
        r"attend\(q, k, v, past_len=0\) .*: no causal mask: .* — TODO 3 in ",
    ),
    "heads merged without moving the head axis back": (
        7, "y.transpose(1, 2).reshape(", "y.reshape(",
        r"merge_heads\(split_heads\(x\)\) vs x: merge_heads reshapes \[B, H, T, D\] straight to .* — TODO 4 in ",
    ),
    "heads split without moving the head axis": (
        7,
        "x = x.reshape([x.shape[0], x.shape[1], self.n_head, self.head_dim])\n        return x.transpose(1, 2)",
        "return x.reshape([x.shape[0], self.n_head, x.shape[1], self.head_dim])",
        r"split_heads\(x\) vs .*: split_heads reshapes \[B, T, C\] straight to \[B, H, T, D\].* — TODO 2 in ",
    ),
    "c_attn without a bias": (
        7, "Linear(config.n_embd, 3 * config.n_embd)", "Linear(config.n_embd, 3 * config.n_embd, bias=False)",
        r"CausalSelfAttention has no `c_attn\.bias` .* — TODO 1 in ",
    ),
    "residual adds the normalized input": (
        8,
        "return x + sublayer(norm(x))",
        "return norm(x) + sublayer(norm(x))",
        r"residual\(x, ln_1, attn\) vs GPT2Block's x \+ attn\(ln_1\(x\)\) \(small\): the normalized x is added "
        r"back, .* — TODO 1 in ",
    ),
    "untied LM head": (
        11,
        (
            "from max.experimental.nn import Module",
            "self.transformer = GPT2Model(config)\n",
            "return hidden @ self.transformer.wte.weight.T",
        ),
        (
            "from max.experimental.nn import Linear, Module",
            "self.transformer = GPT2Model(config)\n"
            "        self.lm_head = Linear(config.n_embd, config.vocab_size, bias=False)\n",
            "return self.lm_head(hidden)",
        ),
        r"has its own parameter lm_head\.weight: GPT-2 ties its head to the token embedding.* step 14 loads only "
        r"transformer\.wte\.weight and relies on the tie.* — TODO 1, 2 in ",
    ),
    "LM head without the transpose": (
        11,
        "self.transformer.wte.weight.T",
        "self.transformer.wte.weight",
        r"head\(hidden\) vs hidden @ wteᵀ \(small, square wte\): the head multiplies by wte, not by its transpose.* — "
        r"TODO 2 in ",
    ),
    # (Softmax, not log-softmax: a kernel the course does not use would compile afresh in CI, a minute.)
    "LM head returns probabilities": (
        11,
        ("from max.experimental.nn import Module", "return hidden @ self.transformer.wte.weight.T"),
        ("from max.experimental import functional as F\nfrom max.experimental.nn import Module",
         "return F.softmax(hidden @ self.transformer.wte.weight.T)"),
        r"head\(hidden\) vs .*: the head returns probabilities \(a softmax\).* — TODO 2 in ",
    ),
    "forward returns probabilities": (
        11,
        ("from max.experimental.nn import Module", "return self.head(self.transformer(input_ids))"),
        ("from max.experimental import functional as F\nfrom max.experimental.nn import Module",
         "return F.softmax(self.head(self.transformer(input_ids)))"),
        r"logits vs .* \(small, square wte\): forward returns probabilities \(a softmax of the logits\).* — TODO 3 in ",
    ),
    "body under another name": (
        11, "self.transformer = GPT2Model(config)", "self.body = GPT2Model(config)",
        r"GPT2LMHeadModel has no `transformer\.wte\.weight` \(the name GPT-2's checkpoint uses\) — TODO 1 in ",
    ),
    # Issue 25: each of the next three was reported only as a shape or as the wrong mistake.
    "logits scaled by 1/sqrt(n_embd)": (
        11,
        ("from max.experimental.nn import Module", "return hidden @ self.transformer.wte.weight.T"),
        ("import math\n\nfrom max.experimental.nn import Module",
         "return hidden @ self.transformer.wte.weight.T / math.sqrt(int(hidden.shape[-1]))"),
        r"head\(hidden\) vs hidden @ wteᵀ \(small, square wte\): the logits are divided by √n_embd \(8\).* — TODO 2 in ",
    ),
    "LM head multiplies by wpe": (
        11, "return hidden @ self.transformer.wte.weight.T", "return hidden @ self.transformer.wpe.weight.T",
        r"head\(hidden\) vs hidden @ wteᵀ \(small, square wte\): the head multiplies by wpe, the position table.* "
        r"— TODO 2 in ",
    ),
    "LM head with a bias": (
        11,
        ("self.transformer = GPT2Model(config)\n", "return hidden @ self.transformer.wte.weight.T"),
        ("self.transformer = GPT2Model(config)\n        self.head_bias = Tensor.zeros([config.vocab_size])\n",
         "return hidden @ self.transformer.wte.weight.T + self.head_bias"),
        r"GPT2LMHeadModel has its own parameter head_bias, of shape \[64\]: a bias on the logits; GPT-2's head has "
        r"none.* — TODO 1, 2 in ",
    ),
    "block ignores the config's epsilon": (
        9,
        "self.ln_2 = LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)",
        "self.ln_2 = LayerNorm(config.n_embd)",
        r"Block output vs Hugging Face GPT2Block \(n_inner=48, eps=0\.1\): ln_2 is built without the config's "
        r"epsilon: .* — TODO 1 in ",
    ),
    "block uses ln_1 twice": (
        9, "return residual(x, self.ln_2, self.mlp)", "return residual(x, self.ln_1, self.mlp)",
        r"Block output .* \(small\): ln_1 is used before both branches.* — TODO 2 in ",
    ),
    "block is post-norm": (
        9,
        "x = residual(x, self.ln_1, self.attn)\n        return residual(x, self.ln_2, self.mlp)",
        "x = self.ln_1(x + self.attn(x))\n        return self.ln_2(x + self.mlp(x))",
        r"Block output .* \(small\): the layer norms come after the residual additions \(post-norm.* — TODO 2 in ",
    ),
    "block runs the MLP first": (
        9,
        "x = residual(x, self.ln_1, self.attn)\n        return residual(x, self.ln_2, self.mlp)",
        "x = residual(x, self.ln_2, self.mlp)\n        return residual(x, self.ln_1, self.attn)",
        r"Block output .* \(small\): the MLP branch runs before the attention branch.* — TODO 2 in ",
    ),
    # Issue 25: one LayerNorm object under both names took ln_2's weights and read as "ln_1 twice".
    "block shares one LayerNorm": (
        9, "self.ln_2 = LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)", "self.ln_2 = self.ln_1",
        r"Block's ln_1 and ln_2 are one LayerNorm: .* — TODO 1 in ",
    ),
    "residual's arguments swapped in the attention branch": (
        9, "x = residual(x, self.ln_1, self.attn)", "x = residual(x, self.attn, self.ln_1)",
        r"Block output .* \(small\): residual\(\)'s norm and sublayer are swapped in the attention branch: it computes "
        r"x \+ ln_1\(attn\(x\)\).* — TODO 2 in ",
    ),
    "block with another epsilon": (
        9,
        "self.ln_2 = LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)",
        "self.ln_2 = LayerNorm(config.n_embd, eps=1e-6)",
        r"\(n_inner=48, eps=0\.1\): ln_2 is built without the config's epsilon: its eps is 1e-06, this config's "
        r"layer_norm_epsilon is 0\.1 — TODO 1 in ",
    ),
    "model skips ln_f": (10, "return self.ln_f(x)", "return x", r"\(small\): ln_f is not applied: .* — TODO 2 in "),
    "model skips its first block": (
        10, "for block in self.h:", "for block in self.h[1:]:",
        r"the blocks ran in the order \[1\]; GPT-2 runs h\[0\].* — TODO 2 in ",
    ),
    "model runs its blocks in reverse": (
        10, "for block in self.h:", "for block in reversed(self.h):",
        r"\(small\): the blocks run in reverse order, h\[1\] first; .* — TODO 2 in ",
    ),
    # Issue 25: reported as "h[1] does not read h[0]'s output".
    "ln_f before the last block": (
        10,
        "for block in self.h:\n            x = block(x)\n        return self.ln_f(x)",
        "for block in self.h[:-1]:\n            x = block(x)\n        return self.h[-1](self.ln_f(x))",
        r"\(small\): ln_f runs before the last block, h\[1\]; .* — TODO 2 in ",
    ),
    "model without position embeddings": (
        10, "x = super().forward(input_ids)", "x = self.wte(input_ids)",
        r"\(small\): the position embeddings are missing: .* — TODO 2 in ",
    ),
    "ln_f ignores the config's epsilon": (
        10, "self.ln_f = LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)", "self.ln_f = LayerNorm(config.n_embd)",
        r"\(3 blocks, n_inner=48, eps=0\.1\): ln_f is built without the config's epsilon: .* — TODO 1 in ",
    ),
    # Step 12.
    "stand-ins at chr(256 + byte)": (
        12, "table[byte] = chr(256 + extra)", "table[byte] = chr(256 + byte)",
        r"bytes_to_unicode\(\)\[127\] is 'ſ', GPT-2's is 'ġ': a byte that moves goes to chr\(256 \+ byte\).* — TODO 1 in ",
    ),
    "BPE merges the highest-ranked pair first": (
        12,
        "rank, i = heapq.heappop(heap)",
        "rank, i = heap.pop(heap.index(max(heap)))",
        r"encode\(ascii text .*\) differs from Hugging Face's at token 0 of \d+: got \d+ .*, expected 15496 'Hello'; "
        r"bpe\('Hello'\) gives .*: the loop merges the highest-ranked pair first.* — TODO 2 in ",
    ),
    # What a newcomer wrote: right ids, but each word walks all 50,000 merges (13 minutes for
    # 1 MB). Planted in front of the heap loop, which it leaves unreachable.
    "BPE walks the merges in file order": (
        12,
        "        heap = [(rank, i) for i in range(n - 1) if (rank := rank_at(i)) is not None]\n",
        "        symbols = list(word)\n"
        "        for pair in self.ranks:\n"
        "            i = 0\n"
        "            while i < len(symbols) - 1:\n"
        "                if (symbols[i], symbols[i + 1]) == pair:\n"
        "                    symbols[i:i + 2] = [pair[0] + pair[1]]\n"
        "                else:\n"
        "                    i += 1\n"
        "        return symbols\n"
        "        heap = [(rank, i) for i in range(n - 1) if (rank := rank_at(i)) is not None]\n",
        r"bpe on one 32-letter word looked at 16,384 merges when merges\.txt had 16,384, and 64 when it had 64: it walks "
        r"merges\.txt in file order, each merge once.* — TODO 2 in ",
    ),
    # The course's merge loop before issue 16: right ids, but it rescans the whole word for
    # each merge (100,000 letters without a space: 54-81 s). Planted in front of the heap loop,
    # which it leaves unreachable.
    "BPE merge loop rescans the whole piece": (
        12,
        "        heap = [(rank, i) for i in range(n - 1) if (rank := rank_at(i)) is not None]\n",
        "        while len(symbols) > 1:\n"
        "            pairs = [pair for pair in zip(symbols, symbols[1:]) if pair in self.ranks]\n"
        "            if not pairs:\n"
        "                break\n"
        "            best = min(pairs, key=self.ranks.__getitem__)\n"
        "            merged, i = [], 0\n"
        "            while i < len(symbols):\n"
        "                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:\n"
        "                    merged.append(symbols[i] + symbols[i + 1])\n"
        "                    i += 2\n"
        "                else:\n"
        "                    merged.append(symbols[i])\n"
        "                    i += 1\n"
        "            symbols = merged\n"
        "        return symbols\n"
        "        heap = [(rank, i) for i in range(n - 1) if (rank := rank_at(i)) is not None]\n",
        r"bpe on one word of 4,000 letters looked up [\d,]+ merge ranks, \d+× as many as on 500 letters .*: the merge "
        r"loop rescans the whole word for each merge, so its cost grows with the length squared .* — TODO 2 in ",
    ),
    "BPE merges a popped pair that has changed since": (
        12,
        "            if rank_at(i) != rank:\n",
        "            if not symbols[i] or after[i] >= n:\n",
        r"bpe\('CafÃ©'\) made the token 'Caf', which is not in vocab\.json: the merge loop joined two symbols whose "
        r"pair is no merge .* — TODO 2 in ",
    ),
    "a piece's characters instead of its UTF-8 bytes": (
        12, 'piece.encode("utf-8")', "map(ord, piece)",
        r"encode_piece\('Café'\) gives .*: it gives the ids of the piece's characters, not of its UTF-8 bytes .* — TODO 3 in ",
    ),
    "PATTERN without the optional leading space": (
        12, r"| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|", r"|\p{L}+|\p{N}+|[^\s\p{L}\p{N}]+|",
        r"encode\(ascii text .*\) differs .* at token 1 of \d+: got 220 ' ', expected 995 ' world'; PATTERN cuts the text "
        r"into .*: PATTERN is without the optional leading space .* — PATTERN is given at the top of steps/step_12_tokenizer\.py",
    ),
    "encode_ordinary cuts with a regex without the contractions": (
        12, "for piece in PATTERN.findall(text):",
        r'for piece in regex.findall(r""" ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""", text):',
        r"encode\(contractions text .*\) differs .*; encode_ordinary cuts the text with a regex without the contractions "
        r".* — TODO 4 in ",
    ),
    "no word cache": (
        12,
        "piece_ids = self.cache.get(piece)",
        "piece_ids = None",
        r"500 times looked up [\d,]+ merge ranks, 500× as many as encoding it once .* — TODO 4 in ",
    ),
    "word cache never emptied": (
        12,
        "                if len(self.cache) >= CACHE_SIZE:\n                    self.cache.clear()",
        "                if False:\n                    pass",
        r"after 10,001 different pieces, self\.cache holds 10,001, more than CACHE_SIZE = 10,000: .* — TODO 4 in ",
    ),
    "a word cache shared by every Tokenizer": (
        12,
        ("CACHE_SIZE = 10_000\n", "piece_ids = self.cache.get(piece)", "piece_ids = self.cache[piece] ="),
        ("CACHE_SIZE = 10_000\nSHARED: dict[str, list[int]] = {}\n", "piece_ids = SHARED.get(piece)", "piece_ids = SHARED[piece] ="),
        r"with a Tokenizer built from other files gave the ids of the first Tokenizer, GPT-2's: the word cache is "
        r"shared between tokenizers .* — TODO 4 in ",
    ),
    "<|endoftext|> not treated as special": (
        12,
        "enumerate(text.split(END_OF_TEXT))",
        "enumerate([text])",
        r"encode\(endoftext text .*\) differs .* at token \d+ of \d+: .*; <\|endoftext\|> \(id \d+\) is there 0 times, "
        r"expected 4 — TODO 5 in ",
    ),
    "encode cut short": (
        12, "        return ids\n        # ANCHOR_END: special", "        return ids[:128]\n        # ANCHOR_END: special",
        r"encode\(2,000 random letters text .*\) differs .* at token 128 of \d+: got nothing \(the end\), .*; encode stops "
        r"after 128 tokens of \d+: nothing may cut the ids short — TODO 5 in ",
    ),
    "decode with errors=strict": (
        12,
        'data.decode("utf-8", errors="replace")',
        'data.decode("utf-8", errors="strict")',
        r"\(a lone 0xff byte\) raised UnicodeDecodeError; .*errors=\"replace\" .* — TODO 6 in ",
    ),
    "decode takes True as an id": (
        12,
        "if isinstance(i, bool) or not isinstance(i, numbers.Integral):",
        "if not isinstance(i, numbers.Integral):",
        r"decode\(\[.*, True\]\) was accepted, but True is a bool, not a token id .* — keep the given check at the top of decode",
    ),
    # Step 13.
    "temperature multiplies instead of dividing": (
        13, "/ temperature\n", "* temperature\n",
        r"filter_logits \(T=0\.7\) vs Hugging Face's warpers: the logits are multiplied by the temperature \(0\.7\); "
        r"divide them by it — TODO 1 in ",
    ),
    "temperature applied after the softmax": (
        13,
        ("logits = np.asarray(logits, dtype=np.float64) / temperature", "probs = np.exp(filtered - filtered.max())"),
        ("logits = np.asarray(logits, dtype=np.float64)", "probs = np.exp(filtered - filtered.max()) / temperature"),
        r"filter_logits \(T=0\.7\) vs Hugging Face's warpers: the logits are not divided by the temperature .* — TODO 1 in ",
    ),
    "temperature applied after the filters": (
        13,
        ("logits = np.asarray(logits, dtype=np.float64) / temperature", "    return logits\n\n\n# ANCHOR_END: filter_logits"),
        ("logits = np.asarray(logits, dtype=np.float64)", "    return logits / temperature\n\n\n# ANCHOR_END: filter_logits"),
        r"filter_logits \(T=1\.3, top-k 10, top-p 0\.6\) keeps \d+ tokens, Hugging Face keeps \d+ tokens: the temperature "
        r"is applied after the filters.* — TODO 1 in ",
    ),
    "top-k keeps one token too many": (
        13, "np.sort(logits)[-top_k]", "np.sort(logits)[-top_k - 1]",
        r"filter_logits \(top-k 5\) keeps 6 tokens, Hugging Face keeps 5 tokens: top-k keeps k \+ 1 tokens.* — TODO 2 in ",
    ),
    "top-k cuts tokens tied with the k-th largest": (
        13,
        "kth_largest = np.sort(logits)[-top_k]\n        logits = np.where(logits < kth_largest, -np.inf, logits)",
        'logits[np.argsort(-logits, kind="stable")[top_k:]] = -np.inf',
        r"filter_logits \(top-k 1, the k-th largest tied with \d+ others\) keeps 1 token, Hugging Face keeps \d+ tokens: "
        r"top-k keeps exactly k tokens and cuts some that are tied .* — TODO 2 in ",
    ),
    "top-p drops the token that crosses p": (
        13, "np.cumsum(p) - p >= top_p", "np.cumsum(p) >= top_p",
        r"filter_logits \(top-p 0\.8\) keeps \d+ tokens?, Hugging Face keeps \d+ tokens?: top-p cuts the token that "
        r"crosses top_p .* — TODO 3 in ",
    ),
    "top-p keeps a token at its exact boundary": (
        13, "np.cumsum(p) - p >= top_p", "np.cumsum(p) - p > top_p",
        r"filter_logits \(top-p 0\.25 on 64 tokens of probability 1/64\) keeps 17 tokens, Hugging Face keeps 16 tokens: "
        r"top-p keeps a token whose predecessors add up to exactly top_p.* — TODO 3 in ",
    ),
    "top-p leaves exact ties in no fixed order": (
        13, 'order = np.argsort(-logits, kind="stable")', "order = np.argsort(-logits)",
        r"filter_logits \(top-p [\d.]+, the cut inside a group of equal logits\) keeps ids .* at an exact tie the course "
        r"keeps the lower ids .* — TODO 3 in ",
    ),
    "filter_logits takes a batch": (
        13, "    if np.ndim(logits) != 1:  # given: one row, not a batch\n", "    if False:\n",
        r"filter_logits\(a \[2, \d+\] batch, temperature=1\.0, top_p=0\.8\) raised IndexError: .* expected a clear "
        r"ValueError saying that it takes one \[vocab_size\] row",
    ),
    "a temperature of 5e-324 let through": (
        13, "    if 0 < temperature < smallest:", "    if False:",
        r"next_token\(…, temperature=1\.89\d*e-270\) was accepted, but a float32 logit divided by it can overflow — "
        r"keep the given check at the top of next_token",
    ),
    "sampling ignores the filters": (
        13,
        "filtered = filter_logits(logits, temperature, top_k, top_p)",
        "filtered = np.asarray(logits, dtype=np.float64) / temperature",
        r"next_token\(\{'temperature': 1\.0, 'top_k': 1\}\) picked token \d+ on row \d+, but the largest logit is token \d+ — TODO 4 in ",
    ),
    "next_token returns a NumPy integer": (
        13, "return int(np.argmax(logits))", "return np.argmax(logits)",
        r"next_token\(…, \{'temperature': 0\.0\}\) returned numpy\.int64 \d+; its docstring promises a "
        r"Python int .* — TODO 4 in ",
    ),
    "next_token ignores the rng it is given": (
        13, "return int(rng.choice(", "return int(np.random.default_rng().choice(",
        r"next_token\(…, temperature=1\.0\) drew 20 tokens without using the rng it was given .* — TODO 4 in ",
    ),
    "softmax without subtracting the largest logit": (
        13, "probs = np.exp(filtered - filtered.max())", "probs = np.exp(filtered)",
        r"next_token\(…, temperature=1e-05\) overflows: the tempered logits reach [\d.e+]+, and np\.exp .* subtract "
        r"the largest logit before np\.exp.* — TODO 4 in steps/step_13_generation\.py, line \d+",
    ),
    "sampling ignores the temperature": (
        13,
        "probs = np.exp(filtered - filtered.max())",
        "probs = np.exp(filtered * temperature - (filtered * temperature).max())",
        r"next_token \(T=0\.7\): the frequencies of 20000 draws do not follow .*chi-square.* — TODO 4 in ",
    ),
    "generation runs past <|endoftext|>": (
        13, "        if token == eos_id:\n            return\n", "", r"it should yield the end-of-text token and stop — TODO 5 in "
    ),
    "the new token never appended": (
        13, "        ids.append(token)\n", "",
        r"greedy generate gave \[.*\]: the same token every time, because each step scores the prompt .* append .* — TODO 5 in ",
    ),
    "the sampler re-seeded at every step": (
        13, "next_token(next_logits(ids), rng,", "next_token(next_logits(ids), np.random.default_rng(seed),",
        r"generate\(seed=7\) drew token \d+ all 16 times: the generator starts over at each step .* — TODO 5 in ",
    ),
    # Found by mutation testing (course.authoring.mutation): a survivor of step 03's TODO code a learner could write.
    "the variance as E[x²] - E[x]²": (
        3, "var = F.mean((x - mean) * (x - mean), axis=-1)", "var = F.mean(x * x, axis=-1) - mean * mean",
        r"off by up to [\d.]+ once every feature is shifted by 500 .*: the variance is taken in a way that cancels in "
        r"float32, such as E\[x²\] − E\[x\]², .* — TODO 2 in ",
    ),
    # Step 01: one for each TODO.
    "GPT-2's context as 512 positions": (
        1, "    n_positions: int = 1024\n", "    n_positions: int = 512\n",
        r"GPT2Config\(\)\.n_positions is 512, but GPT-2 small's is 1024 — TODO 1 in ",
    ),
    "inner_dim ignores n_inner": (
        1, "return self.n_inner if self.n_inner is not None else 4 * self.n_embd", "return 4 * self.n_embd",
        r"inner_dim is 256 for n_embd=64, n_inner=100; expected 100 — TODO 3 in ",
    ),
    "head_dim as a float": (
        1, "return self.n_embd // self.n_head", "return self.n_embd / self.n_head",
        r"head_dim is 64\.0 for n_embd=768, n_head=12; expected the int 64 .* — TODO 4 in ",
    ),
    "from_hf leaves n_inner out": (
        1, "for f in fields(cls)})", 'for f in fields(cls) if f.name != "n_inner"})',
        r"from_hf gave n_inner=None, but the transformers config has 48 — TODO 5 in ",
    ),
    # Found by mutation testing (course.authoring.mutation): a survivor of step 01's TODO code a learner could write.
    "the config's refusal names no sizes": (
        1, 'f"n_embd={self.n_embd} does not split into n_head={self.n_head} equal heads"', '"the heads do not split evenly"',
        r"raised ValueError\('the heads do not split evenly'\), which does not name the two sizes that disagree, 64 "
        r"and 5: .* — TODO 2 in ",
    ),
    # Found by mutation testing (course.authoring.mutation): a survivor of step 12's TODO code a learner could write.
    "the word cache holds one piece too many": (
        12, "if len(self.cache) >= CACHE_SIZE:", "if len(self.cache) > CACHE_SIZE:",
        r"after 10,001 different pieces, self\.cache holds 10,001, more than CACHE_SIZE = 10,000: .* — TODO 4 in ",
    ),
    # Found by mutation testing (course.authoring.mutation): the two survivors of step 13's TODO code a learner could write.
    "top-p's softmax without subtracting the largest logit": (
        13, "p = np.exp(logits[order] - logits[order[0]])", "p = np.exp(logits[order])",
        r"filter_logits \(T=1e-4, top-p 0\.9\) keeps 320 tokens, Hugging Face keeps 1 token: its np\.exp overflows.*"
        r" — TODO 3 in steps/step_13_generation\.py, line \d+",
    ),
    "generate leaves top_p out": (
        13, "rng, temperature, top_k, top_p)", "rng, temperature, top_k)",
        r"generate\(…, top_p=1e-09, seed=11\) gave .*: pass temperature, top_k and top_p on to next_token — TODO 5 in ",
    ),
    # Step 15. Each is caught eagerly, before the cached model is compiled: none compiles a new graph.
    "cached mask blocks the past": (
        15, "F.zeros([seq_len, past_len])", "F.full([seq_len, past_len], float(\"-inf\"))",
        r"CachedSelfAttention\.mask\(1, 7\) vs causal_mask\(1, 7\): the cached keys are masked \(-inf\).* — TODO 1 in ",
    ),
    "cached mask with its parts swapped": (
        15, "F.concat([F.zeros([seq_len, past_len]), causal_mask(seq_len, 0)], axis=1)",
        "F.concat([causal_mask(seq_len, 0), F.zeros([seq_len, past_len])], axis=1)",
        r"CachedSelfAttention\.mask\(3, 4\) vs causal_mask\(3, 4\): the two parts are in the wrong order.* — TODO 1 in ",
    ),
    "cached mask not offset by past_len": (
        15, "F.concat([F.zeros([seq_len, past_len]), causal_mask(seq_len, 0)], axis=1)",
        'F.concat([causal_mask(seq_len, 0), F.full([seq_len, past_len], float("-inf"))], axis=1)',
        r"CachedSelfAttention\.mask\(1, 7\) vs causal_mask\(1, 7\): the mask is not offset by past_len.* — TODO 1 in ",
    ),
    "new keys put before the past": (
        15, "k = F.concat([past_k, k], axis=2)\n        v = F.concat([past_v, v], axis=2)",
        "k = F.concat([k, past_k], axis=2)\n        v = F.concat([v, past_v], axis=2)",
        r"cached attention \(4 cached, then 3 new\) vs GPT2Attention over all 7: the new keys and values come before "
        r"the cached ones.* — TODO 2 in ",
    ),
    "keys joined along the heads axis": (
        15, "k = F.concat([past_k, k], axis=2)", "k = F.concat([past_k, k], axis=1)",
        r"CachedSelfAttention: 7 tokens after 0 cached failed: ValueError: Concat inputs differ on non-concat axis 2.*"
        r"\(TODO 2\): the past and new keys \(and values\) are joined along another axis than 2, the token axis",
    ),
    "attention output not added to x": (
        15, "x = x + attn_out", "x = attn_out",
        r"cached block \(4 cached, then 3 new\) vs GPT2Block over all 7: the attention's output replaces x.* — TODO 3 in ",
    ),
    # What a newcomer saw only after compiling: max |Δ| ≈ 7 from the first decoded token on.
    "positions restart at 0 with the cache": (
        15, "Embeddings.forward(body, input_ids, past_len=past_keys[0].shape[2])", "Embeddings.forward(body, input_ids)",
        r"eager logits with the cache .*: the positions restart at 0 with every call.* — TODO 4 in ",
    ),
    # What a newcomer saw after a 29-minute run. The planted CachedNextLogits compiles the
    # model (the course's one graph, warm) on its first call, which fails at once.
    "the model compiled on every call": (
        15, "self.run = model.compile(ids, [self.kv] * layers, [self.kv] * layers)",
        "self.run = type('EveryCall', (), {'engine_model': property(\n"
        "            lambda _: model.compile(ids, [self.kv] * layers, [self.kv] * layers).engine_model)})()",
        r"the prefill of 5 tokens compiled a new MAX graph: .* — CachedNextLogits is given code in "
        r"steps/step_15_kv_cache\.py",
    ),
    "cached model counts layer 1's cache": (
        15, "past_len=past_keys[0].shape[2])", "past_len=past_keys[1].shape[2])",
        r"CachedGPT2LMHeadModel\.forward\(ids, past_keys, past_values\) failed: IndexError: list index out of range"
        r".*\(TODO 4\)",
    ),
    # Step 16.
    "wpe counted in the bytes per token": (
        16, "+ 2 * c + config.vocab_size * c", "+ 2 * c + config.vocab_size * c + config.n_positions * c",
        r"wpe is counted; a decode step reads one row of it.* — TODO 1 in ",
    ),
    "one row multiplied by W transposed": (
        16, "return (weight @ column)", "return (weight.T @ column)",
        r"the row is multiplied by W, not by Wᵀ.* — TODO 2 in ",
    ),
    "one row read as x @ W transposed": (
        16, "return (weight @ column).reshape([*x.shape[:-1], weight.shape[0]])", "return x @ weight.T",
        r"one_row gives the right numbers, but its graph transposes the weight.* — TODO 2 in ",
    ),
    "head by step 11's matmul": (
        16, "return self.one_row(hidden, self.transformer.wte.weight)", "return hidden @ self.transformer.wte.weight.T",
        r"the head gives the right logits, but called self.one_row 0 times.* — TODO 4 in ",
    ),
    "decode linear without its bias": (
        16, "return self.one_row(x, self.weight) + self.bias", "return self.one_row(x, self.weight)",
        r"DecodeLinear vs Conv1D on one row: the bias is left out.* — TODO 3 in ",
    ),
    "head reads wpe": (
        16, "self.one_row(hidden, self.transformer.wte.weight)", "self.one_row(hidden, self.transformer.wpe.weight)",
        r"the head gives shape \[1, 64\] for one hidden vector, expected \[1, 320\].* — TODO 4 in ",
    ),
    "cache attention softmax over the heads": (
        16, "weights = F.softmax(scores, axis=0)", "weights = F.softmax(scores, axis=1)",
        r"attend_in_place vs scaled_dot_product_attention \(1 cached token\): the softmax runs over the heads.* — TODO 5 in ",
    ),
    "cache attention without the new token": (
        16, "return (weights[:past] * past_v).sum(0) + weights[past:] * v",
        "return (F.softmax(scores[:past], axis=0) * past_v).sum(0)",
        r"the new token's own key and value are left out.* — TODO 5 in ",
    ),
    # Step 14.
    "config.json ignored": (
        14,
        "return GPT2Config(**{key: value for key, value in values.items() if key in names})",
        "return GPT2Config()",
        r"config_from_json\(a small config\.json\)\.vocab_size is 50257, the file says \d+ — TODO 1 in ",
    ),
    "attn.bias buffers kept": (
        14,
        'key.endswith((".attn.bias", ".attn.masked_bias")) or ',
        "",
        r"is_weight\('h\.0\.attn\.bias'\) is True, but it is the attention's causal-mask buffer.* — TODO 2 in ",
    ),
    "c_attn.bias dropped as a buffer": (
        14,
        '(".attn.bias", ".attn.masked_bias")',
        '("attn.bias", "attn.masked_bias")',
        r"is_weight\('transformer\.h\.0\.attn\.c_attn\.bias'\) is False, but it is c_attn's bias.* — TODO 2 in ",
    ),
    "prefix added twice": (
        14,
        "return key if key.startswith(PREFIX) else PREFIX + key",
        "return PREFIX + key",
        r"max_name\('transformer\.h\.0\.attn\.c_attn\.bias'\) is 'transformer\.transformer\..*; the prefix is "
        r"there twice — TODO 3 in ",
    ),
    "no prefix for the original gpt2 layout": (
        14,
        "return key if key.startswith(PREFIX) else PREFIX + key",
        "return key",
        r"max_name\('h\.0\.attn\.c_attn\.bias'\) is 'h\.0\.attn\.c_attn\.bias', expected "
        r"'transformer\.h\.0\.attn\.c_attn\.bias' \(GPT2LMHeadModel's name\) — TODO 3 in ",
    ),
    "Conv1D weights not transposed": (
        14,
        "return value.T",
        "return value",
        r"to_max_layout\('transformer\.h\.0\.attn\.c_attn\.weight', a \[4, 12\] weight\) returned it as stored; "
        r"it is a Conv1D weight.* — TODO 4 in ",
    ),
    "square attn.c_proj left untransposed": (
        14,
        'if name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):',
        'if name.endswith(("c_attn.weight", "mlp.c_proj.weight", "c_fc.weight")):',
        r"to_max_layout\('transformer\.h\.0\.attn\.c_proj\.weight', a \[4, 4\] weight\) returned it as stored; .*"
        r"it is square, so it would load without complaint.* — TODO 4 in ",
    ),
    "every 2-D weight transposed": (
        14,
        'if name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):',
        "if value.ndim == 2:",
        r"to_max_layout\('transformer\.wte\.weight', a \[10, 4\] weight\) transposed it; only c_attn, c_proj and "
        r"c_fc weights are stored \[in, out\].* — TODO 4 in ",
    ),
    # Issue 25: caught only by GPT2Config's check that n_embd splits into heads.
    "n_embd read from n_ctx": (
        14,
        "return GPT2Config(**{key: value for key, value in values.items() if key in names})",
        "values = dict(values, n_embd=values[\"n_ctx\"])\n"
        "    return GPT2Config(**{key: value for key, value in values.items() if key in names})",
        r"config_from_json\(gpt2's config\.json\) reads n_embd from the file's n_ctx.* — TODO 1 in ",
    ),
    # Part II · the Llama family.
    "Llama context of 2048": (
        17, "max_position_embeddings: int = 8192", "max_position_embeddings: int = 2048",
        r"LlamaConfig\(\)\.max_position_embeddings is 2048, but SmolLM2-135M's is 8192 — TODO 1 in ",
    ),
    "key/value heads not validated": (
        17, "if self.num_attention_heads % self.num_key_value_heads != 0:", "if False:",
        r"LlamaConfig\(hidden_size=576, num_attention_heads=9, num_key_value_heads=2\) was accepted; 9 does not "
        r"split into 2 equal parts — TODO 2 in ",
    ),
    "Llama head_dim as a float": (
        17, "return self.hidden_size // self.num_attention_heads", "return self.hidden_size / self.num_attention_heads",
        r"LlamaConfig\.head_dim is 64\.0 for hidden_size=576, .*LlamaAttention uses the int 64 .* — TODO 3 in ",
    ),
    "key/value groups upside down": (
        17, "return self.num_attention_heads // self.num_key_value_heads",
        "return self.num_key_value_heads // self.num_attention_heads",
        r"LlamaConfig\.num_key_value_groups is 0 for .*LlamaAttention uses the int 3 .* — TODO 4 in ",
    ),
    "rope_theta read as an attribute": (
        17,
        ('values = {f.name: getattr(hf_config, f.name) for f in fields(cls) if f.name != "rope_theta"}',
         'return cls(**values, rope_theta=hf_config.rope_parameters["rope_theta"])'),
        ("values = {f.name: getattr(hf_config, f.name) for f in fields(cls)}", "return cls(**values)"),
        r"from_hf read hf_config\.rope_theta, which transformers 5 no longer has: the base is in "
        r"hf_config\.rope_parameters\[\"rope_theta\"\] \(here 100000\.0\) — TODO 5 in ",
    ),
    "RMSNorm with a bias": (
        18, "self.weight = Tensor.ones([dim])", "self.weight = Tensor.ones([dim])\n        self.bias = Tensor.zeros([dim])",
        r"RMSNorm has parameters Llama's checkpoint does not: bias — TODO 1 in ",
    ),
    "RMSNorm subtracts the mean": (
        18,
        ("mean_square = F.mean(x * x, axis=-1)", "return x * F.rsqrt("),
        ("mean = F.mean(x, axis=-1)\n        mean_square = F.mean((x - mean) * (x - mean), axis=-1)",
         "return (x - mean) * F.rsqrt("),
        r"RMSNorm\(64\) vs LlamaRMSNorm: the mean is subtracted, as in LayerNorm: .* — TODO 2, 3 in ",
    ),
    "RMSNorm sums the squares": (
        18, "F.mean(x * x, axis=-1)", "F.sum(x * x, axis=-1)", r"the squares are summed, not averaged.* — TODO 2 in ",
    ),
    "RMSNorm eps outside the root": (
        18, "x * F.rsqrt(mean_square + self.eps)", "x / (1 / F.rsqrt(mean_square) + self.eps)",
        r"eps is added outside the square root.* — TODO 3 in ",
    ),
    "RMSNorm scaled by 1 + weight": (
        18, "F.rsqrt(mean_square + self.eps) * self.weight", "F.rsqrt(mean_square + self.eps) * (1 + self.weight)",
        r"the scale is \(1 \+ weight\), as in Gemma's RMSNorm.* — TODO 3 in ",
    ),
    "wrong RMSNorm epsilon": (
        18, "eps: float = 1e-5", "eps: float = 1e-6",
        r"the output matches eps = 1e-06, not the eps = 1e-05 .* — TODO 3 in ",
    ),
    "RoPE base hard-coded to 10000": (
        19, "1.0 / theta ** (", "1.0 / 10000.0 ** (",
        r"\(small\): the frequencies use theta = 10000, not the theta = 100000 rope_tables was given .* — TODO 1 in ",
    ),
    "RoPE angles interleaved (GPT-J)": (
        19, "angles = F.concat([angles, angles], axis=-1)",
        "angles = F.stack([angles, angles], axis=-1).reshape([seq_len, head_dim])",
        r"cos and sin for 7 tokens after 0 \(small\): each angle is repeated in place \(a1, a1, a2, a2, …\), the "
        r"interleaved GPT-J layout.* — TODO 2 in ",
    ),
    "RoPE positions ignore past_len": (
        19, "F.arange(past_len, past_len + seq_len, dtype=DType.float32)", "F.arange(0, seq_len, dtype=DType.float32)",
        r"cos and sin for 3 tokens after 5 \(small\): past_len is ignored: positions start at 0, not at past_len = 5 "
        r"— TODO 2 in ",
    ),
    "RoPE frequencies not inverted": (
        19, "1.0 / theta ** (", "theta ** (",
        r"cos and sin for 7 tokens after 0 \(small\): the frequencies are theta \*\* \(\+2i / head_dim\).* — TODO 1 in ",
    ),
    "rotate_half the other way": (
        19, "F.concat([-x2, x1], axis=-1)", "F.concat([x2, -x1], axis=-1)",
        r"rotate_half\(x\) vs Hugging Face's: the halves come back as \[x2, -x1\].* — TODO 3 in ",
    ),
    "rotated half subtracted": (
        19, "return x * cos + rotate_half(x) * sin", "return x * cos - rotate_half(x) * sin",
        r"apply_rope\(q, cos, sin\) for 7 tokens after 0 \(small\): the rotated half is subtracted.* — TODO 4 in ",
    ),
    "up_proj with a bias": (
        20, "self.up_proj = Linear(config.hidden_size, config.intermediate_size, bias=False)",
        "self.up_proj = Linear(config.hidden_size, config.intermediate_size)",
        r"LlamaMLP has parameters Llama's checkpoint does not: up_proj\.bias — TODO 1 in ",
    ),
    "down_proj with a bias": (
        20, "Linear(config.intermediate_size, config.hidden_size, bias=False)",
        "Linear(config.intermediate_size, config.hidden_size)",
        r"LlamaMLP has parameters Llama's checkpoint does not: down_proj\.bias — TODO 2 in ",
    ),
    "gate and up swapped": (
        20, "F.silu(self.gate_proj(x)) * self.up_proj(x)", "F.silu(self.up_proj(x)) * self.gate_proj(x)",
        r"\(small\): gate_proj and up_proj trade places.* — TODO 3 in ",
    ),
    "GELU in the gate": (
        20, "F.silu(self.gate_proj(x))", 'F.gelu(self.gate_proj(x), approximate="tanh")',
        r"\(small\): the activation is GELU \(GPT-2's\).* — TODO 3 in ",
    ),
    "SiLU on the product": (
        20, "F.silu(self.gate_proj(x)) * self.up_proj(x)", "F.silu(self.gate_proj(x) * self.up_proj(x))",
        r"\(small\): SiLU is applied to the product.* — TODO 3 in ",
    ),
    "k_proj as wide as q_proj": (
        21, "self.k_proj = Linear(config.hidden_size, self.n_kv_head * self.head_dim, bias=False)",
        "self.k_proj = Linear(config.hidden_size, self.n_head * self.head_dim, bias=False)",
        r"LlamaAttention\.k_proj\.weight has shape \[64, 64\], but Llama's is \[32, 64\] — TODO 1 in ",
    ),
    "key/value heads tiled": (
        21, "copies = F.concat([copies] * groups, axis=2)\n        return copies.reshape([batch, heads * groups, seq_len, head_dim])",
        "return F.concat([x] * groups, axis=1)",
        r"repeat_kv\(k\) for 2 key/value heads, 2 query heads each \(small-kv2\): the key/value heads are tiled"
        r".* — TODO 2 in ",
    ),
    "RoPE on v too": (
        21, "q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)",
        "q, k, v = apply_rope(q, cos, sin), apply_rope(k, cos, sin), apply_rope(v, cos, sin)",
        r"attention output for 7 tokens vs Hugging Face LlamaAttention \(small-kv1\): v is rotated too.* — TODO 3 in ",
    ),
    "RoPE after the scores": (
        21, ("        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)\n", "y = self.attend(q, self.repeat_kv(k), self.repeat_kv(v))"),
        ("", "y = apply_rope(self.attend(q, self.repeat_kv(k), self.repeat_kv(v)), cos, sin)"),
        r"\(small-kv1\): RoPE is applied to the attention's output, after the scores.* — TODO 3 in ",
    ),
    "rope_theta hard-coded": (
        21, "cos, sin = rope_tables(self.head_dim, self.rope_theta, x.shape[1])",
        "cos, sin = rope_tables(self.head_dim, 10000.0, x.shape[1])",
        r"\(small-kv1\): RoPE uses theta = 10000, not the config's rope_theta \(100000\).* — TODO 3 in ",
    ),
    "attention named attn": (
        22, "self.self_attn = LlamaAttention(config)", "self.attn = LlamaAttention(config)",
        r"LlamaDecoderLayer has no `self_attn\.q_proj\.weight` \(the name Llama's checkpoint uses\) — TODO 1 in ",
    ),
    "layer norms swapped": (
        22, ("residual(x, self.input_layernorm, self.self_attn)", "residual(x, self.post_attention_layernorm, self.mlp)"),
        ("residual(x, self.post_attention_layernorm, self.self_attn)", "residual(x, self.input_layernorm, self.mlp)"),
        r"\(small\): the norms trade places.* — TODO 2 in ",
    ),
    "layer norms without rms_norm_eps": (
        22, "RMSNorm(config.hidden_size, eps=config.rms_norm_eps)\n        self.self_attn",
        "RMSNorm(config.hidden_size)\n        self.self_attn",
        r"\(small-eps0\.1\): input_layernorm keeps RMSNorm's default epsilon, 1e-5, not the config's rms_norm_eps .* — TODO 1 in ",
    ),
    "final norm without rms_norm_eps": (
        22, "self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)", "self.norm = RMSNorm(config.hidden_size)",
        r"LlamaModel output for 7 tokens vs Hugging Face's: the final norm keeps RMSNorm's default epsilon.* — TODO 3 in ",
    ),
    "embeddings named wte": (
        22, "self.embed_tokens = Embedding(", "self.wte = Embedding(",
        r"LlamaModel has no `embed_tokens\.weight` \(the name Llama's checkpoint uses\) — TODO 3 in ",
    ),
    "no final norm": (
        22, "return self.norm(x)", "return x",
        r"LlamaModel output for 7 tokens vs Hugging Face's: the final norm is missing.* — TODO 4 in ",
    ),
    "lm_head when tied": (
        22, "        if not config.tie_word_embeddings:\n            self.lm_head",
        "        self.lm_head",
        r"LlamaForCausalLM has parameters Llama's checkpoint does not: lm_head\.weight — TODO 5 in ",
    ),
    "untied head uses the embeddings": (
        22, "return self.lm_head(hidden)", "return hidden @ self.model.embed_tokens.weight.T",
        r"\(untied\): the head multiplies by embed_tokens' matrix.* — TODO 6 in ",
    ),
    "rope_parameters ignored": (
        23, '    rope = values.get("rope_parameters") or {}\n    if "rope_theta" in rope:\n'
            '        settings["rope_theta"] = rope["rope_theta"]\n', "",
        r"rope_theta 500,000\)\.rope_theta is 100000\.0; transformers 5 writes it under rope_parameters, as "
        r"500000\.0 — TODO 1 in ",
    ),
    "RoPE buffers kept": (
        23, '    if key.endswith("rotary_emb.inv_freq"):\n        return False\n', "",
        r"is_weight\('model\.layers\.2\.self_attn\.rotary_emb\.inv_freq'\) with the head tied is True, but it is "
        r"RoPE's frequencies.* — TODO 2 in ",
    ),
    "lm_head always dropped": (
        23, 'return not (key == "lm_head.weight" and config.tie_word_embeddings)', 'return key != "lm_head.weight"',
        r"is_weight\('lm_head\.weight'\) with the head untied is False, but it is the untied head's own matrix.* "
        r"— TODO 2 in ",
    ),
    "lm_head under model.": (
        23, 'if key == "lm_head.weight" or key.startswith(PREFIX):', "if key.startswith(PREFIX):",
        r"max_name\('lm_head\.weight'\) is 'model\.lm_head\.weight', expected 'lm_head\.weight' .* — TODO 3 in ",
    ),
    "cache sized by the query heads": (
        24, "2 * config.num_hidden_layers * config.num_key_value_heads", "2 * config.num_hidden_layers * config.num_attention_heads",
        r"kv_bytes_per_token\(SmolLM2-135M\) is 138240, expected 46,080 .*: it counts the 9 query heads; the cache keeps "
        r"the 3 key/value heads .* — TODO 1 in ",
    ),
    "cache offset ignored in RoPE": (
        24, "rope_tables(self.head_dim, self.rope_theta, x.shape[1], past_len)",
        "rope_tables(self.head_dim, self.rope_theta, x.shape[1])",
        r"\(5 cached, then 2 new; small-kv1\) vs LlamaAttention over all 7: the new tokens are rotated as if they sat "
        r"at positions 0, 1, …: the cache offset is ignored in RoPE.* — TODO 2 in ",
    ),
    "cache holds the repeated heads": (
        24, "return self.o_proj(self.merge_heads(y)), k, v",
        "return self.o_proj(self.merge_heads(y)), self.repeat_kv(k), self.repeat_kv(v)",
        r"returns keys of shape \[1, 4, 5, 16\], expected \[1, K, 5, D\] = \[1, 1, 5, 16\]: the cache holds the repeated "
        r"heads.* — TODO 2 in ",
    ),
    "cached layer without the attention residual": (
        24, "        x = x + attn_out\n        return x + self.mlp", "        x = attn_out\n        return x + self.mlp",
        r"cached layer \(4 cached, then 3 new\) vs LlamaDecoderLayer over all 7: the attention branch does not add its "
        r"input back.* — TODO 3 in ",
    ),
    "cached model without the final norm": (
        24, "return self.head(body.norm(x[:, -1, :])), keys, values", "return self.head(x[:, -1, :]), keys, values",
        r"\(a prefill of 3 tokens, then 1; head tied\) vs LlamaForCausalLM over all 4: the final norm is missing.* "
        r"— TODO 4 in ",
    ),
    # Steps 25 and 26: every bug below is named before the served model compiles (seconds, no graph).
    "ragged positions ignore the cache": (
        25, "return cached + index - starts", "return index - starts",
        r"ragged_positions for new tokens \[1, 1, 1, 1\] after \[3, 0, 12, 5\] cached: every sequence's positions "
        r"start at 0: the cache is ignored.* — TODO 1 in steps/step_25_serving\.py",
    ),
    "ragged positions count along the whole row": (
        25, "return cached + index - starts", "return cached + index",
        r"ragged_positions for new tokens \[7, 1, 10\] after \[0, 0, 0\] cached: the positions count along the "
        r"whole row .* i - offsets\[b\] — TODO 1 in ",
    ),
    "paged attention's heads not merged before c_proj": (
        25, "return self.c_proj(y.reshape([-1, self.n_embd]))", "return self.c_proj(y)",
        r"step 25's model did not compile for a ragged batch: .*\[total_seq_len, 4, 64\].* — raised at "
        r"steps/step_25_serving\.py, line \d+, in forward \(TODO 2\)",
    ),
    "served GPT-2 returns every token's logits": (
        25, "return self.head(body.ln_f(last))", "return self.head(body.ln_f(x))",
        r"ServedGPT2\.forward returns \[total_seq_len, 50257\], a row for each of the batch's new tokens; it returns "
        r"one row a sequence.* — TODO 3 in steps/step_25_serving\.py",
    ),
    "rope_at's cos and sin swapped": (
        26, "return (F.unsqueeze(F.gather(cos, positions, axis=0), 1), F.unsqueeze(F.gather(sin, positions, axis=0), 1))",
        "return (F.unsqueeze(F.gather(sin, positions, axis=0), 1), F.unsqueeze(F.gather(cos, positions, axis=0), 1))",
        r"rope_at\(positions .*\): cos: cos and sin are swapped.* — TODO 1 in steps/step_26_serving_llama\.py",
    ),
    "paged Llama keys split into the query heads": (
        26, "k = self.k_proj(x).reshape([-1, self.n_kv_head, self.head_dim])",
        "k = self.k_proj(x).reshape([-1, self.n_head, self.head_dim])",
        r"step 26's model did not compile for a ragged batch: .*reshape.*number of elements.*Hint: a reshape keeps "
        r"every element.*own number of heads.* — raised at steps/step_26_serving_llama\.py, line \d+, in forward "
        r"\(TODO 2\)",
    ),
    "served Llama returns every token's logits": (
        26, "return self.head(body.norm(last))", "return self.head(body.norm(x))",
        r"ServedLlama\.forward returns \[total_seq_len, 50257\], a row for each of the batch's new tokens; .* — "
        r"TODO 3 in steps/step_26_serving_llama\.py",
    ),
}


def _python(*args: str, env: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False, env=env
    )


def test_steps_are_rendered_from_solutions():
    """the stubs' manifest (steps/.stubs.json) records what solutions/ renders; a learner's edits are reported, not failed"""
    stale, edited = render.compare_with_manifest()
    assert not stale, "; ".join(stale) + ". Instructors: run `python -m course.authoring.render`."
    if edited and os.environ.get("COURSE_STRICT_STUBS"):  # the course's own CI: steps/ must be the stubs
        pytest.fail("; ".join(edited) + " (COURSE_STRICT_STUBS is set: steps/ must hold the rendered stubs)")
    if edited:
        warnings.warn(f"your work in steps/ is not checked here ({'; '.join(edited)}): "
                      "check it with `pixi run sNN`", stacklevel=1)


def test_a_learners_edits_are_edits_and_a_stale_stub_is_a_failure(tmp_path):
    """an edited step file is reported as an edit; a solution changed without re-rendering is reported as stale"""
    render.render_all(tmp_path)
    assert render.compare_with_manifest(tmp_path) == ([], [])
    (tmp_path / "step_04_mlp.py").write_text("# my finished MLP\n")
    assert render.compare_with_manifest(tmp_path) == ([], [f"{tmp_path.name}/step_04_mlp.py has edits"])
    manifest = tmp_path / render.MANIFEST
    manifest.write_text(manifest.read_text().replace(render._digest(render.render_text(
        (SOLUTIONS / "step_02_causal_mask.py").read_text(), "step_02_causal_mask.py")), "0" * 64))
    stale, _ = render.compare_with_manifest(tmp_path)
    assert stale == [f"solutions/step_02_causal_mask.py renders a stub that {tmp_path.name}/.stubs.json does not record"]


def test_render_keeps_a_learners_edits(tmp_path):
    """render never overwrites an edited stub unless forced, and restores a deleted one"""
    render.render_all(tmp_path)
    edited = tmp_path / "step_04_mlp.py"
    edited.write_text(edited.read_text() + "# my work\n")
    (tmp_path / "step_01_config.py").unlink()
    written, kept = render.render_all(tmp_path)
    assert kept == ["step_04_mlp.py"] and written == ["step_01_config.py"]
    assert edited.read_text().endswith("# my work\n")
    render.render_all(tmp_path, force=True)
    assert not edited.read_text().endswith("# my work\n")


@pytest.fixture(scope="module")
def stubs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("stubs")
    written, kept = render.render_all(out)
    assert written and not kept
    return out


@pytest.fixture(scope="module")
def stub_checks(request, stubs):
    """The check's output on each selected step's stub, ``stub_checks(number) -> (exit code, output)``: all of them
    from one process, as the planted bugs are (a process per step would import PyTorch, transformers and MAX each
    time); a step whose run did not finish there is checked again in a process of its own."""
    selected = [item.callspec.params["number"] for item in request.session.items
                if getattr(item, "originalname", None) == "test_stub_fails_with_a_hint"]
    results: dict[int, tuple[int | None, str]] = {}

    def output(number: int) -> tuple[int | None, str]:
        if number not in results:
            batch = [n for n in selected if n not in results] if number in selected else [number]
            results.update(zip(batch, _check_in_turn([[str(n), "--steps-dir", str(stubs)] for n in batch])))
        return results[number]

    return output


@pytest.mark.parametrize("number", available())
def test_stub_fails_with_a_hint(stub_checks, stubs, number):
    """each stub fails its own check, names a TODO, and prints no traceback"""
    code, output = stub_checks(number)
    assert code == 1, f"exit code {code}, expected 1 (checks failed; None: the check did not finish):\n{output}"
    assert "✗" in output and re.search(r"TODO \d+(, \d+)* in ", output), f"no ✗ line naming a TODO:\n{output}"
    assert "Traceback" not in output, f"a traceback reached the learner:\n{output}"
    assert "could not load" not in output and "internal error" not in output, output
    drift = experiments.compare_stub_output(number, output, stubs)
    assert not drift, "\n".join(drift)


def test_copied_solutions_pass_as_steps(tmp_path):
    """the control for the planted bugs: unchanged solutions pass when checked as steps/"""
    for path in SOLUTIONS.glob("step_*.py"):
        (tmp_path / path.name).write_text(path.read_text())
    # Every step's checks in one run: 7.4 minutes warm on a busy 2-core machine; more where kernels are cold.
    result = _python("-m", "course.check", "all", "--steps-dir", str(tmp_path), timeout=2400)
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "✗" not in output, output
    drift = experiments.compare_solution_output(output, tmp_path)
    assert not drift, "\n".join(drift)


#: Runs ``course.check`` once for each argument list in ``sys.argv[1]`` (JSON), in one process, so that
#: PyTorch, transformers and MAX are imported once, not once per run; each run between two marker lines.
CHECK_IN_TURN = """
import json, sys
from course.check.runner import main

for index, argv in enumerate(json.loads(sys.argv[1])):
    print(f"@@run {index}@@", flush=True)
    code = main(argv)
    print(f"@@exit {index} {code}@@", flush=True)
"""


def _check_in_turn(runs: list[list[str]], timeout: float = 1800) -> list[tuple[int | None, str]]:
    """(exit code, output) of ``python -m course.check *run`` for each run in ``runs``, all of them in one process
    (stdout and stderr together, as the learner sees them). A run that did not finish there (the process died on
    it, or before it) is run again in a process of its own; its exit code is None if it does not finish there
    either."""
    # -u: stdout and stderr unbuffered, so that each run's lines stay between its markers.
    result = subprocess.run([sys.executable, "-u", "-c", CHECK_IN_TURN, json.dumps(runs)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False)
    found = {}
    parts = re.split(r"^@@run (\d+)@@\n", result.stdout, flags=re.MULTILINE)
    for index, text in zip(parts[1::2], parts[2::2]):
        if exit_code := re.search(rf"^@@exit {index} (\d+)@@$", text, re.MULTILINE):
            found[int(index)] = (int(exit_code[1]), text[: exit_code.start()])
    if len(runs) == 1:
        return [found.get(0, (None, f"the check did not finish:\n{result.stdout}"))]
    return [found[index] if index in found else _check_in_turn([run], timeout)[0] for index, run in enumerate(runs)]


def _plant(bug: str) -> str:
    """The step's solution with ``bug`` planted in it."""
    number, good, bad, _ = PLANTED[bug]
    original = step_path(number)
    source = original.read_text()
    edits = zip(good, bad) if isinstance(good, tuple) else [(good, bad)]
    for old, new in edits:
        assert source.count(old) == 1, f"the planted bug needs exactly one `{old}` in {original.name}"
        source = source.replace(old, new)
    return source


def _check_planted(number: int, bugs: list[str], folder: Path) -> dict[str, tuple[int | None, str]]:
    """{bug: (exit code, output)} of step ``number``'s check on a copy with each bug planted,
    the copy's folder shown as ``steps/``.

    One process checks them all in turn. A bug whose run did not finish there (the
    process died on it) is checked again in a process of its own. The exit code is
    None where there is no result: the bug could not be planted, or its check died.
    """
    found, copies = {}, {}
    for bug in bugs:
        try:
            source = _plant(bug)
        except AssertionError as error:
            found[bug] = (None, str(error))
            continue
        copies[bug] = folder / str(len(copies))
        copies[bug].mkdir()
        (copies[bug] / step_path(number).name).write_text(source)
    # -x: only the first ✗ is compared, and a planted bug in a compiled graph (step 15) would otherwise compile that
    # changed graph afresh for the later checks (minutes).
    runs = _check_in_turn([[str(number), "--steps-dir", str(copy), "-x"] for copy in copies.values()], timeout=900)
    for (bug, copy), (code, text) in zip(copies.items(), runs):
        found[bug] = (code, text.replace(f"{copy.resolve()}/", "steps/"))  # the copy's folder reads as steps/
    return found


@pytest.fixture(scope="module")
def planted(request, tmp_path_factory):
    """The check's output on a planted bug, ``planted(bug) -> (exit code, output)``.

    The first request for a step checks every selected planted bug of that step, in one
    process (a process per bug would import PyTorch, transformers and MAX each time).
    """
    selected = [
        item.callspec.params["bug"] for item in request.session.items
        if getattr(item, "originalname", None) == "test_planted_bug_is_caught"
    ]
    results: dict[str, tuple[int | None, str]] = {}

    def output(bug: str) -> tuple[int | None, str]:
        if bug not in results:
            number = PLANTED[bug][0]
            batch = [other for other in selected if PLANTED[other][0] == number and other not in results]
            batch = batch if bug in batch else [bug]
            results.update(_check_planted(number, batch, tmp_path_factory.mktemp(f"planted-{number:02d}")))
        return results[bug]

    return output


@pytest.mark.parametrize("bug", list(PLANTED))
def test_planted_bug_is_caught(planted, bug):
    """a known bug planted in a copy of a solution fails that step's check, for that reason"""
    report = PLANTED[bug][3]
    code, output = planted(bug)
    assert code is not None, output
    assert code == 1, f"the check passed with the bug planted:\n{output}"
    lines = output.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith("✗")), None)
    assert first is not None and first + 1 < len(lines), f"no ✗ line:\n{output}"
    assert re.search(report, lines[first + 1]), f"the first ✗ does not say /{report}/:\n{output}"
    assert "Traceback" not in output, output


#: The steps whose every TODO must be named by the first ✗ of a planted bug (issue 17). Any
#: other step with a planted bug that names a TODO is held to it as well.
EVERY_TODO_PLANTED = (1, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26)


def test_every_todo_has_a_planted_bug():
    """each TODO of a step's stub has a planted bug whose first ✗ must name it"""
    named: dict[int, set[int]] = {}
    for number, _, _, report in PLANTED.values():
        # "TODO 2 in steps/…" where a check names it, "(TODO 2)" where a hint places an exception
        for match in re.finditer(r"TODO (\d+(?:, \d+)*)(?: in|\\\))", report):
            named.setdefault(number, set()).update(int(n) for n in match[1].split(", "))
    missing = []
    for number in sorted({*EVERY_TODO_PLANTED, *named}):
        solution_file = step_path(number)
        stub = render.render_text(solution_file.read_text(), solution_file.name)
        unnamed = sorted({int(n) for n in hints.TODO.findall(stub)} - named.get(number, set()))
        if unnamed:
            missing.append(f"step {number:02d}: TODO {', '.join(map(str, unnamed))}")
    assert not missing, f"no planted bug's first ✗ names {'; '.join(missing)} — add one to PLANTED"


def test_missing_transpose_is_caught():
    """weights loaded without the Conv1D transpose fail the MLP check, even when square"""
    hf = hf_config(**SMALL, n_inner=SMALL["n_embd"])
    reference = seeded(GPT2MLP(hf.n_inner, hf), seed=4)
    untransposed = {
        name: np.ascontiguousarray(value.T) if value.ndim == 2 else value
        for name, value in to_max_state(reference).items()
    }
    mlp = build(solution(4).MLP, solution(1).GPT2Config.from_hf(hf))
    load_weights(mlp, untransposed)
    x = hidden_states(2, 5, hf.n_embd)
    with pytest.raises(pytest.fail.Exception, match=r"max \|Δ\|"):
        assert_close(forward(mlp, x), run(reference, x), "MLP with untransposed weights")


BREAK_REFERENCE = '''
def pytest_runtest_setup(item):
    import reference

    def broken(*args, **kwargs):
        raise TypeError("create_causal_mask() got an unexpected keyword argument 'allow_is_causal_skip'")

    reference.create_causal_mask = broken
'''


def test_a_broken_reference_is_the_courses_fault(tmp_path):
    """an exception inside the Hugging Face reference is reported as the course's, never as a ✗ on a TODO"""
    (tmp_path / "break_reference.py").write_text(BREAK_REFERENCE)
    result = _python(
        "-m", "course.check", "2", "--target", "solutions", "-p", "break_reference",
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, f"exit code {result.returncode}:\n{output}"
    broken = [line for line in output.splitlines() if line.startswith("!")]
    assert broken, f"no check was marked as the course's failure:\n{output}"
    assert "✗" not in output, f"the reference's failure was blamed on the learner:\n{output}"
    assert re.search(
        r"the course's Hugging Face reference failed \(transformers [\d.]+.*\): TypeError: create_causal_mask"
        r".* — not your code", output
    ), output
    assert "could not run because the course itself failed" in output and "Traceback" not in output, output


# --- the course's compiled graphs (course/runtime.py) -----------------------------------------------


def _probe_graph(scale: float = 3.0, rows: int = 37, op: str = "tanh"):
    """A small graph of the course's own: rows x 41 inputs, times ``scale``, through ``op``."""
    from max.dtype import DType
    from max.graph import DeviceRef, Graph, TensorType, ops

    with Graph("course_graph_probe", input_types=[TensorType(DType.float32, [rows, 41], DeviceRef.CPU())]) as graph:
        graph.output(getattr(ops, op)(graph.inputs[0] * scale + 1.5))
    return graph


def test_a_graph_file_names_what_the_graph_computes(tmp_path):
    """the course's MEF file of a graph is the same for the same graph built twice, and another for another
    constant, shape, op or machine"""
    from course.runtime import graph_file

    name = graph_file(_probe_graph(), tmp_path, "host A")
    assert graph_file(_probe_graph(), tmp_path, "host A") == name
    others = {"another constant": graph_file(_probe_graph(scale=3.5), tmp_path, "host A"),
              "another shape": graph_file(_probe_graph(rows=38), tmp_path, "host A"),
              "another op": graph_file(_probe_graph(op="sigmoid"), tmp_path, "host A"),
              "another machine or MAX": graph_file(_probe_graph(), tmp_path, "host B")}
    same = [what for what, other in others.items() if other == name]
    assert not same, f"{same}: the same MEF file {name.name} as the graph it differs from"
    assert name.parent == tmp_path and name.name.startswith("course_graph_probe-") and name.suffix == ".mef", name


class _Printed:
    """What graph_file reads of a graph: its name and its printed body."""

    def __init__(self, text: str, name: str = "probe"):
        self.text, self.name = text, name

    def __repr__(self) -> str:
        return self.text


def test_a_graph_file_is_named_for_the_course_kernels_it_calls_not_where_maxs_libraries_lie(tmp_path):
    """graph_file: the same body with MAX's kernel libraries elsewhere (another virtualenv) is the same file, another
    build of the course's kernels is another; the graph's name, made safe and cut to 60 characters, comes first; and
    graph_path tells compile options apart"""
    from course import runtime

    def body(*libraries: str) -> str:
        return f"mo.graph @probe {{ mo.add }} _kernel_library_paths = [{', '.join(libraries)}]"

    course = f"/home/a/.cache/modular/{runtime.KERNELS}"
    named = {what: runtime.graph_file(_Printed(text), tmp_path, "host") for what, text in {
        "MAX's libraries here": body("/venv1/lib/max/kernels.mojopkg"),
        "MAX's libraries there": body("/venv2/lib/max/kernels.mojopkg"),
        "the course's kernels": body("/venv1/lib/max/kernels.mojopkg", f"{course}/0123abcd/kernels.mojoc"),
        "another build of them": body("/venv1/lib/max/kernels.mojopkg", f"{course}/4567ef01/kernels.mojoc")}.items()}
    assert named["MAX's libraries here"] == named["MAX's libraries there"], named
    assert len(set(named.values())) == 3, named
    long = runtime.graph_file(_Printed("x", name="Decode step/" + "a" * 80), tmp_path, "host")
    assert re.fullmatch(r"Decode_step_a{48}-[0-9a-f]{24}\.mef", long.name), long.name
    probe = _probe_graph()
    assert runtime.graph_path(probe, {}) != runtime.graph_path(probe, {"custom_extensions": ["x"]})


def test_what_a_graph_file_is_compiled_for_names_max_this_cpu_and_maxs_debug_settings(monkeypatch):
    """_host: the MAX release, the CPU's model name and flags (/proc/cpuinfo, the first of each), and any
    MODULAR_MAX_DEBUG setting, each of which changes what MAX compiles"""
    from importlib.metadata import version

    from course import runtime

    host = runtime._host()
    assert host.startswith(f"max {version('max')} | "), host
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        fields = dict(reversed(re.findall(r"^(model name|flags)\s*:\s*(.*)$", cpuinfo.read_text(), re.MULTILINE)))
        assert f" | {fields['model name']} {fields['flags']} | " in host, host[:200]
    monkeypatch.setenv("MODULAR_MAX_DEBUG_IR", "1")
    assert runtime._host() != host and "('MODULAR_MAX_DEBUG_IR', '1')" in runtime._host()


def _cgroup_files(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize("own, files, expected", [
    # cgroup v2: a container's --cpus=1.5 on its own cgroup, none above it
    ("0::/box\n", {"box/cpu.max": "150000 100000\n", "cpu.max": "max 100000\n"}, 1.5),
    # v2, the tighter quota two levels up
    ("0::/a/b\n", {"a/b/cpu.max": "max 100000\n", "a/cpu.max": "50000 100000\n", "cpu.max": "max 100000\n"}, 0.5),
    # v2 with no quota anywhere, and a v2 file system under unified/ as systemd's hybrid layout mounts it
    ("0::/box\n", {"box/cpu.max": "max 100000\n"}, None),
    ("0::/box\n", {"unified/box/cpu.max": "200000 100000\n"}, 2.0),
    # cgroup v1: the cpu controller (mounted alone or as cpu,cpuacct), -1 where there is no quota
    ("4:memory:/x\n1:cpu:/box\n", {"cpu/box/cpu.cfs_quota_us": "300000\n", "cpu/box/cpu.cfs_period_us": "100000\n"},
     3.0),
    ("3:cpu,cpuacct:/box\n", {"cpu,cpuacct/box/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/box/cpu.cfs_period_us": "100000\n",
                               "cpu,cpuacct/cpu.cfs_quota_us": "100000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"}, 1.0),
    ("1:cpu:/box\n", {"cpu/box/cpu.cfs_quota_us": "-1\n", "cpu/box/cpu.cfs_period_us": "100000\n"}, None),
    # a controller list without cpu, and a file that does not parse
    ("4:memory:/x\n", {"memory/x/cpu.cfs_quota_us": "100000\n", "memory/x/cpu.cfs_period_us": "100000\n"}, None),
    ("0::/box\n", {"box/cpu.max": "lots\n"}, None),
])
def test_cgroup_cpus_reads_a_containers_quota(tmp_path, own, files, expected):
    """cgroup_cpus: the CPUs a cgroup's quota leaves the process (quota over period), the tightest along its
    cgroup's path, in cgroup v2's cpu.max and v1's cpu.cfs_quota_us; None where no quota is set or a file does
    not say"""
    from course import runtime

    root = _cgroup_files(tmp_path, files)
    assert runtime.cgroup_cpus(own, root) == expected, (own, files)


def test_usable_cpus_are_the_affinity_mask_less_the_quota(monkeypatch):
    """usable_cpus: the CPUs the affinity mask allows, rounded down to a cgroup quota where one is set, at least
    1; where the system cannot say (macOS: no sched_getaffinity, no /proc), the machine's CPUs"""
    from course import runtime

    for mask, quota, expected in (({0, 1, 2, 3}, None, 4), ({0, 1, 2, 3}, 1.5, 1), ({0, 1}, 8.0, 2), ({3}, 0.2, 1)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, mask=mask: mask, raising=False)
        monkeypatch.setattr(runtime, "cgroup_cpus", lambda quota=quota: quota)
        assert runtime.usable_cpus() == expected, (mask, quota, runtime.usable_cpus())
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)  # macOS
    monkeypatch.setattr(os, "cpu_count", lambda: 10)
    monkeypatch.setattr(runtime, "cgroup_cpus", lambda: None)  # no cgroups there
    assert runtime.usable_cpus() == 10


CPU_CGROUP = Path("/sys/fs/cgroup/cpu")


def test_a_real_cgroup_quota_reaches_usable_cpus():
    """in a real cgroup (v1's cpu controller, as this machine mounts it) with a quota of one CPU, a child process
    sees usable_cpus() == 1 and MAX's kernels' bands follow; this needs root, to make a cgroup"""
    if os.geteuid() != 0 or not (CPU_CGROUP / "cgroup.procs").exists():
        pytest.skip("making a cgroup needs root and cgroup v1's cpu controller at /sys/fs/cgroup/cpu")
    box = CPU_CGROUP / f"course-check-{os.getpid()}"
    box.mkdir()
    try:
        (box / "cpu.cfs_quota_us").write_text(str(int((CPU_CGROUP / "cpu.cfs_period_us").read_text())))
        done = subprocess.run(
            [sys.executable, "-c", "from course import runtime; print(runtime.cgroup_cpus(), runtime.usable_cpus())"],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
            preexec_fn=lambda: (box / "cgroup.procs").write_text(str(os.getpid())))
        assert done.returncode == 0 and done.stdout.split() == ["1.0", "1"], done.stdout + done.stderr
    finally:
        box.rmdir()


@pytest.mark.gpu
def test_setup_keeps_the_cpu_and_float32_beside_a_gpu():
    """on a machine with a GPU, where MAX's own default is the GPU in bfloat16, a tensor made after setup without a
    device or dtype is float32 on the CPU: the check that sees either pin left out (mutation_targets.UNTESTED)"""
    from max.driver import CPU
    from max.dtype import DType
    from max.experimental.tensor import defaults

    from course import runtime

    runtime.setup()
    dtype, mesh = defaults()
    assert (dtype, [type(device) for device in mesh.devices]) == (DType.float32, [CPU]), (dtype, mesh)


def test_max_cache_is_the_folder_max_reports(monkeypatch, tmp_path):
    """max_cache: the parent of MAX's model cache as MAX reports it, and ~/.cache/modular where it reports none
    or cannot say"""
    from max._core import engine

    from course import runtime

    monkeypatch.setenv("HOME", str(tmp_path))

    def fails():
        raise RuntimeError("another MAX release")

    for reported, expected in ((lambda: tmp_path / "elsewhere" / ".max_cache", tmp_path / "elsewhere"),
                               (lambda: None, tmp_path / ".cache" / "modular"), (fails, tmp_path / ".cache" / "modular")):
        monkeypatch.setattr(engine, "max_cache_dir", reported)
        assert runtime.max_cache() == expected, (runtime.max_cache(), expected)


def test_to_numpy_gives_float32():
    """to_numpy: float32 from a MAX tensor of another dtype and from a NumPy array or list of another"""
    from max.dtype import DType
    from max.experimental.tensor import Tensor

    from course import runtime

    half = Tensor.from_dlpack(np.arange(6, dtype=np.float16).reshape(2, 3))
    assert half.dtype == DType.float16
    for given in (half, np.arange(6, dtype=np.float64), [1, 2, 3]):
        got = runtime.to_numpy(given)
        assert got.dtype == np.float32, (type(given).__name__, got.dtype)


def test_the_graph_files_are_trimmed_oldest_first(tmp_path, monkeypatch):
    """past its limit, the folder of MEF files loses the files used longest ago, and keeps the rest"""
    from course import runtime

    for age, name in enumerate(["newest", "newer", "older", "oldest"]):
        file = tmp_path / f"{name}.mef"
        file.write_bytes(bytes(1000))
        os.utime(file, (1e9 - 3600 * age, 1e9 - 3600 * age))
    runtime.trim(tmp_path, keep_bytes=3000)  # exactly three files' bytes: three stay
    assert sorted(f.stem for f in tmp_path.glob("*.mef")) == ["newer", "newest", "older"], list(tmp_path.iterdir())
    monkeypatch.setattr(runtime, "KEEP_BYTES", 2500)  # the limit when none is given
    runtime.trim(tmp_path)
    assert sorted(f.stem for f in tmp_path.glob("*.mef")) == ["newer", "newest"], list(tmp_path.iterdir())


def test_a_compiled_graph_loads_from_its_file_the_next_time(monkeypatch):
    """a graph is kept as a MEF file once compiled, loaded from it the next time (with the same numbers), and a
    broken file is replaced rather than trusted"""
    from max.driver import CPU, Buffer
    from max.engine import InferenceSession

    from course import runtime

    original = InferenceSession.compile_reusing_mefs.original  # MAX's own, which runtime.setup() wrapped
    monkeypatch.setattr(InferenceSession, "compile_reusing_mefs", original)
    runtime.reuse_compiled_graphs()
    runtime.reuse_compiled_graphs()  # a second call wraps nothing more
    assert InferenceSession.compile_reusing_mefs.original is original
    opened: list[object] = []
    compile_ = InferenceSession.compile

    def compile_and_record(self, model, **kwargs):  # what MAX compiled or loaded without an error
        compiled = compile_(self, model, **kwargs)
        opened.append(model)
        return compiled

    monkeypatch.setattr(InferenceSession, "compile", compile_and_record)
    session = InferenceSession(devices=[CPU()])
    path = runtime.graph_path(_probe_graph(), {})
    path.unlink(missing_ok=True)
    x = np.linspace(-1, 1, 37 * 41, dtype=np.float32).reshape(37, 41)
    expected = np.tanh(x * 3.0 + 1.5)

    def run_probe() -> np.ndarray:
        model = session.init(session.compile_reusing_mefs(_probe_graph()))
        return model.execute(Buffer.from_numpy(x))[0].to_numpy()

    for attempt in ("compiled, too fast to keep", "compiled", "loaded from its file", "compiled over a broken file",
                    "loaded again"):
        monkeypatch.setattr(runtime, "KEEP_AFTER_SECONDS", 600.0 if "too fast" in attempt else 0.0)
        if attempt == "compiled over a broken file":
            path.write_bytes(b"not a MEF")
        opened.clear()
        got = run_probe()
        assert np.abs(got - expected).max() < 1e-5, f"{attempt}: max |Δ| {np.abs(got - expected).max():.1e}"
        from_file = any(isinstance(model, (str, Path)) and Path(model) == path for model in opened)
        assert from_file == attempt.startswith("loaded"), f"{attempt}: MAX was given {opened}"
        if "too fast" in attempt:
            assert not path.exists(), f"{attempt}: kept as {path}"
            continue
        assert path.is_file() and path.stat().st_size > 1000, f"{attempt}: {path} is missing or broken"
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")  # what the export writes first
        assert not partial.exists(), f"{attempt}: {partial.name} is left behind"


def test_a_graph_file_is_kept_only_where_its_name_says_all_and_a_failed_export_changes_nothing(monkeypatch, tmp_path):
    """the course's wrapper hands MAX, untouched, what a file's name could not tell apart (custom_extensions passed to
    compile, a session or process with MAX's own MEF store, a model that is no Graph); keeps any other graph compiled
    slower than KEEP_AFTER_SECONDS, with compile's options, in a folder it makes; and a failed export loses nothing"""
    from types import SimpleNamespace

    from max.engine import InferenceSession

    from course import runtime

    calls: list[tuple] = []
    fail_export = False

    class Compiled:
        def export_mef(self, path):
            if fail_export:
                raise OSError("no space left on device")
            Path(path).write_bytes(b"a MEF")

    def maxs(session, model, **kwargs):  # stands in for MAX's compile_reusing_mefs
        calls.append((session, model, kwargs))
        return Compiled()

    monkeypatch.setattr(InferenceSession, "compile_reusing_mefs", maxs)
    runtime.reuse_compiled_graphs()
    wrapped = InferenceSession.compile_reusing_mefs
    folder = tmp_path / "not" / "made" / "yet"
    monkeypatch.setattr(runtime, "_graphs", lambda: (folder, "host"))
    monkeypatch.setattr(runtime, "KEEP_AFTER_SECONDS", 0.0)
    graph, session = _probe_graph(), SimpleNamespace(_mef_store=None)
    for what, model, kwargs, store in (("custom_extensions", graph, {"custom_extensions": ["x.mojopkg"]}, None),
                                       ("the session's store", graph, {}, "session"),
                                       ("the process's store", graph, {}, "process"),
                                       ("a MEF file's path", str(tmp_path / "model.mef"), {}, None)):
        calls.clear()
        monkeypatch.setattr(InferenceSession, "default_mef_store", object() if store == "process" else None)
        given = SimpleNamespace(_mef_store=object()) if store == "session" else session
        assert isinstance(wrapped(given, model, **kwargs), Compiled), what
        assert calls == [(given, model, kwargs)], f"{what}: MAX was handed {calls}"
        assert not folder.exists(), f"{what}: a graph file was kept"
    monkeypatch.setattr(InferenceSession, "default_mef_store", None)
    for keep_after, export_fails, kept in ((600.0, False, False), (0.0, True, False), (0.0, False, True)):
        monkeypatch.setattr(runtime, "KEEP_AFTER_SECONDS", keep_after)
        fail_export, options = export_fails, {"tile_based_fusion": True}
        calls.clear()
        assert isinstance(wrapped(session, graph, **options), Compiled)
        assert calls == [(session, graph, options)], calls
        path = runtime.graph_path(graph, options)
        assert path.is_file() == kept, f"kept after {keep_after} s, export failing {export_fails}: {path.is_file()}"
    os.utime(path, (1e9, 1e9))  # used long ago
    monkeypatch.setattr(runtime, "KEEP_BYTES", len(b"a MEF"))  # room for one file: keeping another trims the folder
    newer = _probe_graph(scale=2.0)
    wrapped(session, newer)
    assert runtime.graph_path(newer, {}).is_file() and not path.exists(), sorted(p.name for p in folder.iterdir())


# --- eager ops (course/runtime.py) ---------------------------------------------------------------------


class _Recorder:
    """An eager executor that records the name of each graph it is handed, and runs it on ``run``."""

    def __init__(self, run):
        self.run, self.graphs = run, []

    def execute(self, graph, inputs):
        self.graphs.append(graph.name)
        return self.run.execute(graph, inputs)


def test_eager_ops_run_on_the_interpreter_and_only_what_it_refuses_on_maxs_executor(monkeypatch):
    """after runtime.setup(), MAX's interpreter runs eager ops and MAX's own executor (which compiles each new graph
    in a pool of processes beside the check) is handed none of them; a graph the interpreter refuses is handed to it"""
    from max.experimental import functional as F
    from max.experimental.executor import InterpreterExecutor, default_executor

    from course import runtime

    executor = default_executor()
    assert isinstance(executor, runtime.InterpretFirst), f"MAX's eager executor is {type(executor).__name__}"
    maxs = _Recorder(InterpreterExecutor(max_ops=None))  # stands in for MAX's executor, without compiling
    monkeypatch.setattr(executor, "fallback", maxs)
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    for refused in (False, True):
        if refused:
            monkeypatch.setattr(executor, "interpreter", InterpreterExecutor(max_ops=0))  # refuses every graph
        got = runtime.to_numpy(F.tanh(runtime.from_numpy(x)) * 2.0)
        assert np.abs(got - 2 * np.tanh(x)).max() < 1e-6, f"refused={refused}: max |Δ| {np.abs(got - 2 * np.tanh(x)).max():.1e}"
        assert bool(maxs.graphs) == refused, f"refused={refused}: MAX's executor was handed {maxs.graphs}"


def test_eager_ops_keep_an_executor_chosen_by_hand(monkeypatch):
    """runtime.interpret_eager_ops() puts the interpreter in front of MAX's default eager executor only: neither where
    MAX_EAGER_EXECUTOR is set nor over an executor set by hand"""
    from max.experimental.executor import InterpreterExecutor, default_executor, set_default_executor

    from course import runtime

    maxs = default_executor().fallback  # MAX's default, which runtime.setup() put behind the interpreter
    for variable, executor, replaced in ((None, maxs, True), ("composite", maxs, False), (None, InterpreterExecutor(), False)):
        if variable:
            monkeypatch.setenv("MAX_EAGER_EXECUTOR", variable)
        else:
            monkeypatch.delenv("MAX_EAGER_EXECUTOR", raising=False)
        with set_default_executor(executor):
            runtime.interpret_eager_ops()
            now = default_executor()
        case = f"MAX_EAGER_EXECUTOR={variable}, {type(executor).__name__}"
        assert (now is not executor) == replaced, f"{case}: the executor is now {type(now).__name__}"
        if replaced:
            assert isinstance(now, runtime.InterpretFirst) and now.fallback is executor, case
            assert now.interpreter is executor.interpreter, f"{case}: another interpreter than MAX's default's"


def test_setup_prepares_max_once_per_process(monkeypatch):
    """runtime.setup() where nothing is prepared yet: a SIGINT handler of Python's, MAX's eager-kernel log quiet, float32
    as MAX's default dtype, the course's graph files, the interpreter in front of MAX's eager executor, and the C
    environment as Python holds it; a second call does nothing"""
    import logging
    import signal

    from max.dtype import DType
    from max.engine import InferenceSession
    from max.experimental.executor import default_executor, set_default_executor
    from max.experimental.tensor import default_dtype, defaults

    from course import runtime

    maxs, logger = default_executor().fallback, logging.getLogger("max._eager_policy")
    wrapped = []
    monkeypatch.setattr(runtime, "poller_idle_in_execute", lambda: wrapped.append("execute"))
    monkeypatch.setattr(runtime, "_done", False)
    monkeypatch.delenv("COURSE_MAX_POLLER", raising=False)
    monkeypatch.delenv("MODULAR_LOG_LEVEL", raising=False)
    monkeypatch.delenv("MAX_EAGER_EXECUTOR", raising=False)
    monkeypatch.setattr(logger, "level", logging.NOTSET)
    monkeypatch.setattr(InferenceSession, "compile_reusing_mefs", InferenceSession.compile_reusing_mefs.original)
    monkeypatch.delenv("PYTHONEXECUTABLE", raising=False)
    monkeypatch.setenv("MOJO_PYTHON_LIBRARY", "/as/python/holds/it")
    os.putenv("PYTHONEXECUTABLE", "/nowhere/python3")  # what importing max.nn does, here by hand
    os.putenv("MOJO_PYTHON_LIBRARY", "/as/max/set/it")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with set_default_executor(maxs), default_dtype(DType.bfloat16):
            runtime.setup()
            executor, dtype = default_executor(), defaults()[0]
            signal.signal(signal.SIGINT, signal.default_int_handler)
            runtime.setup()  # does nothing: the handler stays Python's default
            again = signal.getsignal(signal.SIGINT)
    finally:
        handler = signal.signal(signal.SIGINT, previous)
    assert handler is signal.default_int_handler and again is signal.default_int_handler, "the second call did something"
    assert wrapped == ["execute"], f"Model.execute wrapped for MAX's poller {len(wrapped)} times, not once"
    assert isinstance(executor, runtime.InterpretFirst) and executor.fallback is maxs, type(executor).__name__
    assert dtype == DType.float32, dtype
    assert os.environ.get("MODULAR_LOG_LEVEL") == "ERROR" and logger.level == logging.ERROR, (os.environ.get(
        "MODULAR_LOG_LEVEL"), logger.level)
    assert getattr(InferenceSession.compile_reusing_mefs, "original", None) is not None, "no graph files"
    code = "import os; print([os.environ.get(n) for n in ('PYTHONEXECUTABLE', 'MOJO_PYTHON_LIBRARY')])"
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert child.stdout.strip() == "[None, '/as/python/holds/it']", child.stdout


def test_setup_leaves_maxs_poller_as_it_is_when_asked(monkeypatch):
    """COURSE_MAX_POLLER=as-is: runtime.setup() leaves MAX's poller as MAX starts it (Model.execute unwrapped)"""
    from course import runtime

    wrapped = []
    monkeypatch.setattr(runtime, "poller_idle_in_execute", lambda: wrapped.append("execute"))
    monkeypatch.setattr(runtime, "_done", False)
    monkeypatch.setenv("COURSE_MAX_POLLER", "as-is")
    runtime.setup()
    assert wrapped == [], "setup wrapped Model.execute for MAX's poller where COURSE_MAX_POLLER=as-is"


#: A program's start, for the checks that run one of their own: setup(), then a compiled graph (``model``) and its
#: input (``x``), whose numbers are tanh(3x + 1.5).
A_GRAPH = """
import os, sys, threading
import numpy as np
from course import runtime
runtime.setup()
from max.driver import CPU, Buffer
from max.dtype import DType
from max.engine import InferenceSession
from max.graph import DeviceRef, Graph, TensorType, ops
with Graph("course_graph_probe", input_types=[TensorType(DType.float32, [37, 41], DeviceRef.CPU())]) as graph:
    graph.output(ops.tanh(graph.inputs[0] * 3.0 + 1.5))
model = InferenceSession(devices=[CPU()]).load(graph)
x = np.linspace(-1, 1, 37 * 41, dtype=np.float32).reshape(37, 41)
"""

A_PROGRAM = A_GRAPH + """
import json, time
from max.engine import Model
wrapped = hasattr(Model.execute, "original")
runtime.poller_idle_in_execute()  # a second call wraps nothing more
once = getattr(Model.execute, "original", None) is not None and not hasattr(Model.execute.original, "original")
graphs = 0
while not runtime.POLLERS and graphs < runtime.LOOKS:  # the first graphs look for it
    model.execute(Buffer.from_numpy(x))
    graphs += 1
out = {"wrapped": wrapped, "once": once, "graphs": graphs, "pollers": runtime.POLLERS}
if runtime.POLLERS:
    (tid, own), = runtime.POLLERS
    before = runtime.thread_wakes()
    time.sleep(0.2)
    after = runtime.thread_wakes()
    seen, set_pollers = [], runtime._set_pollers
    def watched(idle):
        set_pollers(idle)
        seen.append((idle, os.sched_getscheduler(tid)))
    runtime._set_pollers = watched
    got = model.execute(Buffer.from_numpy(x))[0].to_numpy()
    out.update(name=after[tid][0], rate=(after[tid][1] - before[tid][1]) / 0.2, own=own, seen=seen,
               after=os.sched_getscheduler(tid), worst=float(np.abs(got - np.tanh(x * 3.0 + 1.5)).max()))
print(json.dumps(out))
"""


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE and /proc are Linux's: elsewhere nothing is set")
def test_a_graph_runs_with_maxs_poller_idle_and_gives_it_back_its_policy():
    """in a program of its own, as `main` and bench run (runtime.setup(), then a compiled graph): where the poller's
    idle priority can be undone (root, or RLIMIT_NICE of 20), Model.execute is wrapped once, MAX's poller is found
    within runtime.LOOKS graphs, one thread that wakes over a thousand times a second and is none of MAX's workers;
    a graph then runs with it at SCHED_IDLE, gives it its own policy back, and computes what it computed. Elsewhere
    nothing is wrapped (the ordinary user's check below runs that)"""
    import json

    from course import runtime

    if why := runtime.idle_is_undoable():
        pytest.skip(f"an ordinary user here ({why}): test_as_an_ordinary_user_no_thread_is_left_idle_... checks it")
    env = {key: value for key, value in os.environ.items() if key != "COURSE_MAX_POLLER"}
    result = subprocess.run([sys.executable, "-c", A_PROGRAM], cwd=ROOT, env=dict(env, PYTHONPATH=str(ROOT)),
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["wrapped"] and got["once"], f"Model.execute is not wrapped once: {got}"
    assert got["pollers"] and len(got["pollers"]) == 1, f"MAX's poller after {got['graphs']} graphs: {got['pollers']}"
    assert got["rate"] >= runtime.POLLER_WAKES_PER_SECOND and not got["name"].startswith(runtime.MAX_WORKERS), got
    assert got["seen"] == [[True, os.SCHED_IDLE], [False, got["own"]]], f"the poller's policy on the way in and out: {got}"
    assert got["after"] == got["own"] == os.SCHED_OTHER, got
    assert got["worst"] < 1e-5, f"the graph's numbers moved: max |Δ| {got['worst']:.1e}"


@contextlib.contextmanager
def _a_thread(name: str = "", wakes: bool = False):
    """A thread of this process for the poller's checks, stopped when the block ends: its native id. Named ``name``
    (Linux's PR_SET_NAME) where given; waking every 0.2 ms where ``wakes``, otherwise waiting."""
    import ctypes
    import threading

    stop, ids = threading.Event(), []

    def run():
        if name:
            ctypes.CDLL(None).prctl(15, name.encode())  # PR_SET_NAME
        ids.append(threading.get_native_id())
        while not stop.is_set():
            time.sleep(0.0002) if wakes else stop.wait()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        while not ids:
            time.sleep(0.01)
        yield ids[0]
    finally:
        stop.set()
        thread.join()


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE and /proc are Linux's: elsewhere nothing is set")
def test_find_max_poller_picks_the_one_thread_max_started_that_wakes_and_nothing_when_unsure(monkeypatch):
    """find_max_poller: a thread MAX started (none of Python's, none there before MAX ran) that wakes every 0.2 ms,
    with its policy; never one as busy but named as MAX's workers, nor Python's own busy thread (a learner's event
    loop), nor one there before MAX ran, nor one that waits, nor one that ends before its policy is read; nothing when
    two threads qualify; nothing without SCHED_IDLE; and its default sample is short"""
    import threading

    from course import runtime

    real, pythons = os.sched_getscheduler, threading.enumerate
    # Every thread there now (MAX's real poller too, where a graph ran before this check) counts as there before MAX
    monkeypatch.setattr(runtime, "EARLIER", {int(tid) for tid in os.listdir("/proc/self/task")})
    with _a_thread(wakes=True) as wakes, _a_thread(f"{runtime.MAX_WORKERS}9", wakes=True) as worker, \
            _a_thread() as waits, _a_thread(wakes=True) as learners, _a_thread(wakes=True) as early:
        # the threads MAX would have started: not among Python's (threading.enumerate)
        maxs = {wakes, worker, waits, early}
        monkeypatch.setattr(threading, "enumerate", lambda: [t for t in pythons() if t.native_id not in maxs])
        monkeypatch.setattr(runtime, "EARLIER", {*runtime.EARLIER, early})

        def ended(tid):  # the thread that wakes has ended by the time its policy is read
            if tid == wakes:
                raise ProcessLookupError(3, "No such process")
            return real(tid)

        with monkeypatch.context() as patch:
            patch.delattr(os, "SCHED_IDLE")
            elsewhere = runtime.find_max_poller(0.2)  # as on macOS: no SCHED_IDLE
        with monkeypatch.context() as patch:
            patch.setattr(os, "sched_getscheduler", ended)
            gone = runtime.find_max_poller(0.2)
        found = dict(runtime.find_max_poller(0.2))
        with monkeypatch.context() as patch:  # the thread there before MAX ran, as if it were MAX's: two qualify
            patch.setattr(runtime, "EARLIER", runtime.EARLIER - {early})
            unsure = runtime.find_max_poller(0.2)
        started = time.perf_counter()
        runtime.find_max_poller()  # its default sample, as every process's first graph pays it
        cost = time.perf_counter() - started
    assert elsewhere == [], f"without SCHED_IDLE it found {elsewhere}"
    assert gone == [], f"a thread that ended is in {gone}"
    assert found == {wakes: os.SCHED_OTHER}, (found, wakes)
    assert worker not in found and waits not in found and learners not in found and early not in found, found
    assert unsure == [], f"with two threads that qualify it picked {unsure}"
    assert cost < 0.5, f"find_max_poller() took {cost:.2f} s"


def test_idle_is_undone_only_where_linux_allows_it():
    """idle_is_undoable: None where a thread can leave SCHED_IDLE (root, or RLIMIT_NICE of 20 and up); otherwise the
    course's reason, with the error and the limit named"""
    import resource

    from course import runtime

    if not hasattr(os, "SCHED_IDLE"):
        assert runtime.idle_is_undoable() == "this system has no SCHED_IDLE"
        return
    allowed = os.geteuid() == 0 or resource.getrlimit(resource.RLIMIT_NICE)[0] >= 20
    got = runtime.idle_is_undoable()
    if allowed:
        assert got is None, got
    else:
        assert got == ("a thread at SCHED_IDLE cannot get its own policy back here (Operation not permitted: "
                       "RLIMIT_NICE)"), got


ORDINARY_USER = A_GRAPH + """
got = None
def run():
    global got
    for _ in range(5):
        got = model.execute(Buffer.from_numpy(x))[0].to_numpy()
worker = threading.Thread(target=run)
worker.start()
worker.join()
policies = {int(tid): os.sched_getscheduler(int(tid)) for tid in os.listdir("/proc/self/task")}
import sys
print("checks' end", file=sys.stderr, flush=True)  # what a check run has said by now: nothing about the poller
runtime.say_left()  # main's call
runtime.say_left()  # said once
weights = {"w": np.arange(3 * 2**20, dtype=np.float32).reshape(3, -1)}  # 12 MiB, advised for huge pages
paged = runtime.on_huge_pages(weights)
worst = max(float(np.abs(got - np.tanh(x * 3.0 + 1.5)).max()), float(np.abs(paged["w"] - weights["w"]).max()))
print("uid", os.getuid(), "idle", sorted(t for t, p in policies.items() if p == os.SCHED_IDLE), "worst", worst)
"""


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's: elsewhere nothing is set")
def test_as_an_ordinary_user_no_thread_is_left_idle_and_the_course_says_why():
    """as an ordinary user (run as uid 65534 in a child when the suite runs as root; as oneself otherwise): after
    setup() (its SIGINT handler and eager executor) and five graphs from another thread, no thread of the process is
    at SCHED_IDLE, the graph's numbers are right, weights advised for huge pages keep their numbers, and the course
    said nothing of MAX's poller until say_left() (which main calls and a check does not), then once, in one line,
    that it left the poller as MAX starts it"""
    import shutil
    import subprocess
    import sys

    from course.outline import ROOT

    command = [sys.executable, "-c", ORDINARY_USER]
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.fail("running as root without setpriv (util-linux): cannot run this check as an ordinary user")
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
    import tempfile

    # A folder that user can reach (pytest's own tmp_path is root's alone), as home and MAX's cache, kept between
    # runs so that only the first compiles the graph cold (about 20 s).
    home = Path(tempfile.gettempdir()) / f"course-ordinary-user-{os.geteuid()}"
    home.mkdir(exist_ok=True)
    home.chmod(0o777)
    env = dict(os.environ, HOME=str(home), MODULAR_CACHE_DIR=str(home / "modular"), PYTHONPATH=str(ROOT))
    result = subprocess.run(command, cwd=home, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    uid, idle, worst = re.fullmatch(r"uid (\d+) idle (\[.*\]) worst (\S+)\n", result.stdout).groups()
    assert idle == "[]", f"threads left at SCHED_IDLE as uid {uid}: {idle}"
    assert float(worst) < 1e-5, f"the graph's (or the paged weights') numbers moved: max |Δ| {worst}"
    lines = result.stderr.splitlines()
    assert "checks' end" in lines, result.stderr[-3000:]
    before = [line for line in lines[:lines.index("checks' end")] if line.startswith("course: ")]
    assert before == [], f"said before say_left(), as every check would print it: {before}"
    said = [line for line in lines if line.startswith("course: ")]
    import resource

    if resource.getrlimit(resource.RLIMIT_NICE)[0] >= 20:  # a limit raised for this user: the poller is set aside
        assert said == [], result.stderr[-3000:]
    else:
        assert said == ["course: MAX's poller thread is left as MAX starts it: a thread at SCHED_IDLE cannot get its "
                        "own policy back here (Operation not permitted: RLIMIT_NICE)"], result.stderr[-3000:]


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_max_poller_idle_holds_the_poller_idle_until_the_last_graph_returns(monkeypatch):
    """max_poller_idle: the poller at SCHED_IDLE inside, still inside a block within it (two graphs at once), its own
    policy after the last; a poller that has ended changes nothing and raises nothing. Where a thread cannot leave
    SCHED_IDLE (an ordinary user), the course never wraps a graph in it, and this skips, saying so"""
    from course import runtime

    if why := runtime.idle_is_undoable():
        pytest.skip(f"an ordinary user here ({why}): the course leaves MAX's poller alone, which "
                    "test_as_an_ordinary_user_no_thread_is_left_idle_... checks")
    with _a_thread() as tid:
        monkeypatch.setattr(runtime, "POLLERS", [(tid, os.SCHED_BATCH), (999999999, os.SCHED_OTHER)])
        with runtime.max_poller_idle():
            first = os.sched_getscheduler(tid)
            with runtime.max_poller_idle():
                pass
            inner_done = os.sched_getscheduler(tid)
        after = os.sched_getscheduler(tid)
    assert (first, inner_done, after) == (os.SCHED_IDLE, os.SCHED_IDLE, os.SCHED_BATCH), (first, inner_done, after)


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="/proc/<pid>/task is Linux's")
def test_thread_wakes_reads_whole_names_and_passes_over_a_thread_that_ended(monkeypatch):
    """thread_wakes: every thread of the process with its whole name (colons and spaces in it too) and its count of
    sleeps, and nothing for a thread that ended between the listing and the reading"""
    import threading

    from course import runtime

    listed = os.listdir
    with _a_thread("a:b: c") as named, monkeypatch.context() as patch:
        patch.setattr(os, "listdir", lambda path: [*listed(path), "999999999"])  # gone by the time it is read
        wakes = runtime.thread_wakes()
    assert wakes.get(named, ("",))[0] == "a:b: c", wakes
    assert 999999999 not in wakes and threading.get_native_id() in wakes, sorted(wakes)
    assert all(isinstance(count, int) and count >= 0 for _, count in wakes.values()), wakes


def test_setup_installs_the_sigint_handler_that_makes_eager_ops_fast(monkeypatch):
    """setup's SIGINT handler raises KeyboardInterrupt, as Ctrl-C does, and replaces only Python's default handler,
    on the main thread"""
    import signal
    import threading

    from course import runtime

    own = lambda signum, frame: None  # noqa: E731 - a program's own handler
    previous = signal.getsignal(signal.SIGINT)
    try:
        for start, expected in ((signal.default_int_handler, runtime._raise_keyboard_interrupt), (own, own)):
            signal.signal(signal.SIGINT, start)
            runtime.install_sigint_handler()
            assert signal.getsignal(signal.SIGINT) is expected, f"from {start}: {signal.getsignal(signal.SIGINT)}"
        signal.signal(signal.SIGINT, signal.default_int_handler)
        errors: list[Exception] = []

        def elsewhere():  # on another thread, where signal.signal raises ValueError
            try:
                runtime.install_sigint_handler()
            except Exception as error:  # noqa: BLE001 - recorded for the assertion below
                errors.append(error)

        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()
        assert not errors and signal.getsignal(signal.SIGINT) is signal.default_int_handler, errors
    finally:
        signal.signal(signal.SIGINT, previous)
    with pytest.raises(KeyboardInterrupt):
        runtime._raise_keyboard_interrupt(signal.SIGINT, None)


@pytest.mark.parametrize("reads, mlir", [
    (["left operand"], "%1 = rmo.reshape(%arg0)\n%2 = rmo.matmul(%arg1, %1)\n%3 = rmo.reshape(%2)"),
    (["transposed", "right operand"], "%1 = mo.constant <#M.dense_array<1, 0>>\n%2 = rmo.mo.transpose(%arg1, %1)\n"
                                      "%3 = rmo.matmul(%arg0, %2)"),
    (["right operand"], "%1 = rmo.reshape(%arg1)\n%2 = rmo.matmul(%arg0, %1)"),
    (["mul", "left operand"], "%1 = rmo.mul(%arg1, %arg0)\n%2 = rmo.matmul(%arg1, %arg0)"),
    ([], "%1 = rmo.matmul(%arg0, %arg0)"),
], ids=["W @ column", "x @ W.T", "x @ reshaped W", "two reads", "no read"])
def test_weight_reads_name_how_a_graph_reads_its_weight(reads, mlir):
    """harness.weight_reads, behind step 16's check that one_row reads W as it lies: on MLIR lines of the form MAX 26.7 stages"""
    assert weight_reads(mlir) == reads


def test_maxs_cache_is_found_where_max_would_look_without_its_api(monkeypatch, tmp_path):
    """max_cache, on a MAX release without max_cache_dir: MODULAR_CACHE_DIR where it is set, else XDG_CACHE_HOME's
    modular/, else ~/.cache/modular"""
    import builtins

    from course import runtime

    real_import = builtins.__import__

    def no_api(name, *args, **kwargs):
        if name == "max._core.engine":
            raise ImportError("another MAX release")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_api)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("MODULAR_CACHE_DIR", raising=False)
    found = [runtime.max_cache()]
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    found.append(runtime.max_cache())
    monkeypatch.setenv("MODULAR_CACHE_DIR", str(tmp_path / "mine"))
    found.append(runtime.max_cache())
    assert found == [tmp_path / "home" / ".cache" / "modular", tmp_path / "xdg" / "modular", tmp_path / "mine"], found


def test_on_macos_the_runtime_takes_the_plain_road_and_says_what_it_left(monkeypatch, capsys):
    """with macOS's facts faked (no /proc, no SCHED_IDLE, no affinity mask, no MADV_HUGEPAGE; platform's own words
    for the CPU): MAX's poller is left as MAX starts it, said in one line, and Model.execute is not wrapped; the
    weights stay on the pages they are on; the kernels' bands are the machine's CPUs; a graph file names the CPU by
    platform's words (its machine where it has no processor's)"""
    import mmap

    from max.engine import Model

    from course import runtime

    read = Path.read_text

    def no_proc(self, *args, **kwargs):
        if str(self).startswith("/proc/"):
            raise FileNotFoundError(2, "No such file or directory", str(self))
        return read(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", no_proc)
    for name in ("SCHED_IDLE", "sched_getaffinity", "sched_setscheduler"):
        monkeypatch.delattr(os, name, raising=False)
    monkeypatch.delattr(mmap, "MADV_HUGEPAGE", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 10)  # an M-series Mac: performance and efficiency cores alike
    import platform

    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    monkeypatch.setattr(platform, "machine", lambda: "arm64")
    monkeypatch.setattr(runtime, "_SAID", set())
    monkeypatch.setattr(runtime, "POLLER_LEFT", None)
    maxs = getattr(Model.execute, "original", Model.execute)
    monkeypatch.setattr(Model, "execute", maxs)
    runtime.poller_idle_in_execute()
    assert Model.execute is maxs, "Model.execute was wrapped on a system without SCHED_IDLE"
    assert capsys.readouterr().err == "", "said where a check would print it"
    runtime.say_left()  # main's call
    assert capsys.readouterr().err == "course: MAX's poller thread is left as MAX starts it: this system has no SCHED_IDLE\n"
    weights = {"w": np.ones((3, 4), np.float32)}
    assert runtime.on_huge_pages(weights) is weights
    assert (runtime.cgroup_cpus(), runtime.usable_cpus()) == (None, 10)
    for processor, word in (("arm", "arm"), ("", "arm64")):
        monkeypatch.setattr(platform, "processor", lambda processor=processor: processor)
        assert f" | Darwin arm64 | {word} | " in runtime._host(), runtime._host()


def test_a_graph_file_names_an_arm_cpu_by_its_part_and_features(monkeypatch):
    """_host on aarch64, whose /proc/cpuinfo has no "model name" or "flags": its implementer, part and features
    name the CPU, so that a MEF compiled for one ARM core is not loaded on another"""
    from course import runtime

    arm = ("processor\t: 0\nBogoMIPS\t: 48.00\nFeatures\t: fp asimd evtstrm aes crc32 atomics\n"
           "CPU implementer\t: 0x61\nCPU part\t: 0x{part}\n\nprocessor\t: 1\nFeatures\t: fp asimd evtstrm aes crc32 "
           "atomics\nCPU implementer\t: 0x61\nCPU part\t: 0x{part}\n")
    read = Path.read_text
    hosts = []
    for part in ("032", "033"):
        monkeypatch.setattr(Path, "read_text", lambda self, *a, p=part, **k: arm.format(part=p)
                            if str(self) == "/proc/cpuinfo" else read(self, *a, **k))
        hosts.append(runtime._host())
    assert "fp asimd evtstrm aes crc32 atomics" in hosts[0] and "0x61" in hosts[0] and "0x032" in hosts[0], hosts
    assert hosts[0] != hosts[1], hosts


@pytest.mark.skipif(not hasattr(__import__("mmap"), "MADV_HUGEPAGE"), reason="MADV_HUGEPAGE is Linux's")
def test_huge_pages_refused_leave_the_weights_as_they_are_and_say_so(monkeypatch, capsys):
    """on_huge_pages where the kernel refuses MADV_HUGEPAGE (built without transparent huge pages): the same
    numbers, on ordinary pages, and one line that says so"""
    import mmap

    from course import runtime

    class Refusing(mmap.mmap):
        def madvise(self, *args):
            raise OSError(22, "Invalid argument")

    monkeypatch.setattr(mmap, "mmap", Refusing)
    monkeypatch.setattr(runtime, "_SAID", set())
    weights = {"a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(5, dtype=np.float32)}
    views = runtime.on_huge_pages(weights)
    assert all(np.array_equal(views[name], weights[name]) for name in weights), views
    assert capsys.readouterr().err == ("course: the weights are on ordinary pages: this system refused huge pages "
                                       "(Invalid argument)\n")


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")
def test_two_decodes_at_once_on_one_cpu_give_hugging_faces_tokens():
    """step 16's check of two decodes at once in two threads, in a process that may run on one CPU alone (as
    `taskset -c 0` gives it): the same tokens, within its own 300 s limit and this one's 600"""
    first = min(os.sched_getaffinity(0))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/test_step_16_memory_limit.py", "-q", "-p", "no:cacheprovider",
         "-k", "two_decodes_at_once_in_two_threads"], cwd=ROOT, capture_output=True, text=True, timeout=600,
        preexec_fn=lambda: os.sched_setaffinity(0, {first}))
    output = result.stdout + result.stderr
    if "skipped" in output and "passed" not in output:
        pytest.skip(f"step 16's check skipped: {output.strip().splitlines()[-1]}")
    assert result.returncode == 0 and re.search(r"\b1 passed\b", output), output[-3000:]
