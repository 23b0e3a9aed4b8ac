# Step 21 experiment: which key/value head each query head reads, and what grouped-query
# attention saves in the KV cache (float32, per token, all layers).
import numpy as np

from course import runtime
from max.experimental import functional as F
from step_17_llama_config import LlamaConfig
from step_21_gqa import LlamaAttention

config = LlamaConfig()  # SmolLM2-135M: 9 query heads, 3 key/value heads
with F.lazy():
    attention = LlamaAttention(config)
# Key/value head j holds the number j everywhere: [batch 1, 3 heads, 2 tokens, head_dim].
k = np.broadcast_to(np.arange(3, dtype=np.float32)[None, :, None, None], (1, 3, 2, config.head_dim)).copy()
seen = runtime.to_numpy(attention.repeat_kv(runtime.from_numpy(k)))[0, :, 0, 0]
print("query head    " + " ".join(f"{h:2d}" for h in range(config.num_attention_heads)))
print("reads k/v head" + " ".join(f"{int(j):2d}" for j in seen))


def cache_bytes(layers: int, kv_heads: int, head_dim: int) -> int:
    """K and V, float32, every layer, for one token."""
    return 2 * layers * kv_heads * head_dim * 4


models = {  # name: (layers, query heads, key/value heads, head_dim), from each model's config.json
    "SmolLM2-135M": (30, 9, 3, 64),
    "Llama 3.2 1B": (16, 32, 8, 64),
    "Llama 3.1 8B": (32, 32, 8, 128),
}
print(f"{'model':14} {'heads':>9} {'KV cache per token':>19} {'if every head had its own':>26} {'at 8,192 tokens':>16}")
for name, (layers, heads, kv_heads, head_dim) in models.items():
    gqa, mha = cache_bytes(layers, kv_heads, head_dim), cache_bytes(layers, heads, head_dim)
    print(f"{name:14} {heads:>4} / {kv_heads:<3} {gqa / 1024:>16,.0f} KiB {mha / 1024:>22,.0f} KiB "
          f"{gqa * 8192 / 2**30:>12.2f} GiB")
