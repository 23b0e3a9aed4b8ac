# Step 03 experiment: two tokens whose numbers differ in scale by 1000 leave a fresh
# layer norm with the same mean 0 and spread 1; eps only matters when a token's
# numbers are (nearly) all equal.
import numpy as np

from course import runtime
from step_03_layer_norm import LayerNorm

norm = LayerNorm(8)
base = np.random.default_rng(0).standard_normal(8).astype(np.float32)
x = np.stack([base, 1000 * base + 5, np.full(8, 3.0, np.float32)])[None]  # [1, 3, 8]
y = runtime.to_numpy(norm(runtime.from_numpy(x)))
for name, before, after in zip(["token", "1000·token + 5", "all 3.0"], x[0], y[0]):
    print(f"{name:15s} in: mean {before.mean():9.2f} std {before.std():8.2f}   "
          f"out: mean {round(float(after.mean()), 2) + 0:5.2f} std {after.std():4.2f}")
print("the first two tokens normalize to the same vector:", bool(np.allclose(y[0, 0], y[0, 1], atol=1e-3)))
