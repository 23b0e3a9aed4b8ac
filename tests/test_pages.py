"""Facts the pages state more than once, checked against their one source.

The README and the book (``book/src/*.md``) repeat a few facts that live elsewhere: how many steps
the course has and how they split into parts (``course/outline.py``: ``OUTLINE`` and ``PARTS``),
which Mojo kernels exist (``course/kernels/*.mojo``), which Python, transformers and PyTorch the
course runs on (``pyproject.toml``), and the speed table the README shows (one entry of the log,
``book/src/log.md``). Each checker below reads a page's text and returns one message per drift,
naming the page, the line, what the page says and what the source says. The rules:

- a count of steps or chapters ("sixteen steps", "24 chapters") is the whole course's, or a part's
  in a sentence that names that part ("Part I's sixteen steps");
- a range of step tasks (`` `pixi run s01` … `s24` ``) is the whole course's, or a part's in a
  sentence that names that part;
- no sentence that names a part or a step calls it unfinished ("being written", "coming soon")
  once every step of it has a solution;
- a ``.mojo`` name is a file of ``course/kernels/``, and a paragraph that names more than half of
  the kernels is a list of them and names them all;
- a Python, transformers or PyTorch range is the one ``pyproject.toml`` asks for;
- a command (a shell block, or inline code that starts with a command) holds no ``<...>``
  placeholder;
- the README's speed table is, cell for cell, the table of one log entry, and its caption's date,
  the README's only date, is that entry's.

Each rule is also run on the drifted sentences the pages once held, to show that it fails.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from course.outline import OUTLINE, PARTS, ROOT, available

pytestmark = pytest.mark.course

PAGES = [ROOT / "README.md", *sorted((ROOT / "book" / "src").glob("*.md"))]
LOG = ROOT / "book" / "src" / "log.md"
KERNELS = sorted(path.stem for path in (ROOT / "course" / "kernels").glob("*.mojo") if path.stem != "__init__")
#: The course's Mojo programs that are no kernel (course/authoring/: barriers.mojo times the block op's barrier).
PROGRAMS = sorted(path.stem for path in (ROOT / "course" / "authoring").glob("*.mojo"))
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


@dataclass(frozen=True)
class Part:
    label: str  # "Part I"
    subject: str  # "GPT-2"
    first: int
    last: int

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def __str__(self) -> str:
        return f"{self.label} s{self.first:02d}…s{self.last:02d}, {self.size} steps"

    def named_in(self, sentence: str) -> bool:
        label = re.escape(self.label)
        return bool(re.search(rf"\b{label}(?![IVX])", sentence)
                    or re.search(re.escape(self.subject), sentence, re.IGNORECASE))


def course_parts() -> list[Part]:
    """PARTS as (label, subject, first step, last step), each running to the step before the next."""
    starts = sorted(PARTS)
    ends = [start - 1 for start in starts[1:]] + [max(OUTLINE)]
    return [Part(*PARTS[start].split(" · ", 1), start, end) for start, end in zip(starts, ends)]


PARTS_LIST = course_parts()
OUTLINE_SAYS = (f"course/outline.py has {len(OUTLINE)} steps, s{min(OUTLINE):02d}…s{max(OUTLINE):02d} "
                f"({'; '.join(map(str, PARTS_LIST))})")


# ----------------------------------------------------------------------------------------------
# Reading a page: lines, sentences, code.


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def sentence_at(text: str, offset: int) -> str:
    """The sentence around ``offset``: it ends at a full stop (or ? !) followed by a space, at a
    blank line, or where a table row or list item starts."""
    breaks = re.compile(r"[.!?](?=\s)|\n\s*\n|\n(?=\s*(?:\||[-*] |\d+\. ))")
    start = 0
    for match in breaks.finditer(text, 0, offset):
        start = match.end()
    following = breaks.search(text, offset)
    return text[start:following.start() if following else len(text)]


def paragraphs(text: str) -> list[tuple[int, str]]:
    """(first line, paragraph) for each block between blank lines (a code block counts as one)."""
    found, offset = [], 0
    for block in re.split(r"(\n\s*\n)", text):
        if block.strip() and not re.fullmatch(r"\n\s*\n", block):
            found.append((line_of(text, offset), block))
        offset += len(block)
    return found


def commands(text: str) -> list[tuple[int, str]]:
    """(line, command) for each line of a shell block, each `$ ` line of any block, and each inline
    code span that starts with a command."""
    found, fence = [], None
    for number, line in enumerate(text.splitlines(), 1):
        opening = re.match(r"\s*```(\w*)", line)
        if opening:
            fence = None if fence is not None else opening.group(1)
            continue
        if fence is not None:
            if fence in ("sh", "bash", "shell", "console") or line.lstrip().startswith("$ "):
                found.append((number, line))
            continue
        for span in re.findall(r"`([^`]+)`", line):
            if re.match(r"(?:[A-Z_]+=\S*\s+)*(?:pixi|python|pip|git|cd|mdbook|bash|hf)\b", span):
                found.append((number, span))
    return found


# ----------------------------------------------------------------------------------------------
# The checkers: each returns one message per drift.

NUMBER_WORDS = {word: value for value, word in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen".split())}
NUMBER_WORDS.update({word: 10 * (i + 2) for i, word in enumerate(
    "twenty thirty forty fifty sixty seventy eighty ninety".split())})
TENS = "twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety"
ONES = "one|two|three|four|five|six|seven|eight|nine"
COUNT = re.compile(
    rf"(?<![\w,.])(?P<number>(?:{TENS})(?:[- ](?:{ONES}))?|{'|'.join(NUMBER_WORDS)}|\d{{1,2}})"
    r"\s+(?P<what>steps|chapters)\b(?!\s+of\b)", re.IGNORECASE)


def number_value(word: str) -> int:
    word = word.lower()
    if word.isdigit():
        return int(word)
    tens, _, ones = word.replace(" ", "-").partition("-")
    return NUMBER_WORDS[tens] + (NUMBER_WORDS[ones] if ones else 0)


def check_step_counts(page: str, text: str) -> list[str]:
    """A count of steps or chapters is the course's, or a part's in a sentence naming that part."""
    problems = []
    for match in COUNT.finditer(text):
        if re.search(r"\bevery\s+$", text[max(0, match.start() - 7):match.start()], re.IGNORECASE):
            continue  # "every 50 steps": training steps, not the course's
        count = number_value(match["number"])
        sentence = sentence_at(text, match.start())
        if count == len(OUTLINE) or any(count == part.size and part.named_in(sentence) for part in PARTS_LIST):
            continue
        problems.append(f"{page}:{line_of(text, match.start())}: \"{' '.join(match[0].split())}\" counts {count}; "
                        f"{OUTLINE_SAYS}, and a part's count needs the part named in its sentence")
    return problems


TASK = r"`?(?:pixi run )?s(\d\d)`?"
RANGE = re.compile(TASK + r"\s*(?:…|\.\.\.|–|—|-|\bto\b|\bthrough\b)\s*" + TASK)


def check_task_ranges(page: str, text: str) -> list[str]:
    """A range of step tasks, written as commands, is the whole course's or a named part's."""
    problems = []
    for match in RANGE.finditer(text):
        if "`" not in match[0] and "pixi run" not in match[0]:
            continue  # "s17–s20 6.7–7.5 s": a measurement's steps, not a command
        first, last = int(match[1]), int(match[2])
        sentence = sentence_at(text, match.start())
        if (first, last) == (min(OUTLINE), max(OUTLINE)):
            continue
        if any((first, last) == (part.first, part.last) and part.named_in(sentence) for part in PARTS_LIST):
            continue
        problems.append(f"{page}:{line_of(text, match.start())}: {match[0]} runs s{first:02d}…s{last:02d}; "
                        f"{OUTLINE_SAYS}, and a part's range needs the part named in its sentence")
    return problems


UNFINISHED = re.compile(r"being written|coming soon|not (?:yet )?written|to be written|still to come|"
                        r"under construction|work in progress|not (?:yet )?(?:ready|landed|available)",
                        re.IGNORECASE)


def check_unfinished(page: str, text: str, done: list[int] | None = None) -> list[str]:
    """No sentence that names a part or a step calls it unfinished once its steps have solutions."""
    done = available() if done is None else done
    problems = []
    for match in UNFINISHED.finditer(text):
        sentence = sentence_at(text, match.start())
        steps = {int(n) for n in re.findall(r"\bsteps?\s+(\d{1,2})\b", sentence, re.IGNORECASE)}
        finished = [str(part) for part in PARTS_LIST
                    if part.named_in(sentence) and all(n in done for n in range(part.first, part.last + 1))]
        finished += [f"step {n:02d}" for n in sorted(steps) if n in done]
        if finished:
            problems.append(f"{page}:{line_of(text, match.start())}: \"{match[0]}\" in \"{' '.join(sentence.split())}\"; "
                            f"every step of {', '.join(finished)} has a solution in solutions/")
    return problems


def check_kernels(page: str, text: str, kernels: list[str] = KERNELS) -> list[str]:
    """Every .mojo name is a kernel of course/kernels/ (or one of the authoring tools' Mojo programs, which are
    not counted); a paragraph naming more than half of the kernels lists them all."""
    problems = []
    for first_line, paragraph in paragraphs(text):
        names = {name for name in re.findall(r"\b(\w+)\.mojo\b", paragraph) if name not in ("__init__", *PROGRAMS)}
        unknown = sorted(names - set(kernels))
        missing = sorted(set(kernels) - names)
        if unknown:
            problems.append(f"{page}:{first_line}: names {', '.join(n + '.mojo' for n in unknown)}, "
                            f"which course/kernels/ does not hold (it holds {', '.join(k + '.mojo' for k in kernels)})")
        if len(names) > len(kernels) / 2 and missing:
            problems.append(f"{page}:{first_line}: lists {len(names)} of the kernels without "
                            f"{', '.join(n + '.mojo' for n in missing)}; course/kernels/ holds "
                            f"{', '.join(k + '.mojo' for k in kernels)}")
    return problems


def _spec(name: str) -> SpecifierSet:
    if name == "python":
        return SpecifierSet(PYPROJECT["project"]["requires-python"])
    for line in PYPROJECT["project"]["dependencies"]:
        requirement = Requirement(line)
        if requirement.name == name:
            return requirement.specifier
    raise KeyError(name)


def _lowest(spec: SpecifierSet, major: int) -> Version | None:
    return next((Version(f"{major}.{minor}") for minor in range(100) if Version(f"{major}.{minor}") in spec), None)


def _highest(spec: SpecifierSet, major: int) -> Version | None:
    return next((Version(f"{major}.{minor}") for minor in reversed(range(100)) if Version(f"{major}.{minor}") in spec),
                None)


VERSION_RANGES = [
    # (package in pyproject.toml, pattern with groups low and high; high None: "or newer", "x": "the newest N.x")
    ("python", re.compile(r"Python\s+(?P<low>3\.\d+)\s*(?:–|-|to|through)\s*(?P<high>3\.\d+)")),
    ("python", re.compile(r"Python\s+(?P<low>3\.\d+)(?:,\s*3\.\d+)*,?\s+(?:or|and)\s+(?P<high>3\.\d+)")),
    ("python", re.compile(r"Python\s+(?P<low>3\.\d+)(?:\+|\s+or\s+(?:newer|later))")),
    ("transformers", re.compile(r"transformers\s+(?:from\s+)?(?P<low>\d+\.\d+)(?:\.x)?\s*(?:–|-|to|through)\s*"
                                r"(?:the\s+newest\s+)?(?P<high>\d+\.(?:\d+|x))")),
    ("transformers", re.compile(r"transformers\s+(?P<low>\d+\.\d+)(?:\+|\s+or\s+(?:newer|later))")),
    ("torch", re.compile(r"(?:PyTorch|torch)\s+(?P<low>\d+\.\d+)(?:\+|\s+or\s+(?:newer|later))")),
]


def check_versions(page: str, text: str) -> list[str]:
    """A Python, transformers or PyTorch range is the one pyproject.toml asks for."""
    problems = []
    for name, pattern in VERSION_RANGES:
        spec = _spec(name)
        for match in pattern.finditer(text):
            low = Version(match["low"])
            high = match.groupdict().get("high")
            lowest = _lowest(spec, low.major)
            if high is None:  # "or newer": the floor, and no ceiling at all
                highest_ok = Version(f"{low.major}.99") in spec and Version(f"{low.major + 1}.0") in spec
            elif high.endswith(".x"):  # "the newest 5.x": every 5.x above the floor, and no 6
                major = int(high.split(".")[0])
                highest_ok = Version(f"{major}.99") in spec and Version(f"{major + 1}.0") not in spec
            else:
                highest_ok = Version(high) == _highest(spec, Version(high).major) and Version(
                    f"{Version(high).major}.{Version(high).minor + 1}") not in spec
            if low != lowest or not highest_ok:
                problems.append(f"{page}:{line_of(text, match.start())}: \"{' '.join(match[0].split())}\"; "
                                f"pyproject.toml asks for {name} {spec}")
    return problems


PLACEHOLDER = re.compile(r"<[A-Za-z][^<>|]*>")


def check_placeholders(page: str, text: str) -> list[str]:
    """A command on a page holds no <...> placeholder: a reader copies it as it is."""
    return [f"{page}:{number}: the command `{command.strip()}` holds the placeholder {hole}; "
            "write the real value, or say in words what to put there"
            for number, command in commands(text) for hole in PLACEHOLDER.findall(command)]


# ----------------------------------------------------------------------------------------------
# The README's speed table against the log.

DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")


@dataclass
class Table:
    line: int
    header: list[str]
    rows: dict[str, list[str]]  # first cell -> the row's cells


def _cells(line: str) -> list[str]:
    return [cell.strip().replace("**", "") for cell in line.strip().strip("|").split("|")]


def tables(text: str) -> list[Table]:
    found, lines = [], text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|") and i + 1 < len(lines) and re.fullmatch(r"\|[\s:|-]+\|?", lines[i + 1].strip()) \
                and not (i and lines[i - 1].startswith("|")):
            rows, j = {}, i + 2
            while j < len(lines) and lines[j].startswith("|"):
                cells = _cells(lines[j])
                rows[cells[0]] = cells
                j += 1
            found.append(Table(i + 1, _cells(line), rows))
    return found


def log_entries(text: str) -> list[tuple[int, str, str]]:
    """(line, title, body) of each `## YYYY-MM-DD · title` entry."""
    heads = [(m.start(), m.group(1)) for m in re.finditer(r"^## (\d{4}-\d{2}-\d{2} · .+)$", text, re.MULTILINE)]
    ends = [start for start, _ in heads[1:]] + [len(text)]
    return [(line_of(text, start), title, text[start:end]) for (start, title), end in zip(heads, ends)]


def speed_table(readme: str) -> tuple[Table, str]:
    """The README's speed table (the first table under "How fast") and the paragraph above it."""
    section = re.search(r"^## How fast.*?(?=^## |\Z)", readme, re.MULTILINE | re.DOTALL)
    assert section, "the README has no section \"How fast …\""
    offset = line_of(readme, section.start()) - 1
    table = tables(section[0])[0]
    caption = section[0].split("\n|", 1)[0]
    return Table(table.line + offset, table.header, table.rows), caption


