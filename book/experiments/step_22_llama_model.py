# Step 22 experiment: SmolLM2-135M's parameters by kind, counted on the model built from
# step 17's default config (inside F.lazy(), so no weight is computed).
import math

from max.experimental import functional as F
from step_17_llama_config import LlamaConfig
from step_22_llama_model import LlamaForCausalLM

config = LlamaConfig()
with F.lazy():
    model = LlamaForCausalLM(config)
kinds = {"embed_tokens": 0, "self_attn": 0, "mlp": 0, "norms": 0}
for name, tensor in model.parameters:
    count = math.prod(int(d) for d in tensor.shape)
    kind = next((k for k in ("embed_tokens", "self_attn", "mlp") if k in name), "norms")
    kinds[kind] += count
total = sum(kinds.values())
for kind, count in kinds.items():
    print(f"{kind:13} {count:>12,} {count / total:6.1%}")
print(f"{'total':13} {total:>12,}   (the head is tied: no lm_head.weight)")
untied = config.vocab_size * config.hidden_size
print(f"an untied head would add {untied:,} ({untied / total:.0%} more)")
