"""A block of the disk tier in MLX and on the host: `BLOCK_TOKENS` tokens of every layer.

Block i of a prompt holds every layer's keys and values for tokens [i·B, (i+1)·B). This
module slices a cache into blocks (`block_of`, `block_bytes`), copies them out of MLX into
numpy as safetensors dtypes (`to_host_all`) and joins blocks back into a cache
(`joined`, `cache_of`), for `KVCache` and `QuantizedKVCache` layers alike. What a block of
a model must hold (`model_layout`: every tensor's name, dtype and shape) is asked of the
model itself, so that a block read from disk is checked against it before any use.
"""

from __future__ import annotations

import numpy as np

# Small enough that the tail a reused prompt must prefill again (under one block, plus the
# new turn) is a small part of a long prompt: at 256, a 2k-token prompt after a restart
# took 0.16x its cold time to the first token on the CPU, most of it the 182-token tail.
BLOCK_TOKENS = 64
# MLX dtypes as safetensors names them; bfloat16 crosses into numpy as raw 16 bits.
DTYPE_NAMES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "uint32": "U32"}


def block_bytes(cache: list) -> int:
    """The bytes one block of `cache` takes, every layer's keys and values."""
    total = 0
    for c in cache:
        for _, array in layer_arrays(c):
            per_token = array.nbytes // array.shape[-2]  # (batch, heads, tokens, dims)
            total += per_token * BLOCK_TOKENS
    return total


def layout_of(cache: list) -> dict[str, tuple[str, tuple[int, ...]]]:
    """What one block of `cache` (a cache holding a token or more) holds: each tensor's
    safetensors dtype and shape, `BLOCK_TOKENS` on the token axis."""
    layout = {}
    for layer, c in enumerate(cache):
        for name, array in layer_arrays(c):
            dtype = DTYPE_NAMES[str(array.dtype).removeprefix("mlx.core.")]
            *outer, _, inner = array.shape  # (batch, heads, tokens, dims)
            layout[f"{layer}.{name}"] = (dtype, (*outer, BLOCK_TOKENS, inner))
    return layout


def model_layout(model, quantized: tuple[int, int] | None = None) -> dict:
    """`layout_of` the cache `model` makes, learnt by reading one token with it (on the
    model's thread: at load); `quantized`: (group size, bits) of a `QuantizedKVCache`."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    mx.eval(model(mx.array([[0]]), cache=cache))
    if quantized:
        group_size, bits = quantized
        cache = [c.to_quantized(group_size=group_size, bits=bits) for c in cache]
    return layout_of(cache)


def block_of(cache: list, index: int) -> dict:
    """Block `index` of every layer, as MLX slices (`to_host_all` copies them out)."""
    start, end = index * BLOCK_TOKENS, (index + 1) * BLOCK_TOKENS
    tensors = {}
    for layer, c in enumerate(cache):
        for name, array in layer_arrays(c):
            tensors[f"{layer}.{name}"] = array[..., start:end, :]
    return tensors


def to_host_all(blocks: dict[str, dict]) -> dict[str, dict]:
    """Blocks (key → name → MLX array, or an already host `(dtype, ndarray)` pair) copied
    into numpy as `(safetensors dtype, ndarray)`, bfloat16 as its raw 16 bits.

    Every slice is evaluated in one `mx.eval` first: converting them one by one waits for
    the device once per array (a 2,048-token conversation of a 30-layer model is 1,920 of
    them, on the model's thread, between two steps of its batch)."""
    import mlx.core as mx

    def host_view(part):
        if isinstance(part, tuple):
            return part
        dtype = DTYPE_NAMES[str(part.dtype).removeprefix("mlx.core.")]
        return dtype, part.view(mx.uint16) if dtype == "BF16" else part

    viewed = {key: {n: host_view(p) for n, p in tensors.items()} for key, tensors in blocks.items()}
    parts = [p for tensors in viewed.values() for _, p in tensors.values()]
    mx.eval([p for p in parts if isinstance(p, mx.array)])
    return {
        key: {n: (dtype, np.array(p, copy=True)) for n, (dtype, p) in tensors.items()}
        for key, tensors in viewed.items()
    }


def joined(blocks: list[dict], name: str):
    """The blocks' arrays under `name`, back in MLX, joined along the token axis."""
    import mlx.core as mx

    parts = []
    for tensors in blocks:
        dtype, array = tensors[name]
        part = mx.array(array)
        parts.append(part.view(mx.bfloat16) if dtype == "BF16" else part)
    return mx.concatenate(parts, axis=2)


def layer_arrays(c) -> list[tuple[str, object]]:
    """A layer cache's arrays by name: a `KVCache`'s keys and values, a `QuantizedKVCache`'s
    packed values, scales and biases of each (its keys and values are such triples)."""
    if isinstance(c.keys, (tuple, list)):
        return [
            (f"{n}.{i}", a)
            for n, kv in (("keys", c.keys), ("values", c.values))
            for i, a in enumerate(kv)
        ]
    return [("keys", c.keys), ("values", c.values)]


def cache_of(blocks: list[dict], quantized: tuple[int, int] | None = None) -> list:
    """One `KVCache` per layer holding the blocks in order (a `QuantizedKVCache` of
    `quantized` = (group size, bits) when given)."""
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache, QuantizedKVCache

    layers = len(blocks[0]) // (6 if quantized else 2)
    cache = []
    for layer in range(layers):
        if quantized:
            c = QuantizedKVCache(*quantized)
            c.keys, c.values = (
                tuple(joined(blocks, f"{layer}.{n}.{i}") for i in range(3))
                for n in ("keys", "values")
            )
            c.offset = c.keys[0].shape[2]
        else:
            c = KVCache()
            c.keys, c.values = joined(blocks, f"{layer}.keys"), joined(blocks, f"{layer}.values")
            c.offset = c.keys.shape[2]
        cache.append(c)
    mx.eval([(c.keys, c.values) for c in cache])
    return cache
