# Step 01 experiment: what the configuration's numbers cost. From GPT2Config alone,
# count the parameters of each GPT-2 size (no MAX op runs, so this is instant).
from step_01_config import GPT2Config


def parameters(c: GPT2Config) -> int:
    embeddings = c.vocab_size * c.n_embd + c.n_positions * c.n_embd      # wte + wpe
    attention = c.n_embd * 3 * c.n_embd + 3 * c.n_embd + c.n_embd * c.n_embd + c.n_embd
    mlp = c.n_embd * c.inner_dim + c.inner_dim + c.inner_dim * c.n_embd + c.n_embd
    norms = 2 * 2 * c.n_embd                                             # ln_1, ln_2
    return embeddings + c.n_layer * (attention + mlp + norms) + 2 * c.n_embd  # + ln_f


sizes = {
    "gpt2 (small)": GPT2Config(),
    "gpt2-medium": GPT2Config(n_embd=1024, n_layer=24, n_head=16),
    "gpt2-large": GPT2Config(n_embd=1280, n_layer=36, n_head=20),
    "gpt2-xl": GPT2Config(n_embd=1600, n_layer=48, n_head=25),
}
print("model          n_embd  n_layer  n_head  head_dim  inner_dim  parameters")
for name, c in sizes.items():
    print(f"{name:13s}  {c.n_embd:6d}  {c.n_layer:7d}  {c.n_head:6d}  {c.head_dim:8d}  {c.inner_dim:9d}  {parameters(c):>11,}")
try:
    GPT2Config(n_embd=768, n_head=10)
except ValueError as error:
    print(f"n_head=10: ValueError: {error}")
