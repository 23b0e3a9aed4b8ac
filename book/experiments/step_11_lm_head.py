# Step 11 experiment: what an untrained GPT-2 predicts. With GPT-2's initial
# weights (N(0, 0.02²)) the logits are all close to 0, so the next-token
# distribution is close to uniform and the loss is close to ln(vocab_size).
import math

import numpy as np
from max.experimental import functional as F

from course import runtime
from course.weights import init_like_gpt2
from step_01_config import GPT2Config
from step_11_lm_head import GPT2LMHeadModel

config = GPT2Config(vocab_size=96, n_positions=32, n_embd=64, n_layer=2, n_head=4)
with F.lazy():
    model = GPT2LMHeadModel(config)
init_like_gpt2(model, seed=0)
names = [name for name, _ in model.parameters]
print("parameters named like the head:", [n for n in names if "lm_head" in n or "wte" in n])

ids = np.random.default_rng(0).integers(0, config.vocab_size, size=[1, 12])
logits = model(runtime.from_numpy(ids))
probs = runtime.to_numpy(F.softmax(logits, axis=-1))
print("ids", list(ids.shape), "-> logits", list(probs.shape))

last = probs[0, -1]  # the prediction for the token after the last one
top = np.argsort(-last)[:5]
print("next token after the last position, top 5:", ", ".join(f"{t}: {last[t]:.4f}" for t in top))
print(f"argmax = {int(np.argmax(last))}; uniform would be 1/{config.vocab_size} = {1 / config.vocab_size:.4f}")
print("probabilities sum to", round(float(last.sum()), 4))

# Cross-entropy of the true next tokens: position t predicts ids[t + 1].
loss = -np.mean(np.log(probs[0, np.arange(11), ids[0, 1:]]))
print(f"loss on the 11 next tokens: {loss:.3f}; ln({config.vocab_size}) = {math.log(config.vocab_size):.3f}")
print(f"for GPT-2 small, an untrained model starts near ln(50257) = {math.log(50257):.2f}")
