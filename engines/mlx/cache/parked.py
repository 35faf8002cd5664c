"""Finished conversations' KV caches parked in RAM for prefix reuse (`session_slots`), on
mlx-lm's `LRUPromptCache`: bounded in entries and in bytes (the memory budget counts them
at that limit), a draft model's caches of the same sessions beside them, and the disk tier
(`DiskKV`) under both. A request starts from whichever holds the longest prefix of its
prompt, if that prefix is worth a copy (`reuse_min_tokens`, and half the prompt)."""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

from engines.log import emit
from engines.mlx.cache.disk import DiskHit, DiskKV
from engines.mlx.cache.marked import MarkedPrefixes
from engines.mlx.cache.prefix import parked_prefix
from schemas.events import PrefixNotKept

# The cache trie keys entries by model; one batch serves one model.
CACHE_KEY = "model"


class Parked(NamedTuple):
    """What parking a conversation did: whether it evicted another one (None: nothing was
    parked in RAM), and how many of its first tokens a later request can now read from a
    tier (RAM or disk)."""

    evicted: bool | None
    kept: int


class ParkedCaches:
    def __init__(
        self,
        slots: int,
        max_bytes: int,
        draft_max_bytes: int,
        reuse_min: int,
        disk: DiskKV | None,
        model: str = "",
    ) -> None:
        from mlx_lm.models.cache import LRUPromptCache

        self.ram = LRUPromptCache(max_size=slots, max_bytes=max_bytes) if slots else None
        # Marked prefixes (`cache_control`) take up to all slots but one, and half the bytes:
        # what they hold the parked conversations do without.
        self.marked = MarkedPrefixes(slots - 1, max_bytes // 2) if slots else None
        self._slots, self._max_bytes = slots, max_bytes
        self._model = model  # the model's id, for the events
        # The draft model's caches of the same sessions (`draft:`), parked and found alike.
        self.draft = (
            LRUPromptCache(max_size=slots, max_bytes=draft_max_bytes)
            if slots and draft_max_bytes
            else None
        )
        self._reuse_min = reuse_min
        self.disk = disk
        # The parked conversations, oldest first: the order in which the cache evicts.
        self._parked: OrderedDict[tuple[int, ...], None] = OrderedDict()

    def nearest(self, prompt: list[int]) -> tuple[list | None, list[int], DiskHit | None]:
        """The cache sharing the longest prefix with `prompt` in RAM or on disk, the tokens
        left, and the `DiskHit` when the disk tier's was the longer (else None)."""
        cache, rest = self.nearest_in(prompt, self.ram)
        shortest = max(self._reuse_min, len(prompt) // 2) - 1
        if self.marked is not None and len(self.marked):
            kept, left = self.marked.nearest(prompt, shortest + 1)
            if kept is not None and len(left) < len(rest):
                cache, rest = kept, left
        if self.disk is None:
            return cache, rest, None
        hit = self.disk.find(prompt, longer_than=max(len(prompt) - len(rest), shortest))
        if hit is None:
            return cache, rest, None
        return hit.cache, prompt[hit.tokens :], hit

    def nearest_in(self, prompt: list[int], parked) -> tuple[list | None, list[int]]:
        """The cache in `parked` (`ram`, `draft`, or None) sharing the longest prefix with
        `prompt`, and the tokens left."""
        if parked is None:
            return None, prompt
        from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

        # The trie copies the cache it returns: ask only when a prefix worth it is parked.
        if parked_prefix(parked, CACHE_KEY, prompt) < max(self._reuse_min, len(prompt) // 2):
            return None, prompt
        cache, rest = parked.fetch_nearest_cache(CACHE_KEY, prompt)
        if cache is not None and not rest:
            # An exact hit: the last prompt token must still go through the model.
            if not can_trim_prompt_cache(cache):
                return None, prompt
            trim_prompt_cache(cache, 1)
            rest = prompt[-1:]
        return cache, rest

    def park(self, tokens, cache, draft: tuple | None = None, marks=()) -> Parked:
        """Park a finished conversation's cache (and `draft`: its draft model's tokens fed
        and cache) in RAM and on disk; `marks` ((tokens, ttl seconds) each) are prefixes to
        keep apart (`MarkedPrefixes`), and on disk even where a read would not pay.

        LRUPromptCache lists its entries nowhere public, so this keeps its own list of
        them, in the cache's own order: re-parking moves an entry to the back, entries that
        are prefixes of a trimmable one are superseded (dropped, not evicted), and whatever
        the cache then holds fewer of (past `session_slots` or the byte limit) left from the
        front.
        """
        from mlx_lm.models.cache import can_trim_prompt_cache

        if self.draft is not None and draft is not None:
            fed, draft_cache = draft
            if fed:
                self.draft.insert_cache(CACHE_KEY, list(fed), draft_cache)
        if cache is None:
            self._not_kept([n for n, _ in marks], "the conversation left no cache")
            return Parked(None, 0)
        on_disk = self.disk.save(tokens, cache, force=bool(marks)) if self.disk is not None else 0
        if self.ram is None:
            unkept = [n for n, _ in marks if n > on_disk]
            self._not_kept(unkept, "prefix_reuse is off or session_slots is 0")
            return Parked(None, on_disk)
        import mlx.core as mx

        # A cache extracted from the batch is a lazy slice of the batch's whole KV buffer:
        # parked unevaluated, it would hold that buffer (every sequence's, as it was at this
        # step) alive for as long as it is parked, far past the bytes the cache counts. Its
        # copy is queued now, behind the step in flight, and the buffer let go once it runs.
        mx.async_eval([c.state for c in cache])
        key = tuple(tokens)
        self.ram.insert_cache(CACHE_KEY, list(key), cache)
        self._parked.pop(key, None)
        if can_trim_prompt_cache(cache):
            for older in [k for k in self._parked if key[: len(k)] == k]:
                del self._parked[older]
        self._parked[key] = None
        evicted = False
        while len(self._parked) > len(self.ram):
            self._parked.popitem(last=False)
            evicted = True
        # Bytes past the RAM limit can leave it unparked at once (len(ram) falls short).
        in_ram = len(key) if key in self._parked else 0
        kept = self._keep(tokens, cache, marks)
        return Parked(evicted or kept.evicted, max(in_ram, on_disk, kept.kept))

    def _keep(self, tokens, cache, marks) -> Parked:
        """Keep the marked prefixes; the parked conversations get what they leave (more
        again once marked ones have expired)."""
        longest = 0
        for n, ttl_s in marks:
            if not n:
                self._not_kept([n], "its messages could not be rendered alone")
            elif (why := self.marked.keep(list(tokens[:n]), cache, ttl_s)) is not None:
                self._not_kept([n], why)
            else:
                longest = max(longest, n)
        self.marked.expire()
        ram = self.ram
        ram.max_size = max(1, self._slots - len(self.marked))
        ram.max_bytes = self._max_bytes - self.marked.nbytes
        ram.trim_to(n_sequences=ram.max_size, n_bytes=ram.max_bytes)
        evicted = False
        while len(self._parked) > len(ram):
            self._parked.popitem(last=False)
            evicted = True
        return Parked(evicted, longest)

    def _not_kept(self, marks: list[int], why: str) -> None:
        for tokens in marks:
            emit(PrefixNotKept(model=self._model, tokens=tokens, reason=why))
