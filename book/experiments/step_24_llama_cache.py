# Step 24 experiment: the course's own small Llama (course/llama-book), trained on this
# book as the course's GPT-2 was (`pixi run train --family llama`), generating greedily
# with this step's cache; then what the cache costs with grouped-query attention and
# without it, and the two course models on the same held-out text.
import json

from max.experimental import functional as F

from course.outline import COURSE_LLAMA, COURSE_MODEL
from course.runtime import from_numpy
from step_12_tokenizer import Tokenizer
from step_13_generation import generate
from step_17_llama_config import LlamaConfig
from step_23_llama_pretrained import load_pretrained
from step_24_llama_cache import CachedLlamaForCausalLM, CachedLlamaNextLogits, kv_bytes_per_token

pretrained = load_pretrained("course-llama")
config = pretrained.config
with F.lazy():
    model = CachedLlamaForCausalLM(config)
model.load_state_dict({name: from_numpy(value) for name, value in pretrained.state.items()})
next_logits = CachedLlamaNextLogits(model, config)  # one compiled graph: prefill and decode
tokenizer = Tokenizer.from_dir(pretrained.folder)

for prompt in ["The KV cache", "RoPE rotates"]:
    ids = tokenizer.encode(prompt)
    new = list(generate(next_logits, ids, 24, n_positions=config.max_position_embeddings,
                        eos_id=tokenizer.eot_id, temperature=0.0))
    k = next_logits.keys[0]
    print(f"{prompt!r} -> {tokenizer.decode(new)!r}")
    print(f"  the cache after {len(ids) + len(new) - 1} tokens: K and V [{', '.join(str(int(d)) for d in k.shape)}] "
          f"in each of {len(next_logits.keys)} layers")

print("\nThe cache, float32, with grouped-query attention and with one key/value head per query head:")
for name, sizes in {"the course's Llama": config, "SmolLM2-135M": LlamaConfig()}.items():
    gqa = kv_bytes_per_token(sizes)
    mha = gqa * sizes.num_attention_heads // sizes.num_key_value_heads
    context = sizes.max_position_embeddings
    print(f"  {name}: {sizes.num_key_value_heads} key/value heads for {sizes.num_attention_heads} query heads: "
          f"{gqa / 1024:g} KiB a token, {gqa * context / 2**20:g} MiB at {context:,} tokens "
          f"(one per query head: {mha * context / 2**20:g} MiB)")

print("\nThe two course models, the same held-out texts (perplexity measured by `train`):")
for name, folder in (("GPT-2", COURSE_MODEL), ("Llama", COURSE_LLAMA)):
    record = json.loads((folder / "training.json").read_text())
    print(f"  {name:6} trained on {record['trained_tokens']:,} tokens, {record['steps']} steps of "
          f"{record['batch']} windows: perplexity {record['kjv_held_out_perplexity']:.1f} on the Bible's "
          f"{record['kjv_held_out_tokens']:,} held-out tokens, {record['held_out_perplexity']:.1f} on the book's "
          f"{record['held_out_tokens']:,}")