def _number(cell: str) -> float | None:
    try:
        return float(cell.replace(",", ""))
    except ValueError:
        return None


def _mismatches(readme_table: Table, log_table: Table) -> list[tuple[float, str]]:
    """(how far apart, what) for each README cell the log table lacks or reads otherwise."""
    found = []
    columns = {name: i for i, name in enumerate(log_table.header)}
    for name in readme_table.header:
        if name not in columns:
            found.append((float("inf"), f"column \"{name}\" is not in the log's table"))
    for key, cells in readme_table.rows.items():
        theirs = log_table.rows.get(key)
        if theirs is None:
            found.append((float("inf"), f"row \"{key}\" is not in the log's table"))
            continue
        for name, cell in zip(readme_table.header, cells):
            if name not in columns:
                continue
            other = theirs[columns[name]] if columns[name] < len(theirs) else ""
            if cell != other:
                parts = [(_number(a), _number(b)) for a, b in zip(cell.split(" / "), other.split(" / "))]
                apart = max((abs(a - b) / max(abs(b), 1e-9) for a, b in parts if a is not None and b is not None),
                            default=float("inf"))
                found.append((apart, f"row \"{key}\", column \"{name}\": README {cell!r}, the log {other!r}"))
    return found


def check_speed_table(readme: str, log: str, page: str = "README.md", log_page: str = "book/src/log.md") -> list[str]:
    """The README's speed table is one log entry's, cell for cell, and its caption's date is that
    entry's and the README's only date."""
    table, caption = speed_table(readme)
    problems = []
    caption_dates = DATE.findall(caption)
    if len(caption_dates) != 1:
        problems.append(f"{page}:{table.line}: the speed table's caption gives {len(caption_dates)} dates; "
                        "it gives the run's date, once")
    start = readme.index(caption)
    others = [f"{line_of(readme, m.start())} ({m[0]})" for m in DATE.finditer(readme)
              if not start <= m.start() < start + len(caption)]
    if others:
        problems.append(f"{page}: dates outside the speed table's caption, on lines {', '.join(others)}: "
                        "the log holds every dated run")
    candidates = []
    for line, title, body in log_entries(log):
        for log_table in tables(body):
            mismatches = _mismatches(table, log_table)
            candidates.append((len(mismatches), sorted(mismatches, reverse=True), line + log_table.line - 1, title))
    if not candidates:
        return problems + [f"{page}:{table.line}: the speed table is in no entry of {log_page}, which has no table"]
    count, mismatches, log_line, title = min(candidates, key=lambda c: (c[0], c[1][:1]))
    if count:
        problems.append(f"{page}:{table.line}: the speed table differs from its closest log entry, \"{title}\" "
                        f"({log_page}:{log_line}), in {count} place{'s' if count != 1 else ''}; the worst: {mismatches[0][1]}")
    elif caption_dates and not title.startswith(caption_dates[0]):
        problems.append(f"{page}:{table.line}: the speed table's caption says {caption_dates[0]}; its log entry, "
                        f"\"{title}\" ({log_page}:{log_line}), is dated {title[:10]}")
    return problems


