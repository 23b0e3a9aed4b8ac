"""A byte-level BPE trained on the fly, for the checks that need a small real tokenizer.

Kept apart from ``reference.py`` on purpose: it needs ``tokenizers`` only, so step
12's checks (and every planted bug in them) start without importing PyTorch and
transformers, about 3 s a run.
"""

from __future__ import annotations


def train_byte_bpe(folder, text: str, vocab_size: int):
    """A byte-level BPE trained on ``text`` the way GPT-2's was (its regex, no prefix space,
    ``<|endoftext|>`` special), saved as ``folder``/vocab.json and merges.txt; returns the trainer."""
    from tokenizers import ByteLevelBPETokenizer

    trainer = ByteLevelBPETokenizer(add_prefix_space=False)  # ByteLevel(use_regex=True): GPT-2's regex
    trainer.train_from_iterator([text], vocab_size=vocab_size, min_frequency=2, special_tokens=["<|endoftext|>"],
                                show_progress=False)
    trainer.save_model(str(folder))
    return trainer
