"""The course's models as architectures of MAX's server: what ``max serve --custom-architectures`` imports.

MAX's server knows a checkpoint by ``config.json``'s ``architectures[0]`` and looks that name up among the
architectures it was given. An architecture is four things, all here, for GPT-2 (step 25) and the Llama
(step 26):

* a config (:class:`ServeConfig`): the learner's config read from config.json, and the KV cache MAX must allocate
  for it (GPT-2: one key/value head a query head; the Llama: its key/value heads; float32 on the CPU);
* a pipeline model (:class:`CoursePipelineModel`): loads the checkpoint's weights through the learner's weights
  step (14's or 23's ``convert``), builds the served model under ``F.lazy()`` and compiles it for MAX's inputs:
  ``tokens [N]``, ``return_n_logits``, ``input_row_offsets [B + 1]`` and the paged cache's tensors;
* the batch of inputs: MAX's ragged batch processor, the same one its own Llama uses;
* the registration (:func:`architecture`): the name, the tokenizer, the memory planner.

The served models are imported from the folder in ``$COURSE_SERVE_STEPS`` (the learner's ``steps/``), else from
``solutions/``: MAX's server runs its model in worker processes, and they inherit the variable.
``pixi run serve --model course`` passes this module to ``max serve``; ``--llama course`` passes
:mod:`course.llama_architecture`.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from max.dtype import DType
from max.experimental.tensor import Tensor
from max.graph import DeviceRef
from max.graph.weights import WeightsFormat
from max.nn.kv_cache import KVCacheParams
from max.pipelines.architectures.llama3_modulev3.batch_processor import Llama3ModuleV3BatchProcessor
from max.pipelines.context import TextContext
from max.pipelines.kv_cache.memory_planner import PagedMemoryPlanner
from max.pipelines.lib import ModuleV3Outputs, ModuleV3PipelineModelWithKVCache, SupportedArchitecture, TextTokenizer
from max.pipelines.lib.interfaces.arch_config import ArchConfigWithKVCache, ArchConfigWithStoredKVParams
from max.pipelines.modeling.types import PipelineTask

from course.outline import SERVE_STEPS_VARIABLE, SOLUTIONS, step_path
from course.paged import PagedCache


@dataclass(frozen=True)
class Family:
    """Where a served family's code lives: the step that reads its config and weights, and its served model."""

    weights_step: int
    served_step: int
    model_class: str


GPT2 = Family(weights_step=14, served_step=25, model_class="ServedGPT2")
LLAMA = Family(weights_step=23, served_step=26, model_class="ServedLlama")


def steps_folder() -> Path:
    """Whose code the server runs: ``$COURSE_SERVE_STEPS``, else the course's solutions."""
    return Path(os.environ.get(SERVE_STEPS_VARIABLE) or SOLUTIONS).resolve()


def lesson(number: int):
    """Step ``number``'s module from :func:`steps_folder` (its own imports, ``step_07_attention`` and the rest,
    come from the same folder)."""
    folder = str(steps_folder())
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(step_path(number, SOLUTIONS).stem)


@dataclass(kw_only=True)
class ServeConfig(ArchConfigWithStoredKVParams, ArchConfigWithKVCache):
    """What the graph is built with: the learner's config (step 01's or step 17's, read from config.json by the
    weights step's ``config_from_json``), the dtype, the devices and the cache's sizes."""

    DEFAULT_ENCODING: ClassVar[str] = "float32"
    SUPPORTED_ENCODINGS: ClassVar[set[str]] = {"float32"}
    FAMILY: ClassVar[Family]

    model_config: Any
    dtype: DType
    max_seq_len: int
    kv_params: KVCacheParams
    devices: list[DeviceRef]

    @classmethod
    def heads(cls, config) -> tuple[int, int, int]:
        """The cache's (key/value heads, head_dim, layers) for the learner's ``config``."""
        raise NotImplementedError

    @classmethod
    def convert(cls, arrays: dict[str, np.ndarray], config) -> dict[str, np.ndarray]:
        """The checkpoint's arrays as the learner's model names and lays them out (the weights step's
        ``convert``)."""
        raise NotImplementedError

    @classmethod
    def learner_config(cls, huggingface_config):
        return lesson(cls.FAMILY.weights_step).config_from_json(huggingface_config.to_dict())

    @classmethod
    def construct_kv_params(cls, huggingface_config, pipeline_config, devices, kv_cache_config, cache_dtype,
                            **_: Any) -> KVCacheParams:
        kv_heads, head_dim, layers = cls.heads(cls.learner_config(huggingface_config))
        return kv_cache_config.to_params(dtype=cache_dtype, n_kv_heads=kv_heads, head_dim=head_dim, num_layers=layers,
                                         devices=devices,
                                         data_parallel_degree=pipeline_config.model.data_parallel_degree)

    @classmethod
    def initialize(cls, pipeline_config, model_config=None, *, max_seq_len: int) -> ServeConfig:
        model_config = model_config or pipeline_config.model
        hf = model_config.huggingface_config
        devices = [DeviceRef(spec.device_type, spec.id) for spec in model_config.device_specs]
        return cls(model_config=cls.learner_config(hf), dtype=DType.float32, max_seq_len=max_seq_len,
                   kv_params=cls.construct_kv_params(hf, pipeline_config, devices, model_config.kv_cache,
                                                     DType.float32),
                   devices=devices)


