"""Placeholder for the programs that need the whole model: ``main``, ``gpt2`` and ``bench``."""

import sys

ARRIVES = {
    "main": "step 13 (text generation)",
    "gpt2": "step 14 (pretrained weights)",
    "bench": "step 15 (KV cache)",
}

if __name__ == "__main__":
    task = sys.argv[1] if len(sys.argv) > 1 else "this task"
    print(f"`pixi run {task}` is not in the course yet: it arrives with {ARRIVES.get(task, 'a later step')}.")
