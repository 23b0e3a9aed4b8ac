# Step 06 experiment: position embeddings make the same token differ by place,
# and past_len gives the later tokens of a sequence exactly the vectors they
# would have had in the whole sequence (what a KV cache relies on in step 15).
import numpy as np
from max.experimental import functional as F

from course import runtime
from course.weights import init_like_gpt2
from step_01_config import GPT2Config
from step_06_position_embeddings import Embeddings

config = GPT2Config(vocab_size=96, n_positions=32, n_embd=64, n_layer=2, n_head=4)
with F.lazy():
    embeddings = Embeddings(config)
init_like_gpt2(embeddings, seed=0)


def embed(ids, past_len=0):
    return runtime.to_numpy(embeddings(runtime.from_numpy(np.array(ids)), past_len=past_len))


whole = embed([[5, 17, 5, 42, 8, 8]])
print("output shape:", list(whole.shape))
print("id 5 at positions 0 and 2, max |difference|:", round(float(np.abs(whole[0, 0] - whole[0, 2]).max()), 4))

tail = embed([[42, 8, 8]], past_len=3)  # the last three tokens, after three earlier ones
print("last 3 tokens alone with past_len=3, equal to the whole run:", np.array_equal(tail, whole[:, 3:]))
print("the same 3 tokens with past_len=0, equal:", np.array_equal(embed([[42, 8, 8]]), whole[:, 3:]))

try:
    embed([[1, 2, 3]], past_len=30)
except ValueError as error:
    print("past_len=30 with 3 tokens:", error)

P, C = GPT2Config().n_positions, GPT2Config().n_embd
print(f"GPT-2 small's wpe: P·C = {P:,} · {C} = {P * C:,} parameters")
