"""Prefixes a client marked to keep (Anthropic's `cache_control`): their KV caches held in
RAM for a time to live, apart from the parked conversations, which other conversations
evict; a later prompt sharing one reads it back however many conversations came between.

Each is a copy of the prefix's own KV (trimmed to it, so a hit costs one copy, as a parked
conversation's does), counted in the parked caches' byte limit and slots
(engines/mlx/cache/parked.py gives them their share)."""

from __future__ import annotations

import copy
import time
from typing import NamedTuple

from engines.mlx.cache.prefix import shared_prefix


class Kept(NamedTuple):
    cache: list
    nbytes: int
    ttl_s: float
    expires: float  # monotonic time; a read moves it on by `ttl_s`, as Anthropic's does


def prefix_copy(cache: list, tokens: int) -> list | None:
    """Each layer's KV for its first `tokens`, copied out of `cache`; None where the cache
    is not a plain `KVCache` (rotating, quantized: not cut this way)."""
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    if any(type(c) is not KVCache or c.offset < tokens for c in cache):
        return None
    kept = []
    for layer in cache:
        copied = KVCache()
        copied.keys, copied.values = (
            mx.contiguous(a[..., :tokens, :]) for a in (layer.keys, layer.values)
        )
        copied.offset = tokens
        kept.append(copied)
    mx.eval([(c.keys, c.values) for c in kept])
    return kept


class MarkedPrefixes:
    """Up to `slots` kept prefixes in at most `max_bytes`, each until its time to live
    passes unread."""

    def __init__(self, slots: int, max_bytes: int) -> None:
        self.slots = slots
        self.max_bytes = max_bytes
        self._kept: dict[tuple[int, ...], Kept] = {}

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes for k in self._kept.values())

    def keep(self, tokens: list[int], cache: list, ttl_s: float) -> str | None:
        """Keep `cache`'s first `len(tokens)` tokens; None when kept, else why not."""
        self.expire()
        key = tuple(tokens)
        if key in self._kept:  # kept already: its time to live starts again
            self._kept[key] = self._kept[key]._replace(expires=time.monotonic() + ttl_s)
            return None
        if self.slots < 1:
            return "no session slot to spare (session_slots: 1 leaves none for marked prefixes)"
        prefix = prefix_copy(cache, len(tokens))
        if prefix is None:
            return "this model's cache cannot be cut at a prefix"
        size = sum(c.nbytes for c in prefix)
        if size > self.max_bytes:
            return f"the prefix's cache ({size} bytes) exceeds the share of the memory budget"
        # A kept prefix of this one is covered by it, once it lives as long.
        expires = time.monotonic() + ttl_s
        for shorter in [k for k, v in self._kept.items() if key[: len(k)] == k]:
            if self._kept[shorter].expires <= expires:
                del self._kept[shorter]
        self._kept[key] = Kept(prefix, size, ttl_s, expires)
        # Past the slots or the bytes, the one expiring soonest goes.
        while len(self._kept) > self.slots or self.nbytes > self.max_bytes:
            del self._kept[min(self._kept, key=lambda k: self._kept[k].expires)]
        return None if key in self._kept else "the marked prefixes kept already live longer"

    def nearest(self, prompt: list[int], shortest: int) -> tuple[list | None, list[int]]:
        """A copy of the kept cache sharing the longest prefix with `prompt` (at least
        `shortest` tokens), trimmed to what they share, and the tokens left; one at least
        is left for the model to read."""
        self.expire()
        best, common = None, 0
        for key in self._kept:
            n = min(shared_prefix(key, prompt), len(prompt) - 1)
            if n > common:
                best, common = key, n
        if best is None or common < shortest:
            return None, prompt
        from mlx_lm.models.cache import trim_prompt_cache

        kept = self._kept[best]
        self._kept[best] = kept._replace(expires=time.monotonic() + kept.ttl_s)
        cache = copy.deepcopy(kept.cache)
        if common < len(best):
            trim_prompt_cache(cache, len(best) - common)
        return cache, prompt[common:]

    def expire(self) -> None:
        now = time.monotonic()
        for key in [k for k, v in self._kept.items() if v.expires <= now]:
            del self._kept[key]

    def clear(self) -> None:
        self._kept.clear()
