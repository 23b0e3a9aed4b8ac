"""The machinery around the lessons, arranged by who it serves. Learners never edit it.

    outline.py, runtime.py   every part: the fifteen steps and their files; MAX set up once
    checkpoints.py           finding, downloading and reading a checkpoint (step 14 calls it)
    weights.py               seeded random weights, the one helper for tests, book and bench
    check/                   learners: `pixi run sNN`, the pytest plugin, the plain-words hints
    programs/                everyone: `pixi run main`, `gpt2` and `bench`, and the one road
                             from a checkpoint (or random weights) to a compiled model
    authoring/               instructors: render steps/ from solutions/, the book's
                             experiments and diagrams
"""