# ----------------------------------------------------------------------------------------------
# The real pages.

CHECKS = [check_step_counts, check_task_ranges, check_unfinished, check_kernels, check_versions, check_placeholders]


@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
def test_the_pages_agree_with_their_sources(check):
    """README.md and every page of the book state each repeated fact as its source does"""
    problems = [problem for page in PAGES for problem in check(str(page.relative_to(ROOT)), page.read_text())]
    assert not problems, "\n".join(problems)


def test_the_readmes_speed_table_is_a_log_entrys():
    """the README's one speed table is, cell for cell, the table of the log entry its caption dates"""
    problems = check_speed_table((ROOT / "README.md").read_text(), LOG.read_text())
    assert not problems, "\n".join(problems)


def test_the_parts_cover_the_outline():
    """PARTS starts at step 1 and splits OUTLINE into parts, Part II from step 17, Part III from step 25"""
    assert [(part.first, part.last) for part in PARTS_LIST] == [(1, 16), (17, 24), (25, 26)], PARTS_LIST
    assert [part.label for part in PARTS_LIST] == ["Part I", "Part II", "Part III"]
    assert sum(part.size for part in PARTS_LIST) == len(OUTLINE)


# ----------------------------------------------------------------------------------------------
# Each check fails on drifted text: the sentences the pages once held.

