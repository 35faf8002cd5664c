"""Giving memory back to the machine: MLX keeps freed buffers for reuse, and only returns
them when told."""

from __future__ import annotations


def release_buffers() -> None:
    """Free MLX's cache of buffers: once a runner is idle (batches of every shape fill it)
    and once a model is unloaded, so memory returns to what the loaded models hold."""
    import mlx.core as mx

    mx.clear_cache()