class GPT2ServeConfig(ServeConfig):
    """GPT-2 caches every head: as many key/value heads as query heads, ``n_embd / n_head`` wide."""

    FAMILY = GPT2

    @classmethod
    def heads(cls, config) -> tuple[int, int, int]:
        return config.n_head, config.n_embd // config.n_head, config.n_layer

    @classmethod
    def convert(cls, arrays, config):
        return lesson(cls.FAMILY.weights_step).convert(arrays)  # step 14's needs no config


class LlamaServeConfig(ServeConfig):
    """The Llama caches its key/value heads only (grouped-query attention)."""

    FAMILY = LLAMA

    @classmethod
    def heads(cls, config) -> tuple[int, int, int]:
        return config.num_key_value_heads, config.head_dim, config.num_hidden_layers

    @classmethod
    def convert(cls, arrays, config):
        return lesson(cls.FAMILY.weights_step).convert(arrays, config)  # step 23's reads tie_word_embeddings


def served_model_class(family: Family):
    """The family's served model (step 25's or 26's) under a root that takes MAX's inputs as the compiled graph
    receives them."""
    served = getattr(lesson(family.served_step), family.model_class)

    class Root(served):
        def __init__(self, config: ServeConfig):
            super().__init__(config.model_config)
            self._kv_params = config.kv_params

        def forward(self, tokens: Tensor, return_n_logits: Tensor, input_row_offsets: Tensor,
                    *cache_inputs: Tensor) -> ModuleV3Outputs:
            del return_n_logits  # one row a sequence: its last token's
            logits = super().forward(tokens, PagedCache.from_inputs(self._kv_params, cache_inputs), input_row_offsets)
            return ModuleV3Outputs(next_token_logits=logits)

    return Root


class CoursePipelineModel(ModuleV3PipelineModelWithKVCache[TextContext]):
    """Loads the checkpoint through the learner's weights step, builds the served model and compiles it."""

    batch_processor_cls: ClassVar[type[Any]] = Llama3ModuleV3BatchProcessor

    def _load_state_dict(self) -> dict[str, np.ndarray]:
        """The checkpoint's tensors as the learner's model names and lays them out (step 14's or 23's
        ``convert``)."""
        arrays = {name: np.from_dlpack(weights.data().data) for name, weights in self.weights.items()}
        state = self.arch_config.convert(arrays, self.arch_config.model_config)
        return {name: np.ascontiguousarray(value) for name, value in state.items()}

    def _create_model_config(self, state_dict: dict[str, Any]) -> ServeConfig:
        del state_dict
        return self.arch_config

    def _module_default_dtype(self, state_dict, model_config) -> DType:
        return DType.float32

    def _instantiate_module(self, model_config: ServeConfig):
        model = served_model_class(model_config.FAMILY)(model_config)
        model.to(self.devices[0])
        return model


class GPT2PipelineModel(CoursePipelineModel):
    model_config_cls: ClassVar[type[Any]] = GPT2ServeConfig


class LlamaPipelineModel(CoursePipelineModel):
    model_config_cls: ClassVar[type[Any]] = LlamaServeConfig


def architecture(name: str, pipeline_model, config) -> SupportedArchitecture:
    """A registration: ``name`` is what config.json's ``architectures[0]`` must say."""
    return SupportedArchitecture(
        name=name, example_repo_ids=[], default_encoding="float32", supported_encodings={"float32"},
        pipeline_model=pipeline_model, tokenizer=TextTokenizer, context_type=TextContext,
        default_weights_format=WeightsFormat.safetensors, multi_gpu_supported=False,
        task=PipelineTask.TEXT_GENERATION, config=config, batching=Llama3ModuleV3BatchProcessor,
        memory_planner=PagedMemoryPlanner, supports_overlap_scheduler=False, supports_device_graph_capture=False)


gpt2_architecture = architecture("GPT2LMHeadModel", GPT2PipelineModel, GPT2ServeConfig)
#: Registered under MAX's own Llama's name: in a server given it, the course's Llama replaces MAX's.
llama_architecture = architecture("LlamaForCausalLM", LlamaPipelineModel, LlamaServeConfig)

#: What ``max serve --custom-architectures ROOT:course.architectures`` reads: GPT-2 only, so that a Llama still
#: runs on MAX's own (``course.llama_architecture`` has the course's Llama).
ARCHITECTURES = [gpt2_architecture]
