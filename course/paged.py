"""MAX's paged KV cache, as step 25 uses it: the one place the course touches MAX's cache kernels.

MAX's server keeps every request's keys and values in pages of one pool. A graph sees that pool as a
:class:`PagedCache`: the blocks themselves (``[pages, 2, layers, page_size, heads, head_dim]``), the page table
(``lookup_table [B, pages a request]``), how many tokens each request has cached (``cache_lengths [B]``), and the
batch's longest prompt and cache. Two kernels work on it: one writes a layer's new keys or values into the pages
of their requests (``mo.kv_cache.store.paged.ragged``), one attends every query to its own request's cached keys
(``mo.mha.ragged.paged``, flash attention with the causal mask built inside the kernel).

These are MAX's graph kernels as ``max.nn.kernels`` declares them, wrapped for the ``max.experimental`` tensors the
course's steps use. If a MAX release renames them, this module is what breaks, and
``tests/test_step_25_serving.py`` says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from max.driver import CPU
from max.dtype import DType
from max.experimental import functional as F
from max.experimental.tensor import Tensor
from max.nn import kernels
from max.nn.attention import MHAMaskVariant
from max.nn.kv_cache import KVCacheParams
from max.nn.kv_cache import PagedCacheValues

_store_k = F.functional(kernels.store_k_cache_ragged)
_store_v = F.functional(kernels.store_v_cache_ragged)
_attend = F.functional(kernels.flash_attention_ragged)


@dataclass
class PagedCache:
    """One device's paged KV cache in a graph: MAX's cache values and the sizes it was made with."""

    values: PagedCacheValues
    params: KVCacheParams

    @property
    def cache_lengths(self):
        """How many tokens each request of the batch already has in the cache, [B] uint32."""
        return self.values.cache_lengths

    @classmethod
    def from_inputs(cls, params: KVCacheParams, cache_inputs) -> PagedCache:
        """The cache from a compiled graph's flat cache inputs, in the order ``params.get_symbolic_inputs()`` gives
        them (MAX's server and :class:`RaggedRunner` both pass them so)."""
        from max import tree
        from max.nn.kv_cache import KVCacheInputsPerDevice

        values = tree.leaves(params.unflatten_kv_inputs(iter(x._graph_value for x in cache_inputs)),
                             leaf=KVCacheInputsPerDevice)[0]
        return cls(values, params)


def _layer(layer: int) -> Tensor:
    return F.constant(layer, DType.uint32, device=CPU())


def store_paged(cache: PagedCache, layer: int, k: Tensor, v: Tensor, input_row_offsets: Tensor) -> None:
    """Writes layer ``layer``'s new keys and values, ``[N, heads, head_dim]`` each, into their requests' pages, after
    what each request has cached (a graph side effect: nothing is returned)."""
    index = _layer(layer)
    _store_k(cache.values, k, input_row_offsets, index)
    _store_v(cache.values, v, input_row_offsets, index)


def attend_paged(cache: PagedCache, layer: int, q: Tensor, input_row_offsets: Tensor, scale: float) -> Tensor:
    """Causal attention of the queries ``q [N, heads, head_dim]`` to layer ``layer``'s cached keys and values, each
    token to its own request's only: ``[N, heads, head_dim]``."""
    return _attend(cache.params, input=q, input_row_offsets=input_row_offsets, kv_collection=cache.values,
                   layer_idx=_layer(layer), mask_variant=MHAMaskVariant.CAUSAL_MASK, scale=scale)


class PagePool:
    """A paged KV cache outside MAX's server: the pool of pages, each request's page table and length, and the
    cache inputs of one forward pass, as MAX's own cache manager hands them to a graph. The course's checks and
    experiments run step 25's model in one process with it; MAX's server uses its own manager.

    Page 0 is MAX's null page and never handed out. ``pages`` counts the rest."""

    def __init__(self, params: KVCacheParams, pages: int):
        self.params = params
        self.buffers = params.allocate_buffers(pages + 1)
        self.free = list(range(1, pages + 1))
        self.tables: dict[object, list[int]] = {}
        self.lengths: dict[object, int] = {}

    @classmethod
    def for_model(cls, n_kv_heads: int, head_dim: int, n_layers: int, pages: int, page_size: int = 128) -> PagePool:
        """A float32 pool on the CPU for a model of these sizes, in pages of ``page_size`` tokens."""
        from max.graph import DeviceRef
        from max.nn.kv_cache.cache_params import MHAKVCacheParams

        # max.nn's own parameters, as MAX's server builds them (KVCacheConfig.to_params): max.pipelines would need
        # the `serve` extra, and a step's check runs without it.
        params = MHAKVCacheParams(dtype=DType.float32, n_kv_heads=n_kv_heads, head_dim=head_dim, num_layers=n_layers,
                                  devices=[DeviceRef.CPU()], page_size=page_size)
        return cls(params, pages)

    def symbolic_inputs(self) -> list:
        """The cache's graph inputs, in the order the compiled graph takes them."""
        from max import tree

        return list(tree.leaves(self.params.get_symbolic_inputs()))

    def reserve(self, request, new_tokens: int) -> None:
        """Gives ``request`` the pages its cache needs for ``new_tokens`` more tokens (a new request starts empty)."""
        table = self.tables.setdefault(request, [])
        length = self.lengths.setdefault(request, 0)
        needed = -(-(length + new_tokens) // self.params.page_size) - len(table)
        if needed > len(self.free):
            raise MemoryError(f"the pool has {len(self.free)} free pages; request {request!r} needs {needed}")
        table.extend(self.free.pop(0) for _ in range(needed))

    def release(self, request) -> None:
        """Gives a finished request's pages back to the pool."""
        self.free.extend(self.tables.pop(request))
        self.lengths.pop(request)

    def inputs(self, batch: dict[object, int]) -> list:
        """The cache's runtime inputs for one forward pass over ``batch`` (request -> how many new tokens it brings,
        in the order of the batch's rows), its pages reserved first. Call :meth:`advance` after the pass."""
        import numpy as np
        from max import tree
        from max.driver import Buffer
        from max.nn.kv_cache.cache_params import BatchCharacteristics, KVCacheAssignments

        for request, new in batch.items():
            self.reserve(request, new)
        rows = list(batch)
        width = max(len(self.tables[r]) for r in rows)
        lookup = np.zeros((len(rows), width), dtype=np.uint32)
        for i, request in enumerate(rows):
            lookup[i, :len(self.tables[request])] = self.tables[request]
        lengths = np.array([self.lengths[r] for r in rows], dtype=np.uint32)
        longest_new = max(batch.values())
        longest = max(self.lengths[r] + batch[r] for r in rows)
        assignment = KVCacheAssignments(
            cache_lengths_by_device=[Buffer.from_numpy(lengths)],
            staged_by_device=[{self.buffers[0].leaf_id: Buffer.from_numpy(lookup)}],
            max_prompt_length=Buffer.from_numpy(np.array([longest_new], dtype=np.uint32)),
            max_cache_length=Buffer.from_numpy(np.array([longest], dtype=np.uint32)),
            batch_characteristics=BatchCharacteristics(batch_size=len(rows), max_prompt_length=longest_new,
                                                       max_cache_valid_length=longest))
        return list(tree.leaves(self.params.build_runtime_inputs([assignment], self.buffers)))

    def advance(self, batch: dict[object, int]) -> None:
        """After a forward pass: each request's cache now holds its new tokens too."""
        for request, new in batch.items():
            self.lengths[request] += new


class RaggedRunner:
    """Step 25's model compiled for a ragged batch on a :class:`PagePool`, run in this process: ``run(batch)``
    takes each request's new token ids and returns each one's next-token logits, its cache grown."""

    def __init__(self, model, pool: PagePool, weights: dict):
        from max.experimental.tensor import TensorType
        from max.graph import DeviceRef

        self.pool = pool

        class Root(type(model)):  # MAX's cache inputs as the graph receives them, as a PagedCache
            def forward(inner, tokens, input_row_offsets, *cache_inputs):  # noqa: N805 - the module is `inner`
                return super().forward(tokens, PagedCache.from_inputs(pool.params, cache_inputs), input_row_offsets)

        model.__class__ = Root
        self.model = model.compile(TensorType(DType.int64, ["total_seq_len"], device=DeviceRef.CPU()),
                                   TensorType(DType.uint32, ["input_row_offsets_len"], device=DeviceRef.CPU()),
                                   *pool.symbolic_inputs(), weights=weights)

    def run(self, batch: dict[object, list[int]]):
        """``batch``: request -> its new token ids (a prompt, or the one token decoded last). Returns the logits
        ``[len(batch), vocab]`` as NumPy, one row a request in the batch's order."""
        import numpy as np
        from max.driver import Buffer

        sizes = {request: len(ids) for request, ids in batch.items()}
        tokens = np.array([t for ids in batch.values() for t in ids], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(list(sizes.values()))]).astype(np.uint32)
        logits = self.model(Buffer.from_numpy(tokens), Buffer.from_numpy(offsets), *self.pool.inputs(sizes))
        self.pool.advance(sizes)
        return np.from_dlpack(logits.driver_tensor if hasattr(logits, "driver_tensor") else logits)
