"""Events of the caches on disk: the KV cache's disk tier (blocks saved, evicted, corrupt,
an unwritable directory, saved rates ignored) and a converted model rebuilt."""

from __future__ import annotations

from schemas.events.base import Event


class CacheRebuilt(Event, tag="cache_rebuilt"):
    """A converted model in the cache was found damaged at load and is being built again."""

    model: str
    path: str
    reason: str


class CacheSaved(Event, tag="cache_saved"):
    """KV cache blocks written to the disk tier (`server.cache`), off the model's thread."""

    model: str
    blocks: int  # blocks written now (those already on disk are not written again)
    tokens: int  # tokens the conversation's cache covers on disk
    bytes: int
    save_s: float
    dir_bytes: int  # the directory's size after the write (and any eviction)


class CacheEvicted(Event, tag="cache_evicted"):
    """Least recently used blocks removed to keep the directory under `max_bytes`."""

    model: str  # whose write pushed the directory past its limit
    blocks: int
    bytes: int
    dir_bytes: int


class CacheCorrupt(Event, tag="cache_corrupt"):
    """A block failed its checksum (cut short, altered): removed; the request prefills."""

    model: str
    block: str
    reason: str


class CacheUnwritable(Event, tag="cache_unwritable"):
    """A write to the disk tier failed (disk full, read-only): RAM-only from now on."""

    model: str
    dir: str
    reason: str


class CacheRatesIgnored(Event, tag="cache_rates_ignored"):
    """The disk tier's saved read-or-prefill rates could not be used: measured again."""

    model: str
    path: str
    reason: str


class PrefixNotKept(Event, tag="cache_prefix_not_kept"):
    """A prefix a client marked to keep (`cache_control`) could not be kept in RAM: too
    few session slots, past its share of the memory budget, a cache that cannot be cut."""

    model: str
    tokens: int  # the prompt tokens the mark covers (0: its messages could not be rendered)
    reason: str
