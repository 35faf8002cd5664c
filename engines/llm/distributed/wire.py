"""Rank 0's word to every rank, over the model's own collectives.

Before each step rank 0 shares what changed (requests admitted, cancellations, a load, the
stop), so every rank applies the same changes in the same order and steps the same batch.
Every rank calls `share` at the same point of its loop. A message is pickled (the ranks run
the same code: the gateway's own Python environment) and sent as two `all_sum`s where only
rank 0 contributes: its length, then its bytes.
"""

from __future__ import annotations

import pickle

import mlx.core as mx


def share(group, message: object = None) -> object:
    """Rank 0's `message` on every rank (the others pass None and get rank 0's)."""
    lead = group.rank() == 0
    # The decode loop evaluates the next step ahead (mx.async_eval) on mlx-lm's generation
    # stream: these go on that stream too, after its collectives, or the two interleave on
    # the ranks' connections.
    from mlx_lm.generate import generation_stream

    data = pickle.dumps(message) if lead else b""
    size = mx.distributed.all_sum(
        mx.array([len(data)], dtype=mx.int64), group=group, stream=generation_stream
    )
    size = int(size.item())
    if size == 0:
        return None
    raw = mx.array(memoryview(data), dtype=mx.uint8) if lead else mx.zeros(size, dtype=mx.uint8)
    raw = mx.distributed.all_sum(raw, group=group, stream=generation_stream)
    return pickle.loads(memoryview(raw))


def gather(group, value: int) -> list[int]:
    """Every rank's `value`, in rank order, on every rank."""
    from mlx_lm.generate import generation_stream

    values = mx.distributed.all_gather(
        mx.array([value], dtype=mx.int64), group=group, stream=generation_stream
    )
    return [int(v) for v in values.tolist()]
