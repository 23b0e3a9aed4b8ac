# Step 23 experiment: a Llama that Hugging Face's save_pretrained writes (transformers 5's config.json,
# an untied head, Llama 3's rope_theta), loaded by from_pretrained and compared with Hugging Face's logits.
import json
import shutil
import tempfile

import numpy as np
import torch
import transformers

from course import runtime
from course.outline import GPT2_TOKENIZER
from course.weights import random_weights, shapes_of
from step_23_llama_pretrained import config_from_json, from_pretrained, is_weight, max_name

sizes = dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**sizes, vocab_size=50257, rope_theta=500000.0,
                                                            tie_word_embeddings=False)).eval()
params = dict(hf.named_parameters())  # seeded with NumPy, the same in every transformers version
with torch.no_grad():
    for name, value in random_weights(shapes_of(params.items()), seed=23).items():
        params[name].copy_(torch.from_numpy(value))
folder = tempfile.mkdtemp()
hf.save_pretrained(folder)
for name in ("vocab.json", "merges.txt"):  # GPT-2's tokenizer, shipped with the course
    shutil.copy(GPT2_TOKENIZER / name, folder)

written = json.loads(open(f"{folder}/config.json").read())
print("config.json says rope_parameters =", written["rope_parameters"])
print("config_from_json reads rope_theta =", config_from_json(written).rope_theta)
config = config_from_json(written)
for key in ("layers.0.self_attn.rotary_emb.inv_freq", "norm.weight", "lm_head.weight"):
    print(f"{key:40} -> {max_name(key) if is_weight(key, config) else '(not a weight)'}")

llama, tokenizer = from_pretrained(folder)
ids = tokenizer.encode("The attention")
ours = runtime.to_numpy(llama(runtime.from_numpy(np.array([ids]))))[0]
with torch.no_grad():
    theirs = hf(torch.tensor([ids])).logits[0].numpy()
print(f"{len(ids)} tokens, {ours.shape[1]:,} logits each: within 1e-4 of Hugging Face's: "
      f"{bool(np.allclose(ours, theirs, atol=1e-4, rtol=1e-4))}; next token {ours[-1].argmax()} "
      f"(Hugging Face's {theirs[-1].argmax()})")
shutil.rmtree(folder)
