# Your file for step 12: fill in its TODOs, then run `pixi run s12`.
# (Rendered from solutions/step_12_tokenizer.py by `python -m course.authoring.render`.)
"""Step 12 · Tokenization: GPT-2's byte-level BPE.

The model reads token ids (step 05); people write text. GPT-2's tokenizer
turns one into the other with byte-pair encoding (BPE) over bytes:

    text      "Hello world<|endoftext|>"
    pieces    "Hello", " world"           pre-tokenized by a given regex
    bytes     48 65 6c 6c 6f | 20 77 ...  UTF-8: any text, no unknown tokens
    symbols   "Hello", "Ġworld"           each byte as a printable stand-in
    merges    H e l l o -> Hel lo -> Hello     lowest-ranked pair first
    ids       [15496, 995, 50256]         vocab.json; the special token whole

Decoding runs the other way: ids -> stand-ins -> bytes -> UTF-8 text, with any
invalid UTF-8 shown as U+FFFD instead of raising.

The two files are GPT-2's: ``vocab.json`` maps each token to its id, and
``merges.txt`` lists the 50,000 merges, best (lowest rank) first. No MAX in
this step: it is plain Python.

Check this step with ``pixi run s12``.
"""

from __future__ import annotations

import heapq
import numbers
from pathlib import Path

import regex

#: GPT-2's pre-tokenization pattern (given): contractions, a letter run, a digit
#: run or a punctuation run (each with at most one leading space), then
#: whitespace. BPE never merges across the pieces it cuts.
PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")

#: GPT-2's one special token: it separates documents and is never split.
END_OF_TEXT = "<|endoftext|>"

#: How many pieces the word cache holds at most (Hugging Face's tokenizers also
#: keeps 10,000). Text has no end, and memory has one.
CACHE_SIZE = 10_000


def bytes_to_unicode() -> dict[int, str]:
    """Maps each of the 256 byte values to a printable character, as GPT-2 does."""
    # TODO 1: Build the table {byte: character} for all 256 bytes. Bytes whose
    #   Latin-1 character is printable map to that character: "!" to "~" (33-126),
    #   "¡" to "¬" (161-172) and "®" to "ÿ" (174-255). The other 68 bytes (0-32,
    #   127-160 and 173) map, in increasing order, to chr(256), chr(257), ...
    # Hint: so byte 32 (a space) becomes chr(256 + 32) = "Ġ", the "Ġ" that starts
    #   so many entries of vocab.json.
    return None




