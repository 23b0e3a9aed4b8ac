# Step 12 experiment: byte-level BPE on a hand-made merge list, one merge at a time,
# then the special token, the word cache, and a character cut in half.
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
