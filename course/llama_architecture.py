"""The course's Llama (step 26) under MAX's own Llama's name, for ``max serve --custom-architectures
ROOT:course.llama_architecture``: a server given it runs every ``LlamaForCausalLM`` checkpoint on the course's
code (``pixi run serve --llama course``). The architecture itself is in :mod:`course.architectures`."""

from course.architectures import llama_architecture

ARCHITECTURES = [llama_architecture]
