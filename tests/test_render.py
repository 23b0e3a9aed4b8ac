"""``course/authoring/render.py``: the learner's stubs in ``steps/``, rendered from ``solutions/``.

Each check renders a small solution written here, or the course's own into a scratch folder, in the tests'
process: what a stub keeps and drops, which TODOs count as unfinished, and what ``render`` and
``render --check`` print and return. (``tests/test_course.py`` checks the course's own ``steps/`` against
its manifest, and that every stub fails its step's check.)
"""

from __future__ import annotations

import json

import pytest

from course.authoring import render
from course.outline import SOLUTIONS, available

SOLUTION = '''"""Step 4: the MLP."""
from max import nn


class MLP(nn.Module):
    def __init__(self, config):
        # TODO 1: Create c_fc, the first Linear layer.
        # ANCHOR: c_fc | stub: self.c_fc = None
        self.c_fc = nn.Linear(config.n_embd, config.inner_dim)
        # ANCHOR_END: c_fc
        # ANCHOR: shown
        self.act = "gelu"
        # ANCHOR_END: shown

    def __call__(self, x):
        # TODO 2: Apply c_fc, then GELU.
        #   (a hint that spans
        #   two lines)
        # ANCHOR: forward | stub: return None
        h = self.c_fc(x)
        return gelu(h)
        # ANCHOR_END: forward


'''

STUB = '''# Your file for step 04: fill in its TODOs, then run `pixi run s04`.
# (Rendered from solutions/step_04_mlp.py by `python -m course.authoring.render`.)
"""Step 4: the MLP."""
from max import nn


class MLP(nn.Module):
    def __init__(self, config):
        # TODO 1: Create c_fc, the first Linear layer.
        self.c_fc = None
        self.act = "gelu"

    def __call__(self, x):
        # TODO 2: Apply c_fc, then GELU.
        #   (a hint that spans
        #   two lines)
        return None
'''


def test_a_stub_keeps_the_given_code_and_puts_each_stub_line_where_its_block_was():
    """render_text: the banner with the step's number, file and check command; each `stub:` block replaced by its
    stub line at the block's indent; a plain anchor's lines kept without the ANCHOR lines; one newline at the end"""
    assert render.render_text(SOLUTION, "step_04_mlp.py") == STUB


def test_an_anchor_that_never_closes_is_named():
    with pytest.raises(ValueError) as refused:
        render.render_text(SOLUTION.replace("        # ANCHOR_END: forward\n", ""), "step_04_mlp.py")
    assert str(refused.value) == "solutions/step_04_mlp.py: `# ANCHOR_END: forward` never comes", str(refused.value)


@pytest.fixture
def solutions(tmp_path, monkeypatch):
    """A solutions/ folder of two steps, the MLP above and a config without TODOs, in place of the course's."""
    folder = tmp_path / "solutions"
    folder.mkdir()
    (folder / "step_04_mlp.py").write_text(SOLUTION)
    (folder / "step_01_config.py").write_text("# ANCHOR: all\nN = 1\n# ANCHOR_END: all\n")
    monkeypatch.setattr(render, "SOLUTIONS", folder)
    return folder


def test_render_writes_every_stub_and_records_it(solutions, tmp_path):
    """render_all into an empty folder: every step in order, and the manifest holds each stub's sha256"""
    out = tmp_path / "steps"
    assert render.render_all(out) == (["step_01_config.py", "step_04_mlp.py"], [])
    assert (out / "step_04_mlp.py").read_text() == STUB
    manifest = json.loads((out / render.MANIFEST).read_text())
    assert manifest == {name: render._digest((out / name).read_text()) for name in ("step_01_config.py", "step_04_mlp.py")}
    assert render.render_all(out) == ([], []), "an up-to-date folder was written again"
    assert render.stale(out) == [] and render.compare_with_manifest(out) == ([], [])


def test_stale_names_a_missing_and_a_changed_stub(solutions, tmp_path):
    out = tmp_path / "steps"
    render.render_all(out)
    (out / "step_01_config.py").unlink()
    (out / "step_04_mlp.py").write_text(STUB + "# mine\n")
    assert render.stale(out) == ["steps/step_01_config.py is missing", "steps/step_04_mlp.py differs from its rendering"]
    assert render.compare_with_manifest(out) == ([], ["steps/step_01_config.py is missing", "steps/step_04_mlp.py has edits"])


