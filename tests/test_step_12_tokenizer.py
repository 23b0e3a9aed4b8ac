"""Step 12 · the byte-level BPE Tokenizer against Hugging Face's tokenizer on the same files.

Two vocabularies, each compared token for token with Hugging Face's ``tokenizers``
(the library inside ``GPT2TokenizerFast``) built from the same ``vocab.json`` and
``merges.txt`` the way GPT-2's ``tokenizer.json`` builds it (a BPE model, the
ByteLevel pre-tokenizer with GPT-2's regex and no prefix space, ``<|endoftext|>``
as a special token):

* ``gpt2``: GPT-2's real files (50,257 tokens, 50,000 merges), found offline through
  ``GPT2_TOKENIZER_DIR``, then ``../shared/gpt2-tokenizer`` beside the course, then
  the Hugging Face cache. Without them these checks skip, saying how to get them.
* ``trained``: a 600-token byte-level BPE trained here with ``tokenizers`` and
  saved to a temporary folder, so the checks always run, with or without the network.

Nothing here is numeric: ids agree exactly or not at all.
"""

from __future__ import annotations

import functools
import itertools
import os
import random
import time
from pathlib import Path

import pytest

from course.check.hints import todo_label, todos_in
from course.outline import ROOT
from harness import attribute, call, fail, todo_in
from reference import train_byte_bpe

pytestmark = pytest.mark.step12

END_OF_TEXT = "<|endoftext|>"
ENV = "GPT2_TOKENIZER_DIR"

#: What every encode check runs on: one text per kind of trouble.
CORPUS = {
    "ascii": "Hello world! The quick brown fox jumps over the lazy dog.",
    "accents": "Café, naïve résumé; Ærøskøbing, São Paulo, Größe, ça va? Ñandú.",
    "cjk": "東京は日本の首都です。中文分词很难。한국어 텍스트도 있어요.",
    "emoji": "I ❤️ 🦀 and 👩‍👩‍👧 (a family), 🚀🚀🚀!",
    "whitespace": "a  b   c\n\n\nd \t e     \n  f\r\n\n    indented   trailing   ",
    "contractions": "I'm sure they'll say we've done what's right, don't you? It's O'Neil's. I'D",
    "numbers": "In 2019, 1,234,567 people paid $3.50 (3,14 €) for 42nd place; 1e-9, 0x1F, 007.",
    "code": 'def f(x):\n    return {"a": x**2, \'b\': [1, 2, 3]}  # note\n\tif x != 0: print(f"{x!r}")\n',
    "endoftext": f"First document.{END_OF_TEXT}Second one{END_OF_TEXT}{END_OF_TEXT} third {END_OF_TEXT}",
    "scripts": "ｆｕｌｌｗｉｄｔｈ Ελληνικά русский עברית العربية हिन्दी",
}

HOW_TO_GET_THEM = (
    f"GPT-2's vocab.json and merges.txt were not found offline; set {ENV} to a folder that "
    "holds them, or download them once with `hf download openai-community/gpt2 vocab.json "
    "merges.txt` (the trained-tokenizer checks still run)"
)


# --- the files -------------------------------------------------------------------------


