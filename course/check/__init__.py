"""The learner's checker: ``pixi run sNN`` (``python -m course.check N``).

    runner.py         pytest, reported for learners: one ✓/✗ line per check, a verdict
    hints.py          exceptions and mismatches in plain words, naming the TODO
    pytest_plugin.py  the --target and --steps-dir options, loaded before pytest reads paths
"""
