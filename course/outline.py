"""The course outline, and where each step's files live."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
STEPS = ROOT / "steps"
#: GPT-2's own vocab.json and merges.txt, shipped with the course (see the README beside them).
GPT2_TOKENIZER = ROOT / "course" / "gpt2-tokenizer"
#: The course's own small GPT-2, trained on course/texts and the book (``python -m course.authoring.train``); ``--model course``.
COURSE_MODEL = ROOT / "course" / "gpt2-book"
#: Part II's own small Llama, trained the same way (``--family llama``); ``--model course-llama``.
COURSE_LLAMA = ROOT / "course" / "llama-book"
#: The variable that tells MAX's server workers whose steps to serve (``serve --target steps``: the learner's
#: folder); course/architectures.py imports the served steps from it, else from SOLUTIONS.
SERVE_STEPS_VARIABLE = "COURSE_SERVE_STEPS"



def pixi_task(numbers: list[int] | None = None) -> str:
    """The pixi task that checks these steps: one step's ``sNN``, several steps' ``check N M``, every step's
    ``check-all`` (``None``)."""
    if numbers is None:
        return "pixi run check-all"
    if len(numbers) == 1:
        return f"pixi run s{numbers[0]:02d}"
    return f"pixi run check {' '.join(map(str, numbers))}"


def check_command(number: int) -> str:
    """How to check step ``number``, for pixi's users and for a plain virtualenv's."""
    return f"`{pixi_task([number])}` (or `python -m course.check {number}`)"


def not_installed(error: ModuleNotFoundError, command: str, pixi: str) -> str:
    """One line for a course program started by a Python without the course's packages (a new
    terminal, the virtualenv not activated): which package, which Python, what to do."""
    import sys

    return (f"{command} needs the package `{(error.name or str(error)).split('.')[0]}`, which this Python "
            f"({sys.executable}) does not have: activate the course's environment first (`source .venv/bin/activate`, "
            f"as in the README's setup), or run `{pixi}`.")


OUTLINE = {
    1: "model configuration",
    2: "causal mask",
    3: "layer normalization",
    4: "feed-forward network (MLP)",
    5: "token embeddings",
    6: "position embeddings",
    7: "multi-head attention",
    8: "residual connections",
    9: "transformer block",
    10: "stacking blocks (model body)",
    11: "language-model head",
    12: "tokenization",
    13: "text generation",
    14: "pretrained weights",
    15: "KV cache",
    16: "decoding at the memory limit",
    # Part II · the Llama family.
    17: "Llama configuration",
    18: "RMS normalization",
    19: "rotary position embeddings (RoPE)",
    20: "SwiGLU feed-forward network",
    21: "grouped-query attention",
    22: "the Llama model and its head",
    23: "Llama checkpoints",
    24: "Llama generation and its KV cache",
    # Part III · serving.
    25: "serving: a ragged batch on a paged cache",
    26: "serving the Llama: RoPE on a ragged batch",
}

#: The course's parts, by the step each starts at: a part runs to the step before the next part's
#: first (the last to the end of OUTLINE). The pages' drift check (tests/test_pages.py) reads them.
PARTS = {1: "Part I · GPT-2", 17: "Part II · the Llama family", 25: "Part III · serving"}


def marker(number: int) -> str:
    """The pytest marker that selects a step's checks: ``step04``."""
    return f"step{number:02d}"


def step_path(number: int, root: Path = SOLUTIONS) -> Path | None:
    """The step's file under ``root`` (``step_04_mlp.py``), or None if it has none yet."""
    found = sorted(root.glob(f"step_{number:02d}_*.py"))
    return found[0] if found else None


def available() -> list[int]:
    """The steps that have a solution, in order."""
    return [n for n in OUTLINE if step_path(n) is not None]
