"""How long two token sequences run alike from their start."""

from __future__ import annotations

from collections.abc import Sequence


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the common prefix of `a` and `b`."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
