"""The programs: ``pixi run main`` and ``gpt2`` (generate.py), ``pixi run bench`` (bench.py).

    build.py     the one road from a checkpoint, or random weights, to a compiled model
    quantize.py  --quantize: GGUF block formats through MAX's quantized matmul
"""
