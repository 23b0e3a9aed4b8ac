"""The course's GPT-2 as an architecture of MAX's server: what ``max serve --custom-architectures`` imports.

MAX's server knows a checkpoint by ``config.json``'s ``architectures[0]`` and looks that name up among the
architectures it was given. An architecture is four things, all here:

* a config (:class:`GPT2ServeConfig`): the sizes the graph is built with, and the KV cache MAX must allocate for
  it (one key/value head a query head; ``head_dim`` = ``n_embd / n_head``; ``n_layer`` layers; float32 on the CPU);
* a pipeline model (:class:`GPT2PipelineModel`): loads the checkpoint's weights, builds the model under
  ``F.lazy()`` and compiles it for MAX's inputs: ``tokens [N]``, ``return_n_logits``, ``input_row_offsets [B + 1]``
  and the paged cache's tensors;
* the batch of inputs: MAX's ragged batch processor, the same one its own Llama uses;
* the registration (:data:`ARCHITECTURES`): the name, the tokenizer and the weight adapter, which runs the
  learner's step-14 ``convert`` on the checkpoint (names and Conv1D layouts).

The model itself is step 25's ``ServedGPT2``, imported from the folder in ``$COURSE_SERVE_STEPS`` (the learner's
``steps/``), else from ``solutions/``: MAX's server runs its model in worker processes, and they inherit the
variable. ``pixi run serve --model course`` passes this module to ``max serve``.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from max import tree
from max.dtype import DType
from max.experimental.tensor import Tensor
from max.graph import DeviceRef
from max.graph.weights import WeightsFormat
from max.nn.kv_cache import KVCacheInputsPerDevice, KVCacheParams
from max.pipelines.architectures.llama3_modulev3.batch_processor import Llama3ModuleV3BatchProcessor
from max.pipelines.context import TextContext
from max.pipelines.kv_cache.memory_planner import PagedMemoryPlanner
from max.pipelines.lib import ModuleV3Outputs, ModuleV3PipelineModelWithKVCache, SupportedArchitecture, TextTokenizer
from max.pipelines.lib.interfaces.arch_config import ArchConfigWithKVCache, ArchConfigWithStoredKVParams
from max.pipelines.modeling.types import PipelineTask

from course.outline import SOLUTIONS, step_path
from course.paged import PagedCache

#: The variable that names the folder step 25 and the steps under it are imported from.
STEPS_VARIABLE = "COURSE_SERVE_STEPS"
#: Step 25: the served model; step 14: the weights' names and layouts; step 01: the config.
SERVED, WEIGHTS, CONFIG = 25, 14, 1


def steps_folder() -> Path:
    """Whose code the server runs: ``$COURSE_SERVE_STEPS``, else the course's solutions."""
    return Path(os.environ.get(STEPS_VARIABLE) or SOLUTIONS).resolve()


def lesson(number: int):
    """Step ``number``'s module from :func:`steps_folder` (its own imports, ``step_07_attention`` and the rest,
    come from the same folder)."""
    folder = str(steps_folder())
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(step_path(number, SOLUTIONS).stem)


