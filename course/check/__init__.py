"""The learner's checker: ``pixi run sNN`` (``python -m course.check N``).

    runner.py         pytest, reported for learners: one ✓/✗ line per check, a verdict
    hints.py          exceptions and mismatches in plain words, naming the TODO
    pytest_plugin.py  the --target and --steps-dir options, loaded before pytest reads paths
"""

import os

# The references run on torch, whose OpenMP threads wait for work by spinning. Beside another busy process (a
# browser, an editor, a second pytest worker) a spinning thread holds a core the other needs: two of
# test_course_model's training checks side by side took 50-61 s spinning and 29-31 s with the threads asleep
# while they wait (the book's log, "Torch's threads asleep while they wait"). Set here, on the way into every
# check process (`python -m course.check`, and pytest, which loads course.check.pytest_plugin first), before MAX
# or torch loads an OpenMP library (libgomp reads it once, as it loads); inherited by the programs the checks
# start. A policy the user set is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
