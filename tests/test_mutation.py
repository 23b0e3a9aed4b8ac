"""The mutation testing summary (``book/src/mutation-summary.txt``) is the one measured on today's code.

``python -m course.authoring.mutation --write`` runs mutmut over each target in
``course.authoring.mutation.TARGETS`` (minutes, so not here) and records the sha256 of the code
it mutated. These checks fail when a target has changed since, so that the appendix never
shows the verdict on code that is gone. They also check the rule that sets aside mutants which
only reword an error message, since its verdicts never reach mutmut.
"""

from __future__ import annotations

import pytest

from course.authoring.mutation import SUMMARY, TARGETS, digest, recorded, rewords_a_message
from course.outline import ROOT

pytestmark = pytest.mark.course

REFRESH = "rerun `python -m course.authoring.mutation --write` (`pixi run -e mutation mutation --write`)"


@pytest.mark.parametrize("target", list(TARGETS))
def test_the_summary_is_of_todays_code(target):
    """each target's sha256 in the summary is the file's as it is now"""
    found = recorded()
    assert target in found, f"{SUMMARY.relative_to(ROOT)} has no line for {target}: {REFRESH}"
    assert found[target] == digest(ROOT / target), (
        f"{target} changed since the mutation run in {SUMMARY.relative_to(ROOT)} (sha256 {found[target]}, "
        f"now {digest(ROOT / target)}): {REFRESH}")


FUNCTION = '''def vet(path, values):
    if values.get("n", 1) > 2:
        raise CheckpointError(f"{path} sets n={values['n']}; " + "the course computes n=1 only")
    return str(values).split(":")[0]
'''


@pytest.mark.parametrize("mutated, rewords", [
    (FUNCTION.replace("; \"", "; XX\"").replace('" + "the', '" + "XXthe'), True),
    (FUNCTION.replace('"the course computes', '"THE COURSE COMPUTES'), True),
    (FUNCTION.replace("> 2", ">= 2"), False),
    (FUNCTION.replace('get("n", 1)', 'get("XXnXX", 1)'), False),
    (FUNCTION.replace('split(":")', 'split("XX:XX")'), False),
    (FUNCTION.replace(' + "the course computes n=1 only"', ""), False),
    (FUNCTION.replace('+ "the course computes n=1 only"', "+ None"), False),
])
def test_only_a_messages_words_are_set_aside(mutated, rewords):
    """a mutant is set aside as rewording only when it changes nothing but the text of an exception's
    message: not a comparison, a key, a string the code uses, or the message's parts"""
    assert mutated != FUNCTION
    assert rewords_a_message(FUNCTION, mutated) is rewords, mutated
