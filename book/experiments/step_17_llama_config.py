# Step 17 experiment: what a Llama config's numbers cost. From LlamaConfig alone, count
# each model's parameters and the key/value cache one token needs (no MAX op runs).
from step_17_llama_config import LlamaConfig


def parameters(c: LlamaConfig) -> int:
    kv_width = c.num_key_value_heads * c.head_dim
    attention = 2 * c.hidden_size * c.hidden_size + 2 * c.hidden_size * kv_width  # q, o; k, v
    mlp = 3 * c.hidden_size * c.intermediate_size                                 # gate, up, down
    layer = attention + mlp + 2 * c.hidden_size                                   # two RMSNorms
    head = 0 if c.tie_word_embeddings else c.vocab_size * c.hidden_size
    return c.vocab_size * c.hidden_size + c.num_hidden_layers * layer + c.hidden_size + head


def cache_bytes_per_token(c: LlamaConfig) -> int:
    return 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * 4  # k and v, float32


sizes = {
    "SmolLM2-135M": LlamaConfig(),
    "  all 9 kv heads": LlamaConfig(num_key_value_heads=9),
    "Llama-2-7B": LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                              num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
                              max_position_embeddings=4096, rope_theta=10000.0, tie_word_embeddings=False),
    "Llama-3-8B": LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                              num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                              max_position_embeddings=8192, rope_theta=500000.0, tie_word_embeddings=False),
}
print("model             heads  kv  groups  head_dim     parameters  cache/token")
for name, c in sizes.items():
    print(f"{name:16s}  {c.num_attention_heads:5d}  {c.num_key_value_heads:2d}  {c.num_key_value_groups:6d}  "
          f"{c.head_dim:8d}  {parameters(c):>13,}  {cache_bytes_per_token(c) / 1024:7.0f} KiB")
for bad in (dict(num_attention_heads=7), dict(num_key_value_heads=2)):
    try:
        LlamaConfig(**bad)
    except ValueError as error:
        print(f"{bad}: ValueError: {error}")
