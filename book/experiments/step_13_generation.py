# Step 13 experiment: how temperature, top-k and top-p reshape one next-token
# distribution, why their order matters, what a seed does, and whether the draws
# follow the filtered distribution. NumPy only: no model, no MAX.
import math

import numpy as np

from step_13_generation import filter_logits, next_token

# Made-up logits for the word after "The cat sat on the", most likely first.
words = ["mat", "floor", "sofa", "bed", "roof", "table", "moon", "banana"]
logits = np.array([3.0, 2.2, 1.8, 1.0, 0.9, 0.5, -1.0, -2.5])


def probs(filtered):
    p = np.exp(filtered - filtered.max())  # exp(-inf) = 0: a cut token gets probability 0
    return p / p.sum()


settings = {
    "T=1": dict(temperature=1.0),
    "T=0.5": dict(temperature=0.5),
    "T=2": dict(temperature=2.0),
    "k=3": dict(temperature=1.0, top_k=3),
    "p=0.9": dict(temperature=1.0, top_p=0.9),
    "T=.5 p=.9": dict(temperature=0.5, top_p=0.9),
    "T=2 p=.9": dict(temperature=2.0, top_p=0.9),
}
table = {name: probs(filter_logits(logits, **s)) for name, s in settings.items()}
print("probability of each next word (- = cut, set to -inf before the softmax)")
print(f"{'':8}" + "".join(f"{name:>11}" for name in settings))
for i, word in enumerate(words):
    print(f"{word:8}" + "".join(f"{p[i]:11.3f}" if p[i] > 0 else f"{'-':>11}" for p in table.values()))
print(f"{'kept':8}" + "".join(f"{int((p > 0).sum()):11d}" for p in table.values()))

p = table["T=1"]
print("\ntop-p 0.9 at T=1, most likely first: sum of the words before, then kept?")
for i, word in enumerate(words[:7]):
    before = p[:i].sum()
    print(f"  {word:7} p={p[i]:.3f}  before={before:.3f}  {'kept' if before < 0.9 else 'cut'}")

# The same two filters in the other order: top-p on the untempered logits, then T=2.
cut_first = filter_logits(logits, temperature=1.0, top_p=0.9) / 2.0
print(f"\nT=2 then top-p 0.9 keeps {int(np.isfinite(filter_logits(logits, 2.0, 0, 0.9)).sum())} words; "
      f"top-p 0.9 then T=2 keeps {int(np.isfinite(cut_first).sum())}")

print("\ngreedy (temperature 0):", words[next_token(logits, np.random.default_rng(0), temperature=0.0)])
for seed in (0, 0, 1):
    rng = np.random.default_rng(seed)
    drawn = [words[next_token(logits, rng, temperature=1.0, top_p=0.9)] for _ in range(8)]
    print(f"seed {seed}, T=1, top-p 0.9:", " ".join(drawn))

# 10,000 draws against the filtered distribution: Pearson's chi-square.
rng = np.random.default_rng(2024)
draws = 10_000
counts = np.bincount([next_token(logits, rng, temperature=1.0, top_p=0.9) for _ in range(draws)], minlength=8)
expected = table["p=0.9"] * draws
kept = expected > 0
chi2 = float(((counts[kept] - expected[kept]) ** 2 / expected[kept]).sum())
dof = int(kept.sum()) - 1  # 4 here, where P(chi-square > x) = exp(-x/2) (1 + x/2)
p_value = math.exp(-chi2 / 2) * (1 + chi2 / 2)
print(f"\n{draws:,} draws, T=1, top-p 0.9:")
print("  counts  ", " ".join(f"{c:5d}" for c in counts))
print("  expected", " ".join(f"{e:5.0f}" for e in expected))
print(f"  chi-square {chi2:.2f} on {dof} degrees of freedom, p = {p_value:.2f}")