OLD_README_LAYOUT = """```text
course/       the machinery around the lessons, by who it serves:
  kernels/                 the course's Mojo kernels, MAX custom ops: one_row.mojo, layer.mojo and attention.mojo (step 16 gives them), q4_0.mojo, q4_k.mojo and q6_k.mojo (--quantize)
```"""

DRIFTED = [
    (check_step_counts, "| all twelve steps so far, one after another | about 7 minutes | about 30 s |",
     "\"twelve steps\" counts 12"),
    (check_step_counts, "Learners write about 150 lines in sixteen steps; everything else supports them.",
     "\"sixteen steps\" counts 16"),
    (check_step_counts, "The course has 23 chapters.", "\"23 chapters\" counts 23"),
    (check_task_ranges, "Every command in this book has a pixi task: `pixi run s01` … `pixi run s16` check\n"
                        "one step, `pixi run check-all` checks every step so far.", "runs s01…s16"),
    (check_task_ranges, "Part II is `s17` … `s23`.", "runs s17…s23"),
    (check_unfinished, "**Part II, the Llama family** (from step 17, being written) rebuilds the model",
     "every step of Part II s17…s24, 8 steps, step 17 has a solution"),
    (check_unfinished, "Part II is being written.", "\"being written\""),
    (check_kernels, OLD_README_LAYOUT, "lists 6 of the kernels without block.mojo"),
    (check_kernels, "The attention is `attend.mojo`.", "names attend.mojo, which course/kernels/ does not hold"),
    (check_versions, "Python 3.10–3.13 on Linux", "pyproject.toml asks for python"),
    (check_versions, "Python 3.11, 3.12 or 3.14.", "pyproject.toml asks for python"),
    (check_versions, "The course works on every transformers from 5.10 to the newest 5.x.",
     "pyproject.toml asks for transformers"),
    (check_versions, "transformers 5.12 or newer", "pyproject.toml asks for transformers"),  # it stops before 6
    (check_versions, "Any PyTorch 2.4 or newer works.", "pyproject.toml asks for torch"),
    (check_placeholders, "```sh\ngit clone <the course repository> gpt2-with-max\ncd gpt2-with-max\n```",
     "holds the placeholder <the course repository>"),
    (check_placeholders, "(`CI=true HOME=<empty> bash -c 'time bash .ci/run'`, a fresh clone)",
     "holds the placeholder <empty>"),
]


