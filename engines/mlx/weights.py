"""How a model's weights are held and what they weigh: the quantized layers, their bytes, and
their expansion to dense float32 or bfloat16 (engines/platform.py says which is fastest)."""

from __future__ import annotations

# 4-bit weights (plus scales) grow about this much when expanded to float32.
FLOAT32_EXPANSION = 6
# What a platform may expand quantized weights to (PlatformPath.weights).
EXPANDED = ("float32", "bfloat16")


def quantized_layers(model) -> list:
    """(name, module) of every quantized linear or embedding layer."""
    import mlx.nn as nn

    return [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, nn.QuantizedLinear | nn.QuantizedEmbedding)
    ]


def weight_bytes(model) -> int:
    """The bytes of every parameter, as held now (known from the shapes: nothing is computed)."""
    from mlx.utils import tree_flatten

    return sum(v.nbytes for _, v in tree_flatten(model.parameters()))


def expansion_bytes(model, element: int) -> int:
    """How much the weights grow when every quantized layer becomes `element`-byte values
    (known from the shapes: nothing is computed)."""
    grown = 0
    for _, module in quantized_layers(model):
        rows, packed = module.weight.shape
        dense = rows * packed * 32 // module.bits * element
        held = sum(getattr(module, k).nbytes for k in ("weight", "scales", "biases") if k in module)
        grown += dense - held
    return grown


def held_element(model, weights: str) -> int:
    """Bytes per value of a cache beside weights held as `weights`: float32 or bfloat16 when
    expanded to it, else the model's own floating dtype (a quantized model's scales)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    if weights in EXPANDED:
        return 4 if weights == "float32" else 2
    floating = (
        v for _, v in tree_flatten(model.parameters()) if mx.issubdtype(v.dtype, mx.floating)
    )
    return next(floating).dtype.size


def expand_quantized(model, dtype: str = "float32") -> None:
    """Replace quantized layers by dense ones of `dtype` (one of EXPANDED): faster on the
    CPU and, for batches, on CUDA (see engines/platform.py)."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_unflatten

    dtype = getattr(mx, dtype)
    swaps = []
    for name, module in quantized_layers(model):
        weight = mx.dequantize(
            module.weight, module.scales, module.biases, module.group_size, module.bits
        ).astype(dtype)
        if isinstance(module, nn.QuantizedLinear):
            dense = nn.Linear(weight.shape[1], weight.shape[0], bias="bias" in module)
            if "bias" in module:
                dense.bias = module.bias.astype(dtype)
        else:
            dense = nn.Embedding(weight.shape[0], weight.shape[1])
        dense.weight = weight
        swaps.append((name, dense))
    if swaps:
        model.update_modules(tree_unflatten(swaps))
