"""A bounded hand-off from any thread to one writer thread, taken in batches.

The event loop and the model threads put; a writer (the log's, the activity history's) takes
what has gathered. A put is one C call (`queue.SimpleQueue`, not a lock and a condition in
Python) and never blocks: past `limit` items the item is counted in `dropped` instead. Once
woken, the writer lets items gather for GATHER_S before it drains: a request's few lines
then cost one wake instead of one each, and every wake takes the GIL from the event loop and
the model threads (at a burst of 128 requests the lines come at thousands a second).
"""

from __future__ import annotations

import queue
import time
from typing import Generic, TypeVar

GATHER_S = 0.002

Item = TypeVar("Item")


class Handoff(Generic[Item]):
    def __init__(self, limit: int) -> None:
        self._queue: queue.SimpleQueue[Item] = queue.SimpleQueue()
        self._limit = limit
        self.dropped = 0  # items refused (since the last `take_dropped`)

    def offer(self, item: Item) -> None:
        """Queue `item` unless `limit` items wait already (then it is counted as dropped)."""
        if self._queue.qsize() < self._limit:
            self._queue.put(item)
        else:
            self.dropped += 1

    def put(self, item: Item) -> None:
        """Queue `item` whatever waits (a stop or a flush: few, and they must arrive)."""
        self._queue.put(item)

    def take(self, most: int) -> list[Item]:
        """On the writer: wait for an item, let more gather, then up to `most` of them."""
        batch = [self._queue.get()]
        time.sleep(GATHER_S)
        while len(batch) < most:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return batch

    def take_dropped(self) -> int:
        """The items refused since the last call, counted from zero again."""
        dropped, self.dropped = self.dropped, 0
        return dropped
