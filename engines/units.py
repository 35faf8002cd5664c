"""Sizes as the events and errors write them: one leaf that the platform probe, the memory
budget and the window sizing all read, so that none of them imports another for it."""

from __future__ import annotations

GiB = 2**30


def describe(size: int) -> str:
    """`size` bytes in GiB, two decimals: "1.50 GiB"."""
    return f"{size / GiB:.2f} GiB"