@pytest.mark.parametrize("check, text, reported", DRIFTED, ids=[f"{c.__name__}-{i}" for i, (c, _, _) in enumerate(DRIFTED)])
def test_each_check_reports_drifted_text(check, text, reported):
    """the sentences the pages once held, or small changes of today's, are each reported"""
    problems = check("drifted.md", text)
    assert problems and any(reported in problem for problem in problems), problems
    assert all(problem.startswith("drifted.md:") for problem in problems), problems


KEPT = [
    (check_step_counts, "The course has 26 steps in three parts. Part I's sixteen steps build GPT-2."),
    (check_step_counts, "the loss of every batch and, every 50 steps, the loss on the held-out tenth"),
    (check_step_counts, "380 steps of GPT-2 small's sizes; three steps of `train()` redone by hand"),
    (check_step_counts, "Part II's eight steps build a Llama."),
    (check_task_ranges, "`pixi run s01` … `pixi run s26` check one step (Part I is `s01` … `s16`, Part II `s17` … `s24`)"),
    (check_task_ranges, "| s17–s20 | 6.7–7.5 s |"),
    (check_unfinished, "**Part II, the Llama family** (steps 17–24) rebuilds the model"),
    (check_kernels, "`one_row.mojo` streams a band of rows; `attention.mojo` reads the cache once."),
    (check_kernels, "`course/authoring/barriers.mojo` times `block.mojo`'s barrier."),
    (check_versions, "Python 3.11–3.13; Python 3.11, 3.12 or 3.13; transformers from 5.12 to the newest 5.x; "
                     "Any PyTorch 2.6 or newer works."),
    (check_placeholders, "```text\n… still running: <check> (1 min 30 s)\n```\n`<|endoftext|>` ends the text."),
]


