# Step 16 experiment: the bytes a decode step reads, for each GPT-2 size and weight
# format, and the ceiling they put on tokens per second; then one row times a matrix,
# computed both ways (eager MAX), to see that only the order of the reading changes.
import numpy as np

from course import runtime
from step_01_config import GPT2Config
from step_16_memory_limit import bytes_per_token, one_row, roofline

sizes = {"gpt2": (768, 12, 12), "gpt2-medium": (1024, 24, 16), "gpt2-large": (1280, 36, 20), "gpt2-xl": (1600, 48, 25)}
formats = {"float32": 4, "q6_k": 6.5625 / 8, "q4_0": 4.5 / 8}
print("MB read per decoded token, and the tok/s ceiling at 30 GB/s:")
print(f"{'model':12}" + "".join(f"{name:>22}" for name in formats))
for model, (width, layers, heads) in sizes.items():
    config = GPT2Config(n_embd=width, n_layer=layers, n_head=heads)
    cells = [f"{bytes_per_token(config, b) / 1e6:8.0f} MB {roofline(config, 30, b):6.0f} tok/s" for b in formats.values()]
    print(f"{model:12}" + "".join(f"{cell:>22}" for cell in cells))

config = GPT2Config()
head = config.vocab_size * config.n_embd * 4
print(f"\nGPT-2 small: the head (wte, {head / 1e6:.0f} MB) is {head / bytes_per_token(config):.0%} of each token's bytes")

rng = np.random.default_rng(16)
x = rng.standard_normal((1, 1, 768)).astype(np.float32)
w = rng.standard_normal((2304, 768)).astype(np.float32) / 28
fast = runtime.to_numpy(one_row(runtime.from_numpy(x), runtime.from_numpy(w)))
print(f"one_row(x [1, 1, 768], W [2304, 768]) -> {list(fast.shape)}; "
      f"equals x @ Wᵀ to 1e-5: {bool(np.allclose(fast, x @ w.T, atol=1e-5))}")