def test_a_folder_without_a_readable_manifest_counts_every_file_as_edited(solutions, tmp_path):
    """no manifest, or one that is not JSON: render keeps every file that differs (a learner's, perhaps) and
    writes the rest"""
    out = tmp_path / "steps"
    out.mkdir()
    (out / "step_04_mlp.py").write_text("# my MLP\n")
    (out / render.MANIFEST).write_text("{not json")
    assert render.render_all(out) == (["step_01_config.py"], ["step_04_mlp.py"])
    assert (out / "step_04_mlp.py").read_text() == "# my MLP\n"
    assert render.compare_with_manifest(out)[1] == ["steps/step_04_mlp.py has edits"]
    (out / render.MANIFEST).unlink()
    assert render.render_all(out) == ([], ["step_04_mlp.py"])
    assert render.render_all(out, force=True) == (["step_04_mlp.py"], [])
    assert (out / "step_04_mlp.py").read_text() == STUB


def test_a_file_that_already_is_its_stub_is_recorded_not_rewritten(solutions, tmp_path):
    """a folder holding the right stubs but no manifest (copied by hand): nothing to write, and the manifest
    then records them"""
    out = tmp_path / "steps"
    out.mkdir()
    (out / "step_04_mlp.py").write_text(STUB)
    assert render.render_all(out) == (["step_01_config.py"], [])
    assert render.compare_with_manifest(out) == ([], [])


@pytest.mark.parametrize("learner, left", [
    (STUB, [1, 2]),
    (STUB.replace("self.c_fc = None", "self.c_fc = Linear(4, 16)"), [2]),
    (STUB.replace("        return None", "        return self.c_fc(x)"), [1]),
    (STUB.replace("        return None", "        return None  # later"), [1]),  # the line is no longer the stub's
    (STUB.replace("        return None", "        return None   "), [1, 2]),  # trailing spaces do not count
    (STUB.replace("        self.c_fc = None", "        # thinking\n        self.c_fc = None"), [1, 2]),  # a comment between
    (STUB.replace("        self.c_fc = None\n", ""), [2]),  # the stub line deleted: the next line is not it
    (STUB.replace("# TODO 2:", "# TODO 3:"), [1]),  # a TODO the solution does not have
    (STUB.replace("        return None\n", ""), [1]),  # the file ends after TODO 2's comments
    ("", []),
])
def test_a_todo_is_unfinished_while_its_stub_line_follows_it(learner, left):
    """unfinished_todos: a TODO whose first line after its comments is still the stub's, whatever follows on
    the next lines"""
    assert render.unfinished_todos(SOLUTION, learner) == left


def test_unfinished_names_each_step_with_its_stubbed_todos(tmp_path):
    """unfinished over the course's own steps: a missing file is wholly unfinished, a finished one is left out;
    by default every step with a solution"""
    out = tmp_path / "steps"
    render.render_all(out)
    (out / "step_01_config.py").write_text((SOLUTIONS / "step_01_config.py").read_text())
    (out / "step_03_layer_norm.py").unlink()
    found = render.unfinished(out, [1, 2, 3])
    assert list(found) == [2, 3] and found[3] == [] and found[2], found
    everything = render.unfinished(out)
    assert list(everything) == [n for n in available() if n != 1], everything


def test_render_check_lists_stale_stubs_and_exits_1(solutions, tmp_path, capsys):
    out = tmp_path / "steps"
    assert render.main(["--out", str(out)]) == 0
    assert capsys.readouterr().out == "wrote steps/step_01_config.py\nwrote steps/step_04_mlp.py\n"
    assert render.main(["--check", "--out", str(out)]) == 0 and capsys.readouterr().out == ""
    (out / "step_04_mlp.py").write_text("# mine\n")
    assert render.main(["--check", "--out", str(out)]) == 1
    assert capsys.readouterr().out == ("steps/step_04_mlp.py differs from its rendering\n"
                                       "Run `python -m course.authoring.render` to refresh them (it keeps a learner's edits).\n")
    assert render.main(["--out", str(out)]) == 0
    assert capsys.readouterr().out == "kept steps/step_04_mlp.py: it has edits of yours (use --force to replace it)\n"
    assert render.main(["--out", str(out), "--force"]) == 0
    assert capsys.readouterr().out == "wrote steps/step_04_mlp.py\n"
    assert render.main(["--out", str(out)]) == 0 and capsys.readouterr().out == "steps/ is up to date\n"


