# Step 15 experiment: the cache growing through a prefill and three decode steps
# (eager MAX, a tiny GPT-2), the logits compared with step 11's model run on the
# whole sequence, then the multiply-adds per new token with and without a cache.
import numpy as np
from max.experimental import functional as F

from course import runtime
from course.weights import init_like_gpt2
from step_01_config import GPT2Config
from step_11_lm_head import GPT2LMHeadModel
from step_15_kv_cache import CachedGPT2LMHeadModel

config = GPT2Config(vocab_size=96, n_positions=32, n_embd=64, n_layer=2, n_head=4)
H, D = config.n_head, config.n_embd // config.n_head
with F.lazy():
    cached = CachedGPT2LMHeadModel(config)
    plain = GPT2LMHeadModel(config)
init_like_gpt2(cached, seed=0, std=0.3)
plain.load_state_dict(dict(cached.parameters))  # the same names, so the same weights


def shape(t):
    return "[" + ", ".join(str(int(d)) for d in t.shape) + "]"


empty = runtime.from_numpy(np.zeros((1, H, 0, D), dtype=np.float32))
keys, values = [empty] * config.n_layer, [empty] * config.n_layer
ids = [7, 1, 30, 52, 3]
new = ids
rows = []
print(f"n_layer={config.n_layer}, H={H}, D={D}; the cache: one K and one V per layer, [1, H, past_len, D]")
for step in ["prefill", "decode 1", "decode 2", "decode 3"]:
    past_len = int(keys[0].shape[2])
    logits, keys, values = cached(runtime.from_numpy(np.array([new], dtype=np.int64)), keys, values)
    row = runtime.to_numpy(logits)[0]
    rows.append(row)
    print(f"{step:9} ids {shape(np.array([new]))}  past_len {past_len}  positions {past_len}..{past_len + len(new) - 1}"
          f"  mask [{len(new)}, {past_len + len(new)}]  logits {shape(logits)}  K, V {shape(keys[0])} ×{len(keys)}")
    new = [int(np.argmax(row))]  # greedy: the next call feeds only this token
    ids = ids + new

# Step 11's model, no cache, on all 8 tokens at once: the last 4 positions must agree.
whole = runtime.to_numpy(plain(runtime.from_numpy(np.array([ids[:-1]], dtype=np.int64))))[0]
delta = np.abs(np.stack(rows) - whole[4:]).max()
print(f"fed {ids[:-1]}, next greedy token {ids[-1]}")
print(f"step 11's model on those 8 tokens at once gives the same logits at positions 4..7: {bool(delta < 1e-4)}")

# Multiply-adds to get the next token's logits once the text is n tokens long, GPT-2 small.
C, L, V = 768, 12, 50257
print("\nGPT-2 small, multiply-adds for one new token:")
print(f"{'n':>6} {'without a cache':>17} {'with a cache':>14} {'ratio':>7}")
for n in (12, 64, 256, 1024):
    # per layer: 12·C² per token for c_attn, c_proj and the MLP; q·kᵀ and weights·v cost C per (query, key) pair each
    without = L * (12 * C * C * n + 2 * C * n * n) + V * C  # every token again, an n × n attention
    with_cache = L * (12 * C * C + 2 * C * n) + V * C  # one token, n keys; the head on the last position
    print(f"{n:6} {without / 1e9:15.2f} G {with_cache / 1e9:12.3f} G {without / with_cache:6.0f}×")
kv = 2 * L * 1024 * C * 4
print(f"the cache's price: 2·L·n·C floats = {kv / 2**20:.0f} MiB in float32 at n = 1024")
