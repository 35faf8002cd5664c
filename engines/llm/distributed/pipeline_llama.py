"""Pipeline parallelism for mlx-lm's llama family, in the shape of mlx-lm's own.

mlx-lm pipelines qwen2, deepseek and others (`models/pipeline.py`'s `PipelineMixin`), not
llama yet. This module is that change for llama, written so that it could move upstream as
is: `LlamaModel` gains the mixin, and its `__call__` receives the hidden state from the
rank before it, runs its own layers and passes the result on, as `qwen2.Qwen2Model` does.
`Model.layers` names the layers this rank holds, so `make_cache` and mlx-lm's generators
make a cache for those alone. Load through `get_model_classes` (mlx_lm.utils.load_model).

Ranks run the layers in reverse: the highest rank embeds the tokens and runs the first
layers, rank 0 runs the last ones; the final hidden state is gathered to every rank, so
every rank computes the same logits and samples the same token.
"""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models import llama
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import KVCache, RotatingKVCache
from mlx_lm.models.pipeline import PipelineMixin


class LlamaModel(llama.LlamaModel, PipelineMixin):
    # The mixin after llama's model: llama's __init__ takes the args, then the mixin's runs.
    def __init__(self, args: llama.ModelArgs):
        super().__init__(args)
        # llama's __init__ does not chain to the mixin's: its defaults (one stage, all layers).
        self.pipeline_rank, self.pipeline_size = 0, 1
        self.start_idx, self.end_idx = 0, None
        self._received = None  # the hidden state's dtype between ranks (`_hidden_dtype`)

    def __call__(self, inputs: mx.array, cache=None, input_embeddings: mx.array | None = None):
        h = input_embeddings if input_embeddings is not None else self.embed_tokens(inputs)
        layers = self.pipeline_layers
        if cache is None:
            cache = [None] * len(layers)
        # This rank's layers only: its first full and sliding layers give the masks.
        full = next((i for i, layer in enumerate(layers) if not layer.use_sliding), None)
        sliding = next((i for i, layer in enumerate(layers) if layer.use_sliding), None)
        full_mask = create_attention_mask(h, cache[full]) if full is not None else None
        sliding_mask = None
        if sliding is not None:
            sliding_mask = create_attention_mask(h, cache[sliding], window_size=self.sliding_window)

        rank, size = self.pipeline_rank, self.pipeline_size
        if rank < size - 1:  # the rank before this one ran the earlier layers
            h = mx.distributed.recv(h.shape, self._hidden_dtype(h), rank + 1)
        for layer, c in zip(layers, cache, strict=True):
            h = layer(h, sliding_mask if layer.use_sliding else full_mask, cache=c)
        if rank != 0:
            h = mx.distributed.send(h, (rank - 1) % size)
            if cache[-1] is not None:  # the send must run before the next step's
                cache[-1].keys = mx.depends(cache[-1].keys, h)
        if size > 1:  # every rank gets the last layer's output, kept in the graph
            h = mx.distributed.all_gather(h)[: h.shape[0]]
        return self.norm(h)

    def _hidden_dtype(self, h: mx.array) -> mx.Dtype:
        """The dtype a layer's output has: the rank before sends that, not the embedding's
        (a GGUF's float32 norms turn float16 embeddings into a float32 hidden state). Read
        from a graph that is never evaluated."""
        if self._received is None:
            probe = mx.zeros((1, 1, h.shape[-1]), dtype=h.dtype)
            self._received = self.pipeline_layers[0](probe, None).dtype
        return self._received


class Model(llama.Model):
    def __init__(self, args: llama.ModelArgs):
        super().__init__(args)
        self.model = LlamaModel(args)

    @property
    def layers(self):
        return self.model.pipeline_layers

    def make_cache(self):
        return [
            RotatingKVCache(max_size=self.model.sliding_window) if layer.use_sliding else KVCache()
            for layer in self.layers
        ]


ModelArgs = llama.ModelArgs


def model_classes(config: dict):
    """`get_model_classes` for `mlx_lm.utils.load_model`: this module's classes for a llama
    checkpoint; mlx-lm's own for any other architecture."""
    from mlx_lm.utils import _get_classes

    if config.get("model_type") == "llama":
        return Model, ModelArgs
    return _get_classes(config)
