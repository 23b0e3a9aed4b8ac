# Step 13 experiment: the course's own small GPT-2 writing with this step's loop.
# The model (course/gpt2-book) is GPT-2's architecture at a small size, trained
# on the King James Bible and this book's prose by `pixi run train`; step 14 is
# what reads its checkpoint.
from max.experimental import functional as F

from course.runtime import from_numpy
from step_11_lm_head import GPT2LMHeadModel
from step_12_tokenizer import Tokenizer
from step_13_generation import compile_next_logits, generate
from step_14_pretrained import load_pretrained

pretrained = load_pretrained("course")
with F.lazy():
    model = GPT2LMHeadModel(pretrained.config)
model.load_state_dict({name: from_numpy(value) for name, value in pretrained.state.items()})
next_logits = compile_next_logits(model)
tokenizer = Tokenizer.from_dir(pretrained.folder)

prompt = tokenizer.encode("The attention")
runs = {"greedy": dict(temperature=0.0)}
# main's default sampling (T 0.8, top-k 40) with five seeds, then a hot one.
runs.update({f"T=0.8, top-k 40, seed {seed}": dict(temperature=0.8, top_k=40, seed=seed) for seed in range(1, 6)})
runs["T=1.5, seed 1"] = dict(temperature=1.5, seed=1)
for name, sampling in runs.items():
    new = generate(next_logits, prompt, 40, n_positions=pretrained.config.n_positions,
                   eos_id=tokenizer.eot_id, **sampling)
    text = "The attention" + tokenizer.decode(list(new))
    print(f"{name}:")
    print("\n".join(f"  | {line}" for line in text.splitlines()))
