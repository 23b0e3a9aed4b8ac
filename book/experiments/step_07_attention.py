# Step 07 experiment: the attention weights of one head. attend() returns
# weights @ v, so with v = the identity matrix it returns the weights themselves.
import numpy as np
from max.experimental import functional as F

from course import runtime
from course.weights import init_like_gpt2
from step_01_config import GPT2Config
from step_07_attention import CausalSelfAttention

config = GPT2Config(vocab_size=96, n_positions=32, n_embd=64, n_layer=2, n_head=4)
T = 6
x = runtime.from_numpy(np.random.default_rng(1).standard_normal([1, T, config.n_embd]).astype(np.float32))
identity = runtime.from_numpy(np.broadcast_to(np.eye(T, dtype=np.float32), [1, config.n_head, T, T]))

for std in (0.02, 0.3):
    with F.lazy():
        attention = CausalSelfAttention(config)
    init_like_gpt2(attention, seed=0, std=std)
    q, k, v = F.split(attention.c_attn(x), [config.n_embd] * 3, axis=-1)
    weights = runtime.to_numpy(attention.attend(attention.split_heads(q), attention.split_heads(k), identity))
    print(f"head 0, weights ~ N(0, {std}²): row = query, column = key")
    for row in weights[0, 0]:
        print("   " + " ".join(f"{w:5.2f}" for w in row))
    print("   each row sums to", sorted({round(float(s), 5) for s in weights.sum(-1).ravel()}))

C = GPT2Config().n_embd
print(f"GPT-2 small's attention: 4C² + 4C = {4 * C * C + 4 * C:,} parameters per block")