@pytest.mark.parametrize("check, text", KEPT, ids=[f"{c.__name__}-{i}" for i, (c, _) in enumerate(KEPT)])
def test_each_check_passes_what_agrees(check, text):
    """what agrees with the source, and what only looks alike (training steps, measured ranges), passes"""
    assert check("kept.md", text) == []


def test_the_speed_check_reports_a_changed_cell():
    """a README whose speed table has one cell changed is reported with that cell, the README's value and the log's"""
    readme = (ROOT / "README.md").read_text()
    table, _ = speed_table(readme)
    key, cells = next((key, cells) for key, cells in table.rows.items() if _number(cells[3]) is not None)
    line = next(line for line in readme.splitlines() if line.startswith("|") and _cells(line)[0] == key)
    changed = line.replace(f"| {cells[3]} |", f"| {_number(cells[3]) + 10:.1f} |", 1)
    assert changed != line
    problems = check_speed_table(readme.replace(line, changed), LOG.read_text())
    assert len(problems) == 1, problems
    assert f"row \"{key}\", column \"{table.header[3]}\": README '{_number(cells[3]) + 10:.1f}', the log '{cells[3]}'" \
        in problems[0], problems


def test_the_speed_check_reports_a_second_date_and_a_missing_entry():
    """a date outside the caption is reported, and so is a log without the table"""
    readme = (ROOT / "README.md").read_text()
    problems = check_speed_table(readme + "\nMeasured again on 2026-12-01.\n", LOG.read_text())
    assert any("dates outside the speed table's caption" in problem for problem in problems), problems
    problems = check_speed_table(readme, "# The log\n\n## 2026-11-30 · Something else\n\nNo table.\n")
    assert problems and "is in no entry of book/src/log.md" in problems[-1], problems


# ----------------------------------------------------------------------------------------------
# The speed tables of the chapters: their figures are a log entry's, and their ratios are their own figures'.

#: The columns that hold a measurement, and the one a ratio column divides.
MEASURED, SPEED = ("prefill ms", "decode tok/s"), "decode tok/s"