class Tokenizer:
    """GPT-2's byte-level BPE tokenizer: ``encode(text) -> ids``, ``decode(ids) -> text``."""

    def __init__(self, vocab: dict[str, int], merges: list[tuple[str, str]]):
        self.encoder = vocab  # token (in stand-in characters) -> id
        self.decoder = {i: token for token, i in vocab.items()}  # id -> token
        self.ranks = {pair: rank for rank, pair in enumerate(merges)}  # (left, right) -> rank
        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {char: byte for byte, char in self.byte_encoder.items()}
        self.eot_id = vocab[END_OF_TEXT]
        self.cache: dict[str, list[int]] = {}  # piece of text -> its ids

    @classmethod
    def from_files(cls, vocab_json: str | Path, merges_txt: str | Path) -> Tokenizer:
        """Reads GPT-2's ``vocab.json`` and ``merges.txt`` (given: ``course/checkpoints.py`` parses them)."""
        from course.checkpoints import read_files

        return cls(*read_files(Path(vocab_json), Path(merges_txt)))

    @classmethod
    def from_dir(cls, folder: str | Path) -> Tokenizer:
        """Reads a checkpoint folder's ``vocab.json`` and ``merges.txt``, or the ``tokenizer.json`` that
        transformers 5 saves instead (given: ``course/checkpoints.py`` reads both)."""
        from course.checkpoints import read_tokenizer

        return cls(*read_tokenizer(Path(folder)))

    def bpe(self, word: str) -> list[str]:
        """Splits a word (in stand-in characters) into the tokens its merges make."""
        # Given: the symbols as a linked list, so that a merge touches only its
        # neighbours. A symbol merged into the one on its left becomes ""; after[i]
        # is the index of the next live symbol (n past the end), before[i] that of
        # the previous one (-1 before the start).
        symbols = list(word)
        n = len(symbols)
        after, before = list(range(1, n + 1)), list(range(-1, n - 1))

        def rank_at(i: int) -> int | None:
            """The rank of the pair that starts at symbol i, or None if it is no merge."""
            j = after[i]
            return self.ranks.get((symbols[i], symbols[j])) if j < n else None

        # TODO 2: Merge the pair with the lowest rank, again and again, until no
        #   pair is a merge; then return the live symbols, in order. Keep the
        #   candidates in a heap (heapq) of (rank, i): one for each i whose
        #   rank_at(i) is not None. Pop the smallest. If rank_at(i) no longer gives
        #   that rank, a merge since it was pushed has changed the pair: skip it.
        #   Otherwise merge: symbols[i] takes on the next symbol, that one becomes
        #   "", and the links go around it. Then push the pairs that now start at
        #   before[i] (if there is one) and at i, those that are merges.
        # Hint: tuples compare rank first, then position, so equal ranks merge left
        #   to right ("aaa" with the merge a+a gives "aa a"). Each pop costs
        #   log(length), and each merge touches two neighbours. Rescanning every pair
        #   for each merge (the textbook loop) costs length × merges: a minute on
        #   100,000 letters without a space. Walking merges.txt in file order, each
        #   merge once, gives the same tokens but costs all 50,000 merges per word.
        return None


    def encode_piece(self, piece: str) -> list[int]:
        """The ids of one pre-tokenized piece of text (" world" -> [995])."""
        # TODO 3: Turn the piece into its UTF-8 bytes, each byte into its stand-in
        #   character (self.byte_encoder), merge them with self.bpe, and look each
        #   token up in self.encoder.
        # Hint: " world".encode("utf-8") gives the bytes; "".join(...) makes the word.
        return None


    def encode_ordinary(self, text: str) -> list[int]:
        """Encodes text that holds no special token."""
        ids = []
        for piece in PATTERN.findall(text):
            # TODO 4: Remember each piece's ids in self.cache, and reuse them when
            #   the piece comes again (GPT-2's encoder does the same). Real text
            #   repeats its words, so most pieces skip the merge loop entirely. Keep
            #   at most CACHE_SIZE pieces: when it is full, empty it and start again.
            # Hint: look the piece up first; only on a miss call encode_piece and
            #   store what it returns. self.cache.clear() empties a dict.
            ids.extend(self.encode_piece(piece))
        return ids

    def encode(self, text: str) -> list[int]:
        """Text -> token ids, with every ``<|endoftext|>`` as the one id self.eot_id."""
        # TODO 5: Split the text on END_OF_TEXT first, encode each part with
        #   encode_ordinary, and put self.eot_id between the parts.
        # Hint: "a<|endoftext|>b".split(END_OF_TEXT) is ["a", "b"]. Splitting first
        #   keeps the regex from cutting the special token into "<|", "endoftext", "|>".
        return None


    def decode(self, ids: list[int]) -> str:
        """Token ids -> text; bytes that are not valid UTF-8 become U+FFFD."""
        for i in ids:  # given: a clear error for anything that is not an id of the vocabulary
            if isinstance(i, bool) or not isinstance(i, numbers.Integral):  # True is an int, 3.0 is no id
                raise TypeError(f"token ids are whole numbers, got {i!r} ({type(i).__name__})")
            if i not in self.decoder:
                raise ValueError(f"token id {i!r} is not in the vocabulary (ids run from 0 to {len(self.decoder) - 1})")
        # TODO 6: Join the ids' tokens, turn each stand-in character back into its
        #   byte (self.byte_decoder), and decode the bytes as UTF-8 with invalid
        #   sequences replaced by U+FFFD.
        # Hint: one token can hold half of a character (an emoji is 4 bytes and may
        #   span tokens), so decode all the bytes at once, with errors="replace".
        return None
