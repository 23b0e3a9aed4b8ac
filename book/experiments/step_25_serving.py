# Step 25 experiment: the course's own GPT-2 served as MAX's server runs it, in this process: a pool of
# pages of 4 tokens, three prompts prefilled in one ragged batch, then decoded together, greedily; a fourth
# request joins halfway and the first, once done, gives its pages back. Each pass prints who is in the batch,
# how many tokens it holds, and the page table: whose pages are where.
import numpy as np
from max.experimental import functional as F

from course.paged import PagePool, RaggedRunner
from course.runtime import from_numpy
from step_12_tokenizer import Tokenizer
from step_14_pretrained import load_pretrained
from step_25_serving import ServedGPT2

pretrained = load_pretrained("course")
config = pretrained.config
with F.lazy():
    model = ServedGPT2(config)
model.load_state_dict({name: from_numpy(value) for name, value in pretrained.state.items()})
pool = PagePool.for_model(config.n_head, config.head_dim, config.n_layer, pages=40, page_size=4)
runner = RaggedRunner(model, pool, pretrained.state)  # one compiled graph: any batch, prefill and decode
tokenizer = Tokenizer.from_dir(pretrained.folder)

prompts = {"a": "In the beginning", "b": "The cache", "c": "And God said, Let there be"}
texts = {name: [] for name in prompts}
batch = {name: tokenizer.encode(prompt) for name, prompt in prompts.items()}
for step in range(8):
    logits = runner.run(batch)
    print(f"pass {step}: {sum(len(ids) for ids in batch.values()):2d} tokens for {', '.join(batch)}; "
          f"pages {pool.tables}")
    batch = {name: [int(np.argmax(row))] for name, row in zip(batch, logits)}
    for name, ids in batch.items():
        texts[name] += ids
    if step == 3:  # a new request joins: its prompt is prefilled beside the others' decoding tokens
        prompts["d"] = "The LORD"
        batch["d"], texts["d"] = tokenizer.encode(prompts["d"]), []
    if step == 5:  # "a" is done: its pages go back to the pool, for the next request to take
        pool.release("a")
        del batch["a"]
print()
for name, prompt in prompts.items():
    print(f"{name}: {prompt!r} -> {tokenizer.decode(texts[name])!r}")
print(f"free pages: {len(pool.free)} of 40")
