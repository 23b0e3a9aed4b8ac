# Step 18 experiment: RMSNorm (step 18) next to LayerNorm (step 03), both fresh (scale 1,
# no shift), on a token, the same token scaled, the same token shifted, and a token of ~0.
import numpy as np

from course import runtime
from step_03_layer_norm import LayerNorm
from step_18_rms_norm import RMSNorm

base = np.random.default_rng(0).standard_normal(8).astype(np.float32)
tokens = {"token": base, "1000·token": 1000 * base, "token + 5": base + 5, "0.001·token": 0.001 * base}
x = runtime.from_numpy(np.stack(list(tokens.values()))[None])  # [1, 4, 8]
outputs = {"RMSNorm": runtime.to_numpy(RMSNorm(8)(x))[0], "LayerNorm": runtime.to_numpy(LayerNorm(8)(x))[0]}
print(f"{'':12s} {'RMSNorm out: mean   rms':>25s}   {'LayerNorm out: mean   rms':>26s}")
for row, name in enumerate(tokens):
    cells = [f"{round(float(y[row].mean()), 2) + 0:5.2f}  {np.sqrt((y[row] ** 2).mean()):4.2f}" for y in outputs.values()]
    print(f"{name:12s} {cells[0]:>25s}   {cells[1]:>26s}")
for name, y in outputs.items():
    print(f"{name}: token and 1000·token give the same vector: {bool(np.allclose(y[0], y[1], atol=1e-3))}; "
          f"token and token + 5: {bool(np.allclose(y[0], y[2], atol=1e-3))}")
