# Step 02 experiment: the mask for 2 new tokens after 3 cached ones, and what it does
# to a row of equal scores: after the softmax, each query shares its weight equally
# among the keys it may see, and gives exactly 0 to the rest.
import numpy as np

from course import runtime
from step_02_causal_mask import causal_mask

mask = runtime.to_numpy(causal_mask(2, past_len=3))
print("mask for seq_len=2, past_len=3:", list(mask.shape))
for i, row in enumerate(mask):
    print(f"  query {i} (position {3 + i}):", "  ".join(f"{v:4}" for v in row))
scores = np.zeros_like(mask) + mask                     # equal scores, then the mask
weights = np.exp(scores - scores.max(-1, keepdims=True))
weights /= weights.sum(-1, keepdims=True)
for i, row in enumerate(weights):
    print(f"  weights of query {i}:", "  ".join(f"{v:.2f}" for v in row), f"(sum {row.sum():.2f})")
print("one new token after 6 cached:", runtime.to_numpy(causal_mask(1, past_len=6)).tolist())