def test_render_makes_the_folder_and_its_parents(solutions, tmp_path):
    out = tmp_path / "fork" / "steps"
    assert render.render_all(out)[0] == ["step_01_config.py", "step_04_mlp.py"] and (out / "step_04_mlp.py").is_file()


def test_a_todo_with_two_stub_blocks_is_judged_by_its_first(tmp_path):
    """a TODO whose code is two blocks: the line after its comments is the first block's stub"""
    solution = SOLUTION.replace("        # ANCHOR: shown\n", "        # ANCHOR: shown | stub: self.act = None\n")
    solution = solution.replace("        # TODO 1: Create c_fc, the first Linear layer.\n",
                                "        # TODO 1: Create c_fc, the first Linear layer, and name the activation.\n")
    stub = render.render_text(solution, "step_04_mlp.py")
    assert render.unfinished_todos(solution, stub) == [1, 2]
    assert render.unfinished_todos(solution, stub.replace("self.c_fc = None", "self.c_fc = Linear(4, 16)")) == [2]


def test_render_without_out_writes_steps_and_its_help_names_the_command(solutions, tmp_path, monkeypatch, capsys):
    """`python -m course.authoring.render` renders into steps/ by default; `--help` shows the command, what it does
    and each option with its help"""
    monkeypatch.setattr(render, "STEPS", tmp_path / "steps")
    assert render.main([]) == 0 and (tmp_path / "steps" / "step_04_mlp.py").read_text() == STUB
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        render.main(["--help"])
    shown = capsys.readouterr().out
    assert done.value.code == 0 and shown.startswith("usage: python -m course.authoring.render [-h] [--check]"), shown
    assert " ".join(shown.split("\n\n")[1].split()) == render.__doc__.splitlines()[0], shown  # its first line alone
    for flag in ("--check", "--out OUT", "--force"):
        line = next(line for line in shown.splitlines() if line.strip().startswith(flag))
        assert len(line.strip()) > len(flag) + 5, f"{flag} has no help: {line!r}"


def test_a_stub_whose_solution_changed_is_rendered_again_and_the_rest_go_on(solutions, tmp_path):
    """an unedited stub of an older solution is replaced; a file kept as edited does not stop the files after it"""
    out = tmp_path / "steps"
    render.render_all(out)
    (solutions / "step_04_mlp.py").write_text(SOLUTION.replace("Step 4: the MLP.", "Step 4: the MLP, two layers."))
    assert render.render_all(out) == (["step_04_mlp.py"], [])
    assert "two layers" in (out / "step_04_mlp.py").read_text()
    (out / "step_01_config.py").write_text("N = 2  # mine\n")
    (out / "step_04_mlp.py").unlink()
    assert render.render_all(out) == (["step_04_mlp.py"], ["step_01_config.py"])


def test_the_manifest_is_a_sorted_line_a_stub(solutions, tmp_path):
    """steps/.stubs.json holds a line a file, sorted by name whatever order they were written in, so that a
    re-render's diff shows one line for each stub that changed"""
    out = tmp_path / "steps"
    render.render_all(out)
    (out / "step_01_config.py").unlink()
    manifest = out / render.MANIFEST
    recorded = json.loads(manifest.read_text())
    manifest.write_text(json.dumps(dict(reversed(recorded.items()))))  # step_04 first, as a hand edit might leave it
    render.render_all(out)
    lines = manifest.read_text().splitlines()
    assert lines[0] == "{" and lines[-1] == "}" and manifest.read_text().endswith("}\n"), lines
    assert [line.split('"')[1] for line in lines[1:-1]] == sorted(recorded), lines
    assert json.loads(manifest.read_text()) == recorded
