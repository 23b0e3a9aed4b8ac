# Step 05 experiment: a lookup is a one-hot matrix product that it never builds,
# and it ignores context: the same id always gets the same vector.
import numpy as np
from max.experimental import functional as F

from course import runtime
from course.weights import init_like_gpt2
from step_01_config import GPT2Config
from step_05_token_embeddings import TokenEmbeddings

config = GPT2Config(vocab_size=96, n_positions=32, n_embd=64, n_layer=2, n_head=4)
with F.lazy():
    embeddings = TokenEmbeddings(config)
init_like_gpt2(embeddings, seed=0)  # seeded N(0, 0.02²) table, like GPT-2's initialization

ids = np.array([[5, 17, 5, 42]])
out = runtime.to_numpy(embeddings(runtime.from_numpy(ids)))
table = runtime.to_numpy(embeddings.wte.weight)
one_hot = np.eye(config.vocab_size, dtype=np.float32)[ids]  # [1, 4, 96]: a 1 in column id

print(f"ids {list(ids.shape)} -> vectors {list(out.shape)}")
print(f"one_hot {list(one_hot.shape)} @ wte {list(table.shape)} equals the lookup:",
      np.array_equal(one_hot @ table, out))
print("id 5 at positions 0 and 2 gets the same vector:", np.array_equal(out[0, 0], out[0, 2]))

V, C = GPT2Config().vocab_size, GPT2Config().n_embd
print(f"GPT-2 small's wte: V·C = {V:,} · {C} = {V * C:,} parameters, {V * C * 4 / 1e6:.1f} MB in float32")
print(f"per token, a one-hot product does {V * C:,} multiply-adds; the lookup copies {C} numbers")
