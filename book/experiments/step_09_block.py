# Step 09 experiment: a block's parameters, counted against 12C² + 13C, and a
# test of causality: changing token 5 changes no output before position 5.
import numpy as np
from max.experimental import functional as F

from course import runtime
from course.weights import init_like_gpt2
from step_01_config import GPT2Config
from step_09_block import Block

gpt2 = GPT2Config()
with F.lazy():  # shapes only: nothing is computed until weights load
    block = Block(gpt2)
total = 0
for name, weight in block.parameters:
    shape = [int(d) for d in weight.shape]
    total += int(np.prod(shape))
    print(f"  {name:22s} {str(shape):12s}")
C = gpt2.n_embd
print(f"GPT-2 small block: {total:,} parameters; 12C² + 13C = {12 * C * C + 13 * C:,}")

config = GPT2Config(vocab_size=96, n_positions=32, n_embd=64, n_layer=2, n_head=4)
with F.lazy():
    block = Block(config)
init_like_gpt2(block, seed=0, std=0.1)
x = np.random.default_rng(0).standard_normal([1, 8, config.n_embd]).astype(np.float32)
changed = x.copy()
changed[0, 5] = np.random.default_rng(1).standard_normal(config.n_embd)  # another token at position 5
before = runtime.to_numpy(block(runtime.from_numpy(x)))
after = runtime.to_numpy(block(runtime.from_numpy(changed)))
print("shape in", list(x.shape), "-> out", list(before.shape))
print("max |change| at each position:", " ".join(f"{d:.3f}" for d in np.abs(after - before).max(-1)[0]))
print("positions 0-4 unchanged, bit for bit:", np.array_equal(after[0, :5], before[0, :5]))