@dataclass(kw_only=True)
class GPT2ServeConfig(ArchConfigWithStoredKVParams, ArchConfigWithKVCache):
    """What the graph is built with: the learner's GPT2Config, the dtype, the devices and the cache's sizes."""

    DEFAULT_ENCODING: ClassVar[str] = "float32"
    SUPPORTED_ENCODINGS: ClassVar[set[str]] = {"float32"}

    gpt2: Any
    dtype: DType
    max_seq_len: int
    kv_params: KVCacheParams
    devices: list[DeviceRef]

    @classmethod
    def construct_kv_params(cls, huggingface_config, pipeline_config, devices, kv_cache_config, cache_dtype,
                            **_: Any) -> KVCacheParams:
        """GPT-2 caches every head: as many key/value heads as query heads, ``n_embd / n_head`` wide."""
        return kv_cache_config.to_params(
            dtype=cache_dtype, n_kv_heads=huggingface_config.n_head,
            head_dim=huggingface_config.n_embd // huggingface_config.n_head, num_layers=huggingface_config.n_layer,
            devices=devices, data_parallel_degree=pipeline_config.model.data_parallel_degree)

    @classmethod
    def initialize(cls, pipeline_config, model_config=None, *, max_seq_len: int) -> GPT2ServeConfig:
        model_config = model_config or pipeline_config.model
        hf = model_config.huggingface_config
        devices = [DeviceRef(spec.device_type, spec.id) for spec in model_config.device_specs]
        return cls(gpt2=lesson(WEIGHTS).config_from_json(hf.to_dict()), dtype=DType.float32, max_seq_len=max_seq_len,
                   kv_params=cls.construct_kv_params(hf, pipeline_config, devices, model_config.kv_cache,
                                                     DType.float32),
                   devices=devices)


def served_model_class():
    """Step 25's ``ServedGPT2`` under a root that takes MAX's inputs as the compiled graph receives them."""
    served = lesson(SERVED).ServedGPT2

    class Root(served):
        def __init__(self, config: GPT2ServeConfig):
            super().__init__(config.gpt2)
            self._kv_params = config.kv_params

        def forward(self, tokens: Tensor, return_n_logits: Tensor, input_row_offsets: Tensor,
                    *cache_inputs: Tensor) -> ModuleV3Outputs:
            del return_n_logits  # one row a sequence: its last token's
            values = tree.leaves(self._kv_params.unflatten_kv_inputs(iter(x._graph_value for x in cache_inputs)),
                                 leaf=KVCacheInputsPerDevice)[0]
            logits = super().forward(tokens, PagedCache(values, self._kv_params), input_row_offsets)
            return ModuleV3Outputs(next_token_logits=logits)

    return Root


class GPT2PipelineModel(ModuleV3PipelineModelWithKVCache[TextContext]):
    """Loads, builds and compiles step 25's model for MAX's server."""

    model_config_cls: ClassVar[type[Any]] = GPT2ServeConfig
    batch_processor_cls: ClassVar[type[Any]] = Llama3ModuleV3BatchProcessor

    def _create_model_config(self, state_dict: dict[str, Any]) -> GPT2ServeConfig:
        del state_dict
        return GPT2ServeConfig.initialize(self.pipeline_config, max_seq_len=self.max_seq_len)

    def _module_default_dtype(self, state_dict, model_config) -> DType:
        return DType.float32

    def _instantiate_module(self, model_config: GPT2ServeConfig):
        model = served_model_class()(model_config)
        model.to(self.devices[0])
        return model


def convert_weights(state_dict: dict[str, Any], **_: Any) -> dict[str, np.ndarray]:
    """The checkpoint's tensors as the learner's model names and lays them out (step 14's ``convert``)."""
    arrays = {name: np.from_dlpack(weights.data().data) for name, weights in state_dict.items()}
    return {name: np.ascontiguousarray(value) for name, value in lesson(WEIGHTS).convert(arrays).items()}


gpt2_architecture = SupportedArchitecture(
    name="GPT2LMHeadModel",
    example_repo_ids=["openai-community/gpt2"],
    default_encoding="float32",
    supported_encodings={"float32"},
    pipeline_model=GPT2PipelineModel,
    tokenizer=TextTokenizer,
    context_type=TextContext,
    default_weights_format=WeightsFormat.safetensors,
    multi_gpu_supported=False,
    weight_adapters={WeightsFormat.safetensors: convert_weights},
    task=PipelineTask.TEXT_GENERATION,
    config=GPT2ServeConfig,
    batching=Llama3ModuleV3BatchProcessor,
    memory_planner=PagedMemoryPlanner,
    supports_overlap_scheduler=False,
    supports_device_graph_capture=False,
)

#: What ``max serve --custom-architectures`` reads.
ARCHITECTURES = [gpt2_architecture]
