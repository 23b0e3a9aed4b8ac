# Step 20 experiment: SiLU next to GPT-2's GELU, and what three matrices of width
# 8/3 · hidden cost next to GPT-2's two of width 4 · hidden.
import numpy as np

from course import runtime
from max.experimental import functional as F
from step_17_llama_config import LlamaConfig

z = np.array([-6, -4, -2, -1, -0.5, 0, 0.5, 1, 2, 4], np.float32)
silu = runtime.to_numpy(F.silu(runtime.from_numpy(z)))
gelu = runtime.to_numpy(F.gelu(runtime.from_numpy(z), approximate="tanh"))
print("z       " + " ".join(f"{v:6.1f}" for v in z))
print("silu(z) " + " ".join(f"{v:6.3f}" for v in silu))
print("gelu(z) " + " ".join(f"{round(float(v), 3) + 0:6.3f}" for v in gelu))
print(f"lowest silu: {silu.min():.3f} at z = {z[silu.argmin()]:g}")

c = LlamaConfig()
swiglu = 3 * c.hidden_size * c.intermediate_size
gpt2_style = 2 * c.hidden_size * 4 * c.hidden_size
print(f"SmolLM2 MLP, 3 × {c.hidden_size} × {c.intermediate_size}: {swiglu:,} weights; "
      f"a GPT-2 MLP of the same width, 2 × {c.hidden_size} × {4 * c.hidden_size}: {gpt2_style:,}")
