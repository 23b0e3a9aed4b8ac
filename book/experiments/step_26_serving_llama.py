# Step 26 experiment: the course's own Llama served as MAX's server runs it, in this process (step 25's
# pool of pages of 4 tokens, a ragged batch, greedy), then what its pages hold against GPT-2's: the Llama
# keeps 2 key/value heads a layer where GPT-2 keeps all 4.
import numpy as np
from max.experimental import functional as F

from course.paged import PagePool, RaggedRunner
from course.runtime import from_numpy
from step_12_tokenizer import Tokenizer
from step_23_llama_pretrained import load_pretrained
from step_26_serving_llama import ServedLlama

pretrained = load_pretrained("course-llama")
config = pretrained.config
with F.lazy():
    model = ServedLlama(config)
model.load_state_dict({name: from_numpy(value) for name, value in pretrained.state.items()})
pool = PagePool.for_model(config.num_key_value_heads, config.head_dim, config.num_hidden_layers, pages=40,
                          page_size=4)
runner = RaggedRunner(model, pool, pretrained.state)
tokenizer = Tokenizer.from_dir(pretrained.folder)

prompts = {"a": "In the beginning", "b": "The cache", "c": "And God said, Let there be"}
texts = {name: [] for name in prompts}
batch = {name: tokenizer.encode(prompt) for name, prompt in prompts.items()}
for step in range(8):
    logits = runner.run(batch)
    batch = {name: [int(np.argmax(row))] for name, row in zip(batch, logits)}
    for name, ids in batch.items():
        texts[name] += ids
for name, prompt in prompts.items():
    print(f"{name}: {prompt!r} -> {tokenizer.decode(texts[name])!r}")

page = pool.buffers[0].values[0]
print(f"\nthe pool: {list(page.shape)} float32 = [pages, k and v, layers, tokens a page, key/value heads, head_dim]")
per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * 4
print(f"a token's keys and values: {per_token:,} bytes (GPT-2's, all 4 heads of 64: "
      f"{2 * 4 * 4 * 64 * 4:,}); a page of 4 tokens: {4 * per_token:,} bytes")
print(f"pages in use: {sum(len(t) for t in pool.tables.values())} of 40, for "
      f"{sum(pool.lengths.values())} tokens cached")