def speed_tables(text: str) -> list[Table]:
    """Every table of a page with a "decode tok/s" column."""
    return [table for table in tables(text) if SPEED in table.header]


def check_ratios(page: str, text: str) -> list[str]:
    """Each "× X" column of a speed table (but llama.cpp's, a median of paired rounds' own ratios) is each row's
    decode tok/s over the tok/s of the row whose ratio is 1.00 (within 1%, as the tok/s shown are rounded, and half
    the last digit shown), every part of an "a / b" cell too."""
    problems = []
    for table in speed_tables(text):
        speed = table.header.index(SPEED)
        for column, name in enumerate(table.header):
            if not name.startswith("×") or "llama.cpp" in name:
                continue
            base = [_number(cells[speed]) for cells in table.rows.values()
                    if column < len(cells) and cells[column] == "1.00" and _number(cells[speed]) is not None]
            if len(base) != 1:
                problems.append(f"{page}:{table.line}: column \"{name}\" has {len(base)} rows of 1.00 to divide by")
                continue
            for key, cells in table.rows.items():
                shown, speeds = cells[column].split(" / "), cells[speed].split(" / ")
                for ratio, tok_s in zip(shown, speeds):
                    if _number(ratio) is None or _number(tok_s) is None:
                        continue
                    # bench divides unrounded medians: 1% for the rounded figures, and half the last digit shown
                    decimals = len(ratio.partition(".")[2])
                    if abs(_number(ratio) - _number(tok_s) / base[0]) > 0.01 * _number(ratio) + 0.5 * 10**-decimals:
                        problems.append(f"{page}:{table.line}: row \"{key}\", column \"{name}\" says {ratio}; its "
                                        f"decode tok/s gives {_number(tok_s) / base[0]:.2f} ({tok_s} / {base[0]})")
    return problems


def check_chapter_figures(page: str, text: str, log: str) -> list[str]:
    """Every measured figure (prefill ms, decode tok/s) of a chapter's speed table stands in one log entry's tables."""
    problems = []
    entries = [(title, {cell for table in tables(body) for cells in table.rows.values() for part in cells
                        for cell in part.split(" / ")}) for _, title, body in log_entries(log)]
    for table in speed_tables(text):
        figures = {part for cells in table.rows.values() for name, cell in zip(table.header, cells)
                   if name in MEASURED for part in cell.split(" / ") if _number(part) is not None}
        best = max(entries, key=lambda entry: len(figures & entry[1]), default=("(no entry)", set()))
        missing = sorted(figures - best[1], key=float)
        if missing:
            problems.append(f"{page}:{table.line}: the speed table's figures {', '.join(missing)} are not in its log "
                            f"entry, \"{best[0]}\": every figure a chapter shows comes from one run of the log")
    return problems


CHAPTERS = [page for page in PAGES if page.name != "log.md"]


def test_the_chapters_speed_tables_are_a_log_runs_and_their_ratios_their_own():
    """every speed table of the README and the book: its figures a log entry's, its ratio columns its own figures'"""
    log = LOG.read_text()
    problems = [problem for page in CHAPTERS for text in [page.read_text()]
                for problem in check_ratios(str(page.relative_to(ROOT)), text)
                + (check_chapter_figures(str(page.relative_to(ROOT)), text, log) if page.name != "README.md" else [])]
    assert not problems, "\n".join(problems)


def test_the_chapter_checks_report_a_ratio_and_a_figure_that_drifted():
    """chapter 16's table with its own step's ratio given as the 1.5× it once claimed, and with a tok/s no run gave:
    each reported with the row, what it says and what the figures give"""
    page = ROOT / "book" / "src" / "step_16_memory_limit.md"
    text = page.read_text()
    line = next(line for line in text.splitlines() if line.startswith("| **ours, decode graph (this step)**"))
    cells = _cells(line)
    drifted = text.replace(line, line.replace(f"**{cells[-1]}**", "**1.50**"))
    problems = check_ratios("drifted.md", drifted)
    assert any("row \"ours, decode graph (this step)\", column \"× step 15\" says 1.50; its decode tok/s gives "
               f"{cells[-1]}" in problem for problem in problems), problems
    drifted = text.replace(line, line.replace(f"**{cells[2]}**", "**60.6**"))
    problems = check_chapter_figures("drifted.md", drifted, LOG.read_text())
    assert len(problems) == 1 and "figures 60.6 are not in its log entry" in problems[0], problems
