"""Marked prefixes (`cache_control`) on real mlx-lm KV caches: kept apart for their time to
live, read back cut to what a prompt shares, the one expiring soonest dropped past the slots."""

from __future__ import annotations

import time

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import KVCache

from engines.mlx.cache.marked import MarkedPrefixes


def conversation(tokens: int, layers: int = 2) -> list[KVCache]:
    """A cache of `tokens` positions whose values say their position (to check a cut)."""
    cache = []
    for _ in range(layers):
        layer = KVCache()
        positions = mx.arange(tokens, dtype=mx.float32).reshape(1, 1, tokens, 1)
        layer.update_and_fetch(mx.broadcast_to(positions, (1, 2, tokens, 4)), positions * 2)
        cache.append(layer)
    return cache


def test_a_kept_prefix_is_read_back_cut_to_what_the_prompt_shares():
    marked = MarkedPrefixes(slots=3, max_bytes=1 << 30)
    tokens = list(range(100))
    assert marked.keep(tokens[:80], conversation(100), ttl_s=300) is None
    assert marked.nbytes == sum(c.nbytes for c in marked._kept[tuple(tokens[:80])].cache)
    cache, rest = marked.nearest([*tokens[:60], 999, 998], shortest=32)
    assert rest == [999, 998]
    assert [c.offset for c in cache] == [60, 60]
    keys = np.array(cache[0].keys[..., : cache[0].offset, :])
    assert keys[0, 0, :, 0].tolist() == list(range(60))
    # Shorter than `shortest` shared: nothing; the whole prompt kept: one token left to read.
    assert marked.nearest([*tokens[:20], 5], shortest=32) == (None, [*tokens[:20], 5])
    cache, rest = marked.nearest(tokens[:80], shortest=32)
    assert rest == [79] and cache[0].offset == 79


def test_past_its_slots_the_prefix_expiring_soonest_goes_and_expired_ones_are_gone():
    marked = MarkedPrefixes(slots=2, max_bytes=1 << 30)
    a, b, c = ([k] * 40 for k in (1, 2, 3))
    assert marked.keep(a, conversation(40), ttl_s=3600) is None
    assert marked.keep(b, conversation(40), ttl_s=60) is None
    assert marked.keep(c, conversation(40), ttl_s=300) is None
    assert len(marked) == 2 and marked.nearest(b, shortest=8)[0] is None  # b expired soonest
    short = MarkedPrefixes(slots=2, max_bytes=1 << 30)
    short.keep(a, conversation(40), ttl_s=0.1)
    time.sleep(0.2)
    assert short.nearest(a, shortest=8) == (None, a) and len(short) == 0


def test_a_longer_prefix_of_the_same_conversation_covers_a_shorter_one():
    marked = MarkedPrefixes(slots=3, max_bytes=1 << 30)
    tokens = list(range(100))
    marked.keep(tokens[:30], conversation(100), ttl_s=300)
    marked.keep(tokens[:90], conversation(100), ttl_s=300)
    assert len(marked) == 1
    cache, rest = marked.nearest([*tokens[:30], 7], shortest=16)
    assert cache[0].offset == 30 and rest == [7]


def test_what_cannot_be_kept_says_why():
    assert "session slot" in MarkedPrefixes(slots=0, max_bytes=1 << 30).keep(
        [1] * 40, conversation(40), ttl_s=300
    )
    assert "memory budget" in MarkedPrefixes(slots=2, max_bytes=10).keep(
        [1] * 40, conversation(40), ttl_s=300
    )
