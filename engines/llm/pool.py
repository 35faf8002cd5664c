"""The KV pool a batch's rows share under `concurrency: auto`: admission by the tokens each
row can reach, not a whole window held for every row.

The memory budget counts `auto`'s streams as whole windows (engines/mlx/sizing.py). On a
long-window model that leaves few of them (an 8B with a 128k window on an 80 GB GPU: 10 of
~34k tokens), while most requests reach a few thousand tokens. So the batch takes up to
`auto`'s ceiling of rows, and those windows' tokens are one pool: a request joins while the
batch, it included, still fits in it; else it waits, and the ones behind it too (FIFO).

mlx-lm's `BatchKVCache` holds one buffer of rows x the longest row's tokens, so what a batch
can come to hold is its row count times its longest reach, not the sum of its reaches.
"""

from __future__ import annotations

from collections.abc import Iterable


def reach(prompt_tokens: int, max_tokens: int) -> int:
    """The tokens of KV cache a request can come to hold: its prompt and every token it
    may still generate (`max_tokens` as resolved: the window's rest where none was asked)."""
    return prompt_tokens + max_tokens


def fits(pool: int | None, rows: Iterable[int], joining: int) -> bool:
    """Whether a request reaching `joining` tokens may join rows reaching `rows` in a pool
    of `pool` tokens (None: no pool, the batch's width is the only bound). A batch with
    nothing decoding takes any request: its window is within the pool."""
    if pool is None:  # read no rows: every admission of a batch without a pool asks
        return True
    rows = list(rows)
    return not rows or (len(rows) + 1) * max(*rows, joining) <= pool
