# Step 10 experiment: where GPT-2 small's parameters are, counted on the model
# you built and checked against V·C + P·C + L(12C² + 13C) + 2C.
import numpy as np
from max.experimental import functional as F

from step_01_config import GPT2Config
from step_10_model import GPT2Model

config = GPT2Config()
with F.lazy():  # shapes only: building 124M random numbers eagerly takes most of a minute
    model = GPT2Model(config)

groups = {}
for name, weight in model.parameters:
    group = name.split(".")[0] if not name.startswith("h.") else "h (all blocks)"
    groups[group] = groups.get(group, 0) + int(np.prod([int(d) for d in weight.shape]))
total = sum(groups.values())
for group, count in groups.items():
    print(f"  {group:15s} {count:12,}  {count / total:6.1%}")
print(f"  {'total':15s} {total:12,}")

V, P, C, L = config.vocab_size, config.n_positions, config.n_embd, config.n_layer
print(f"V·C + P·C + L(12C² + 13C) + 2C = {V * C + P * C + L * (12 * C * C + 13 * C) + 2 * C:,}")
print(f"blocks: {len(model.h)}; first block's first weight: h.0.{next(iter(model.h[0].parameters))[0]}")
