# Step 04 experiment: exact GELU against the tanh form GPT-2 uses, at a few points
# and at its worst, in NumPy, then the MLP's shapes and parameter count.
import math

import numpy as np

from step_01_config import GPT2Config
from step_04_mlp import MLP
from max.experimental import functional as F

erf = np.vectorize(math.erf)
x = np.linspace(-4, 4, 8001)
exact = 0.5 * x * (1 + erf(x / math.sqrt(2)))
tanh = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
for point in (-1.0, 0.5, 1.0):
    i = int(np.argmin(abs(x - point)))
    print(f"x = {point:4}: exact {exact[i]:.5f}  tanh {tanh[i]:.5f}")
worst = int(np.argmax(abs(exact - tanh)))
print(f"largest gap on [-4, 4]: {abs(exact - tanh)[worst]:.1e} at x = {x[worst]:.2f}")

with F.lazy():
    mlp = MLP(GPT2Config())
for name, tensor in mlp.parameters:
    print(f"{name:14s} {[int(d) for d in tensor.shape]}")
print(f"parameters: {sum(math.prod(int(d) for d in t.shape) for _, t in mlp.parameters):,}")
