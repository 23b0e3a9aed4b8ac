"""Instructors' tools: nothing here runs while a learner checks a step.

    render.py       steps/ from solutions/ (the stubs), and which TODOs a learner has left
    experiments.py  each chapter's experiment and check outputs, checked against real runs
    diagrams.py     the book's SVG diagrams, generated
"""
