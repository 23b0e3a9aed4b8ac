# Step 08 experiment: 24 pre-norm sublayers (attention, MLP, attention, ... as in
# GPT-2 small's 12 blocks), stacked with and without the residual connection.
# Printed: the spread (std) of the token vectors, and how much of the input
# each token still points along (cosine similarity with the embedding it started as).
import numpy as np
from max.experimental import functional as F

from course import runtime
from course.weights import init_like_gpt2
from step_01_config import GPT2Config
from step_03_layer_norm import LayerNorm
from step_04_mlp import MLP
from step_07_attention import CausalSelfAttention
from step_08_residual import residual

config = GPT2Config(vocab_size=96, n_positions=32, n_embd=64, n_layer=12, n_head=4)
sublayers = []
for i in range(2 * config.n_layer):
    with F.lazy():
        norm = LayerNorm(config.n_embd)
        sublayer = CausalSelfAttention(config) if i % 2 == 0 else MLP(config)
    init_like_gpt2(sublayer, seed=i, std=0.1)  # larger than GPT-2's 0.02, so each branch adds visibly
    sublayers.append((norm, sublayer))

x0 = np.random.default_rng(0).standard_normal([1, 8, config.n_embd]).astype(np.float32)


def report(x):
    x = runtime.to_numpy(x)
    cosine = (x * x0).sum(-1) / np.linalg.norm(x, axis=-1) / np.linalg.norm(x0, axis=-1)
    return f"{x.std():6.2f} {round(cosine.mean(), 2) + 0:6.2f}"  # + 0 turns -0.0 into 0.0


print("depth   with residual    without")
print("          std    cos    std    cos")
with_residual = without = runtime.from_numpy(x0)
print(f"{0:5d}  {report(with_residual)}  {report(without)}")
for depth, (norm, sublayer) in enumerate(sublayers, start=1):
    with_residual = residual(with_residual, norm, sublayer)  # x + sublayer(norm(x))
    without = sublayer(norm(without))                        # the branch alone
    if depth % 4 == 0:
        print(f"{depth:5d}  {report(with_residual)}  {report(without)}")
