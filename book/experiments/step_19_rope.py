# Step 19 experiment: a query and a key rotated to positions m and n score the same
# for every pair of positions the same distance apart (SmolLM2's head_dim and theta).
import numpy as np

from course import runtime
from step_19_rope import apply_rope, rope_tables

head_dim, theta = 64, 100000.0
rng = np.random.default_rng(0)
q, k = (rng.standard_normal((1, 1, 1, head_dim)).astype(np.float32) for _ in range(2))
cos, sin = (runtime.to_numpy(t) for t in rope_tables(head_dim, theta, 64))  # positions 0 … 63


def score(m: int, n: int) -> float:
    """q at position m against k at position n, both rotated."""
    qm = apply_rope(runtime.from_numpy(q), runtime.from_numpy(cos[m:m + 1]), runtime.from_numpy(sin[m:m + 1]))
    kn = apply_rope(runtime.from_numpy(k), runtime.from_numpy(cos[n:n + 1]), runtime.from_numpy(sin[n:n + 1]))
    return float((runtime.to_numpy(qm) * runtime.to_numpy(kn)).sum())


print(f"unrotated q·k: {float((q * k).sum()):7.3f}")
for distance in (0, 1, 5, 30):
    pairs = [(n + distance, n) for n in (0, 7, 33)]
    print(f"m - n = {distance:2d}: " + "   ".join(f"q{m}·k{n} {score(m, n):7.3f}" for m, n in pairs))
