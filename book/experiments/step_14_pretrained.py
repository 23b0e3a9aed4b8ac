# Step 14 experiment: a checkpoint, opened. A tiny GPT-2 saved the way Hugging Face
# saves one: its files, each key's shape as stored and what loading makes of it, the
# logits once loaded, what a forgotten transpose costs, and the four GPT-2 sizes.
import json
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers
from max.experimental import functional as F
from safetensors import safe_open

from course import runtime
from course.checkpoints import expected_shapes
from course.weights import random_weights, shapes_of
from step_01_config import GPT2Config
from step_11_lm_head import GPT2LMHeadModel
from step_12_tokenizer import END_OF_TEXT, bytes_to_unicode
from step_14_pretrained import from_pretrained, is_weight, load_pretrained, max_name, to_max_layout

hf_config = transformers.GPT2Config(vocab_size=257, n_positions=16, n_embd=8, n_layer=1, n_head=2,
                                    bos_token_id=256, eos_token_id=256)
transformers.utils.logging.disable_progress_bar()
hf = transformers.GPT2LMHeadModel(hf_config).eval()
# The course's seeded weights (the model's own init draws differently across versions),
# with matrices larger than GPT-2's initial 0.02, so that a mistake shows.
weights = random_weights(shapes_of(hf.named_parameters()), seed=14, std=0.3)
with torch.no_grad():
    for name, weight in hf.named_parameters():
        weight.copy_(torch.from_numpy(weights[name]))

folder = Path(tempfile.mkdtemp())
hf.save_pretrained(folder)
# A tokenizer with the 256 byte tokens and <|endoftext|>, and no merges (step 12).
vocab = {char: i for i, char in enumerate(bytes_to_unicode().values())} | {END_OF_TEXT: 256}
(folder / "vocab.json").write_text(json.dumps(vocab))
(folder / "merges.txt").write_text("#version: 0.2\n")
print("files:", ", ".join(sorted(path.name for path in folder.iterdir())))

print(f"\n{'key in model.safetensors':34} {'stored':>9}   {'loaded as':>9}")
with safe_open(folder / "model.safetensors", "numpy") as f:
    stored = {key: f.get_slice(key).get_shape() for key in f.keys()}
for key, shape in stored.items():
    if not is_weight(key):
        print(f"{key:34} {str(shape):>9}   left out")
        continue
    numbered = np.arange(np.prod(shape)).reshape(shape)  # every entry different: a transpose shows
    loaded = to_max_layout(max_name(key), numbered)
    note = "" if np.array_equal(loaded, numbered) else "  transposed (Conv1D)"
    print(f"{key:34} {str(shape):>9}   {str(list(loaded.shape)):>9}{note}")
print("lm_head.weight in the file:", "lm_head.weight" in stored, "(tied: it is transformer.wte.weight)")

model, tokenizer = from_pretrained(str(folder))
ids = np.array([tokenizer.encode("Hello!")])
logits = runtime.to_numpy(model(runtime.from_numpy(ids)))
with torch.no_grad():
    expected = hf(torch.from_numpy(ids)).logits.numpy()
print(f"\nids {ids.tolist()}: logits {list(logits.shape)}, max |Δ| vs Hugging Face < 1e-5:",
      bool(np.abs(logits - expected).max() < 1e-5))

# The square attn.c_proj ([8, 8]) loads just as well without its transpose.
state = load_pretrained(str(folder)).state
name = "transformer.h.0.attn.c_proj.weight"
state[name] = np.ascontiguousarray(state[name].T)
with F.lazy():
    wrong = GPT2LMHeadModel(GPT2Config(vocab_size=257, n_positions=16, n_embd=8, n_layer=1, n_head=2))
wrong.load_state_dict({key: runtime.from_numpy(value) for key, value in state.items()})
off = runtime.to_numpy(wrong(runtime.from_numpy(ids)))
print(f"{name} left [in, out]: loads, and the logits are off by up to {np.abs(off - expected).max():.2f}")

print(f"\n{'model':12} {'n_layer':>7} {'n_embd':>6} {'n_head':>6} {'parameters':>14} {'float32':>9}")
for hub_id, (n_layer, n_embd, n_head) in {"gpt2": (12, 768, 12), "gpt2-medium": (24, 1024, 16),
                                          "gpt2-large": (36, 1280, 20), "gpt2-xl": (48, 1600, 25)}.items():
    shapes = expected_shapes(GPT2LMHeadModel, GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=n_head))
    count = sum(int(np.prod(shape)) for shape in shapes.values())
    print(f"{hub_id:12} {n_layer:>7} {n_embd:>6} {n_head:>6} {count:>14,} {count * 4 / 1e9:>7.2f} GB")