def gpt2_files() -> tuple[Path, Path] | None:
    """GPT-2's (vocab.json, merges.txt), found without the network, or None."""
    folders = [Path(os.environ[ENV])] if os.environ.get(ENV) else []
    folders.append(ROOT.parent / "shared" / "gpt2-tokenizer")
    for folder in folders:
        if (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
            return folder / "vocab.json", folder / "merges.txt"
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    for repo in ("openai-community/gpt2", "gpt2"):
        found = [try_to_load_from_cache(repo, name) for name in ("vocab.json", "merges.txt")]
        if all(isinstance(path, str) and Path(path).is_file() for path in found):
            return Path(found[0]), Path(found[1])
    return None


def _training_text() -> str:
    sentences = list(CORPUS.values()) * 3 + [_varied_text(60_000, seed=1)]
    return "\n".join(sentences)


@pytest.fixture(scope="module")
def trained_files(tmp_path_factory) -> tuple[Path, Path]:
    """A small byte-level BPE trained here, saved as vocab.json and merges.txt."""
    folder = tmp_path_factory.mktemp("trained_bpe")
    train_byte_bpe(folder, _training_text(), vocab_size=600)
    return folder / "vocab.json", folder / "merges.txt"


@pytest.fixture(params=["gpt2", "trained"])
def files(request) -> tuple[Path, Path]:
    if request.param == "trained":
        return request.getfixturevalue("trained_files")
    found = gpt2_files()
    if found is None:
        pytest.skip(HOW_TO_GET_THEM)
    return found


@functools.lru_cache(maxsize=4)
def reference(vocab: Path, merges: Path):
    """Hugging Face's tokenizer on these files, built as GPT-2's tokenizer.json builds it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tokenizer = Tokenizer(models.BPE.from_file(str(vocab), str(merges)))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([END_OF_TEXT])
    return tokenizer


def expected_table() -> dict[int, str]:
    """GPT-2's byte -> stand-in table: printable Latin-1 bytes stay, the other 68 move to 256+."""
    kept = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
    moved = [b for b in range(256) if b not in kept]
    return {**{b: chr(b) for b in kept}, **{b: chr(256 + n) for n, b in enumerate(moved)}}


# --- the learner's tokenizer ------------------------------------------------------------


def _table(step) -> dict[int, str]:
    fn = attribute(step, "bytes_to_unicode")
    table = call(fn, what="bytes_to_unicode()")
    if not isinstance(table, dict):
        fail(f"bytes_to_unicode() returned a {type(table).__name__}; expected a dict {{byte: character}} — {todo_in(fn)}")
    return table


def _tokenizer(step, files):
    """The learner's Tokenizer on these files, once its pieces return something."""
    _table(step)
    cls = attribute(step, "Tokenizer")
    tok = call(cls.from_files, *files, what="Tokenizer.from_files(vocab.json, merges.txt)")
    letters = "".join(expected_table()[b] for b in " hello".encode())
    call(tok.bpe, letters, what=f"Tokenizer.bpe({letters!r})")
    call(tok.encode_piece, " hello", what="Tokenizer.encode_piece(' hello')")
    return tok


def _shown(ref, token_id: int | None) -> str:
    if token_id is None:
        return "nothing (the end)"
    token = ref.id_to_token(token_id)
    if token is None:
        return f"{token_id} (not an id of this vocabulary)"
    return f"{token_id} {ref.decode([token_id], skip_special_tokens=False)!r}"


def _encode(tok, text: str, what: str) -> list[int]:
    ids = call(tok.encode, text, what=what)
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        fail(f"{what} returned {type(ids).__name__} {str(ids)[:60]}; expected a list of int ids — {todo_in(tok.encode)}")
    return ids


def compare_ids(tok, ref, name: str, text: str) -> int:
    """Encodes ``text`` with both; fails at the first differing token. Returns the token count."""
    what = f"encode({name} text {text[:30]!r}{'…' if len(text) > 30 else ''})"
    mine, theirs = _encode(tok, text, what), ref.encode(text).ids
    if mine == theirs:
        return len(mine)
    at = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
    got = mine[at] if at < len(mine) else None
    expected = theirs[at] if at < len(theirs) else None
    eot = ref.token_to_id(END_OF_TEXT)
    cls = type(tok)
    special = ""
    if mine.count(eot) != theirs.count(eot):  # the special token was not kept whole
        todos = todos_in(cls.encode)
        special = f"; {END_OF_TEXT} (id {eot}) is there {mine.count(eot)} times, expected {theirs.count(eot)}"
    elif eot in (got, expected):
        todos = todos_in(cls.encode)
    else:
        todos = todos_in(cls.bpe) + todos_in(cls.encode_piece)
    fail(
        f"{what} differs from Hugging Face's at token {at} of {len(theirs)}: got {_shown(ref, got)}, "
        f"expected {_shown(ref, expected)}{special} — {todo_label(todos, step_file(tok))}"
    )


def step_file(tok) -> str:
    import inspect

    return inspect.getsourcefile(type(tok))


# --- the checks --------------------------------------------------------------------------


def test_bytes_to_unicode(step):
    """bytes_to_unicode maps the 256 bytes to GPT-2's 256 printable stand-ins"""
    from tokenizers import pre_tokenizers

    table, expected = _table(step), expected_table()
    todo = todo_in(attribute(step, "bytes_to_unicode"))
    if sorted(table) != list(range(256)):
        fail(f"bytes_to_unicode() has {len(table)} keys; expected one for every byte 0-255 — {todo}")
    for byte in range(256):
        if table[byte] != expected[byte]:
            fail(f"bytes_to_unicode()[{byte}] is {table[byte]!r}, GPT-2's is {expected[byte]!r} — {todo}")
    assert set(table.values()) == set(pre_tokenizers.ByteLevel.alphabet())  # the course's own table, checked


def test_encode_matches_hugging_face(step, files):
    """encode matches Hugging Face's tokenizer token for token on a mixed corpus"""
    tok, ref = _tokenizer(step, files), reference(*files)
    for name, text in CORPUS.items():
        compare_ids(tok, ref, name, text)


def test_endoftext_is_one_token(step, files):
    """<|endoftext|> is one special token, even inside a word"""
    tok, ref = _tokenizer(step, files), reference(*files)
    eot = ref.token_to_id(END_OF_TEXT)
    for text in (END_OF_TEXT, f"word{END_OF_TEXT}word", f" {END_OF_TEXT} ", f"a<|endoftext|b{END_OF_TEXT}"):
        ids = _encode(tok, text, f"encode({text!r})")
        if ids.count(eot) != text.count(END_OF_TEXT):
            fail(
                f"encode({text!r}) holds the id {eot} {ids.count(eot)} times, but {END_OF_TEXT} appears "
                f"{text.count(END_OF_TEXT)} times: split on it before the regex — {todo_in(type(tok).encode)}"
            )
        compare_ids(tok, ref, "special", text)


def test_decode_round_trips(step, files):
    """decode(encode(text)) gives the text back"""
    tok, ref = _tokenizer(step, files), reference(*files)
    todo = todo_in(type(tok).decode)
    for name, text in CORPUS.items():
        for source, ids in (("Hugging Face's ids", ref.encode(text).ids), ("your ids", _encode(tok, text, "encode"))):
            back = call(tok.decode, ids, what=f"decode({source} for the {name} text)")
            if back != text:
                at = next((i for i, (a, b) in enumerate(zip(back, text)) if a != b), min(len(back), len(text)))
                fail(
                    f"decode({source} for the {name} text) differs from the text at character {at}: "
                    f"got {back[at:at + 12]!r}, expected {text[at:at + 12]!r} — {todo}"
                )


def test_decode_replaces_invalid_utf8(step, files):
    """bytes that are not valid UTF-8 decode to U+FFFD, not an error"""
    tok, ref = _tokenizer(step, files), reference(*files)
    byte_id = {b: ref.token_to_id(c) for b, c in expected_table().items()}
    crab = "🦀".encode()
    cases = {
        "a lone 0xff byte": [0xFF],
        "half of an emoji": list(crab[:2]),
        "'ok' then 0xc3 alone": list(b"ok") + [0xC3],
        "an emoji cut in two, then whole": list(crab[:3]) + list(crab),
    }
    for name, data in cases.items():
        ids = [byte_id[b] for b in data]
        expected = bytes(data).decode("utf-8", errors="replace")
        try:
            got = tok.decode(ids)
        except UnicodeDecodeError:
            fail(
                f"decode({ids}) ({name}) raised UnicodeDecodeError; tokens can hold part of a character, "
                f"so GPT-2 decodes with errors=\"replace\" and shows {expected!r} — {todo_in(type(tok).decode)}"
            )
        except Exception:  # noqa: BLE001 - call() explains it, with the learner's line
            got = call(tok.decode, ids, what=f"decode({ids}) ({name})")
        if got != expected:
            fail(f"decode({ids}) ({name}) is {got!r}, expected {expected!r} — {todo_in(type(tok).decode)}")


def test_decode_rejects_unknown_ids(step, files):
    """an id outside the vocabulary raises a clear ValueError naming it"""
    tok, ref = _tokenizer(step, files), reference(*files)
    size = ref.get_vocab_size()
    for bad in (size, -1):
        ids = [ref.token_to_id(END_OF_TEXT), bad]
        try:
            tok.decode(ids)
        except ValueError as error:
            if str(bad) not in str(error):
                fail(f"decode({ids}) raised ValueError({str(error)!r}); the message should name the id {bad}")
            continue
        except Exception as error:  # noqa: BLE001
            fail(f"decode({ids}) raised {type(error).__name__}: {error}; expected a clear ValueError naming "
                 f"the id {bad} — keep the given check at the top of decode")
        fail(f"decode({ids}) was accepted, but {bad} is not an id of a {size}-token vocabulary "
             "— keep the given check at the top of decode")


class _CountingRanks(dict):
    """self.ranks that counts how often the merge loop looks a pair up."""

    lookups = 0

    def __contains__(self, key):
        type(self).lookups += 1
        return super().__contains__(key)

    def __getitem__(self, key):
        type(self).lookups += 1
        return super().__getitem__(key)

    def get(self, key, default=None):
        type(self).lookups += 1
        return super().get(key, default)


def test_repeated_words_skip_the_merges(step, files):
    """a word that comes again is not merged again (the word cache)"""
    tok = _tokenizer(step, files)

    def lookups(text: str) -> int:
        fresh = type(tok).from_files(*files)
        _CountingRanks.lookups = 0
        fresh.ranks = _CountingRanks(fresh.ranks)
        _encode(fresh, text, "encode")
        return _CountingRanks.lookups

    once, many = lookups(" Tokenization is"), lookups(" Tokenization is" * 500)
    if many > 2 * once:
        fail(
            f"encoding ' Tokenization is' 500 times looked up {many:,} merge ranks, {many / once:.0f}× as many as "
            f"encoding it once ({once}); remember each piece's ids and reuse them — {todo_in(type(tok).encode_ordinary)}"
        )


@functools.lru_cache(maxsize=2)
def _varied_text(size: int, seed: int) -> str:
    """``size`` characters of seeded, varied text: Zipf-distributed made-up words, accents,
    CJK, emoji, numbers, contractions, code and runs of whitespace."""
    rng = random.Random(seed)
    syllables = ["ka", "ri", "to", "men", "str", "ing", "al", "pro", "ver", "tion", "é", "ü", "ñ", "qu", "th",
                 "ex", "ab", "or", "le", "ne", "the", "an", "wor", "ld", "ze", "ö"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(5000)]
    cumulative = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(words))))
    extras = ["東京", "日本語の文", "😀", "🚀🚀", "1234", "3.14", "don't", "we'll", "x = f(y) + 2", "\n", "\n\n",
              "    ", "!", ",", "...", "$9.99", "🦀 crab", END_OF_TEXT]
    out, length = [], 0
    while length < size:
        chunk = " ".join(rng.choices(words, cum_weights=cumulative, k=rng.randint(4, 16)))
        if rng.random() < 0.5:
            chunk += " " + rng.choice(extras)
        chunk = chunk.capitalize() + rng.choice([". ", ", ", "\n", "! ", "? ", "\n\n  "])
        out.append(chunk)
        length += len(chunk)
    return "".join(out)[:size]


def test_encodes_a_megabyte_in_seconds(step, files):
    """encodes 1 MB of varied text in seconds, the same ids as Hugging Face's

    Measured on solutions/ (one core of a shared 2-core machine): 0.3 s with GPT-2's
    files, 3.3 s without the word cache. The bound, 20 s, leaves room for slow laptops.
    """
    tok, ref = _tokenizer(step, files), reference(*files)
    text = _varied_text(1_000_000, seed=12)
    started = time.perf_counter()
    ids = _encode(tok, text, "encode(1 MB of varied text)")
    seconds = time.perf_counter() - started
    if seconds > 20:
        fail(
            f"encoding 1 MB of text took {seconds:.0f} s; expected a few seconds — remember each piece's "
            f"ids ({todo_in(type(tok).encode_ordinary)}) and keep the merge loop simple"
        )
    if ids != ref.encode(text).ids:
        compare_ids(tok, ref, "1 MB", text)
