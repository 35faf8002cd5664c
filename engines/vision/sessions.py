"""Parked conversations of a vision model: KV caches keyed by image-aware cache keys.

A key is the prompt's token ids with image tokens replaced by a hash of the pictures
(`prompt.cache_keys`), so a follow-up about the same pictures finds its conversation and a
different picture never matches past the text before it. The cache itself is handed to
mlx-vlm as a `PromptCacheState` cut to the shared prefix, so mlx-vlm's own comparison of
token ids can never reach past an image that differs.
"""

from __future__ import annotations

from collections import OrderedDict

from engines.mlx.cache.prefix import shared_prefix


class Sessions:
    """Up to `slots` finished conversations, least recently parked evicted first."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._parked: OrderedDict[tuple[int, ...], tuple[list[int], object]] = OrderedDict()

    def take(self, keys: list[int]):
        """A `PromptCacheState` holding the parked conversation that shares the longest prefix
        with `keys` (taken out: it is continued in place), or an empty one; None when off."""
        from mlx_vlm.generate import PromptCacheState

        if not self.slots:
            return None
        best, length = None, 0
        for parked in self._parked:
            shared = shared_prefix(parked, keys)
            if shared > length:
                best, length = parked, shared
        # An exact hit still sends its last prompt token through the model (for the logits).
        length = min(length, len(keys) - 1)
        state = PromptCacheState()
        # mlx-vlm continues a cache only when what is left of the prompt is text; a cache
        # that would not be continued stays parked rather than being used up.
        if best is not None and all(k >= 0 for k in keys[length:]):
            real_ids, cache = self._parked.pop(best)
            state.token_ids, state.cache = real_ids[:length], cache
        return state

    def park(self, prompt_keys: list[int], prompt_length: int, state) -> bool:
        """Keep a finished conversation's cache; True when that evicted another one."""
        generated = state.token_ids[prompt_length:]
        keys = tuple(prompt_keys + generated)
        # Entries that are prefixes of this conversation are superseded, not evicted.
        for old in [k for k in self._parked if keys[: len(k)] == k]:
            del self._parked[old]
        self._parked[keys] = (list(state.token_ids), state.cache)
        evicted = False
        while len(self._parked) > self.slots:
            self._parked.popitem(last=False)
            evicted = True
        return evicted

    def clear(self) -> None:
        self._parked.clear()
