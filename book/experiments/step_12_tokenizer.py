# Step 12 experiment: byte-level BPE on a hand-made merge list, one merge at a time,
# then the special token, the word cache, a character cut in half, and the work the
# merge loop does on one long word, against the textbook loop that rescans it.
import random

from step_12_tokenizer import END_OF_TEXT, Tokenizer, bytes_to_unicode

table = bytes_to_unicode()
for text in (" ", "\n", "é", "🦀"):
    data = text.encode("utf-8")
    print(f"{text!r:6} bytes {data.hex(' '):12} -> stand-ins {''.join(table[b] for b in data)!r}")

# Seven merges, best first. A real merges.txt has 50,000 lines of exactly this.
merges = [("l", "o"), ("e", "r"), ("Ġ", "lo"), ("lo", "w"), ("Ġlo", "w"), ("Ġlow", "er"), ("low", "er")]
vocab = {char: i for i, char in enumerate(table.values())}  # ids 0-255: the single bytes
for left, right in merges:
    vocab[left + right] = len(vocab)
vocab[END_OF_TEXT] = len(vocab)

print("\nmerging ' lower' (stand-ins 'Ġlower'), with the first k merges known:")
for k in range(len(merges) + 1):
    symbols = Tokenizer(vocab, merges[:k]).bpe("Ġlower")
    rule = "+".join(merges[k - 1]) if k else "(none)"
    print(f"  k={k}  {rule:9} {' '.join(symbols)}")

tok = Tokenizer(vocab, merges)
print("\n'lower' without a space:", tok.bpe("lower"), "(merge 4, lo+w, comes before merge 7, low+er)")

text = f"lower lower{END_OF_TEXT} lower"
ids = tok.encode(text)
print(f"\nencode({text!r}) = {ids}")
print("  as tokens:", [tok.decoder[i] for i in ids])
print("  decode gives the text back:", tok.decode(ids) == text)

calls = 0
merge = tok.bpe


def counted(word):
    global calls
    calls += 1
    return merge(word)


tok.bpe, tok.cache = counted, {}
tok.encode(" lower" * 10_000)
print(f"\n' lower' × 10,000: {len(tok.cache)} distinct piece(s) in the cache, merge loop ran {calls} time(s)")

crab = "🦀".encode("utf-8")
cut = [vocab[table[b]] for b in crab[:2]]
whole = [vocab[table[b]] for b in crab]
print(f"\nhalf of 🦀: ids {cut} decode to {tok.decode(cut)!r}; all four bytes: {tok.decode(whole)!r}")


class Counting(dict):
    """Merge ranks that count how often they are looked up."""

    lookups = 0

    def get(self, key, default=None):
        Counting.lookups += 1
        return super().get(key, default)

    def __contains__(self, key):
        Counting.lookups += 1
        return super().__contains__(key)

    def __getitem__(self, key):
        Counting.lookups += 1
        return super().__getitem__(key)


def textbook_bpe(ranks, word):
    """The loop most BPE write-ups show: rescan every pair, merge the best one everywhere, repeat."""
    symbols = list(word)
    while len(symbols) > 1:
        pairs = [pair for pair in zip(symbols, symbols[1:]) if pair in ranks]
        if not pairs:
            break
        best = min(pairs, key=ranks.__getitem__)
        merged, i = [], 0
        while i < len(symbols):
            if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                merged.append(symbols[i] + symbols[i + 1])
                i += 2
            else:
                merged.append(symbols[i])
                i += 1
        symbols = merged
    return symbols


# 128 made-up symbols and a merge for every pair of them: in a random word almost every
# pair is a different merge, as in a long run of letters or digits with GPT-2's merges.
letters = [chr(0x100 + k) for k in range(128)]
pairs = [(a, b) for a in letters for b in letters]
pair_vocab = {**{c: i for i, c in enumerate(letters)}, **{a + b: 128 + i for i, (a, b) in enumerate(pairs)}}
pair_vocab[END_OF_TEXT] = len(pair_vocab)
long_words = Tokenizer(pair_vocab, pairs)
long_words.ranks = Counting(long_words.ranks)
rng = random.Random(0)
print("\none word of n random symbols: merge ranks looked up")
print(f"{'n':>7} {'heap (bpe)':>12} {'textbook loop':>15}")
for n in (250, 500, 1000):
    word = "".join(rng.choice(letters) for _ in range(n))
    Counting.lookups = 0
    heap = long_words.bpe(word)
    by_heap = Counting.lookups
    Counting.lookups = 0
    assert textbook_bpe(long_words.ranks, word) == heap  # the same tokens
    print(f"{n:>7,} {by_heap:>12,} {Counting.lookups:>15,}")
