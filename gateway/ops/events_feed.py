"""The event log, broadcast in process to whoever watches (the ops page's live feed).

Publishing never waits: each subscriber has its own bounded buffer, and a subscriber that
falls behind (a slow browser) loses its oldest lines and is told how many, while the
gateway and every other subscriber go on.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator

DEFAULT_BUFFER = 512  # lines held per subscriber before the oldest are dropped
DEFAULT_REPLAY = 50  # recent lines a new subscriber starts with


class _Subscriber:
    def __init__(self, buffer: int) -> None:
        self.lines: deque[str] = deque(maxlen=buffer)
        self.dropped = 0
        self.ready = asyncio.Event()


class EventsFeed:
    """Lines in, lines out to every subscriber; bounded everywhere."""

    def __init__(self, buffer: int = DEFAULT_BUFFER, replay: int = DEFAULT_REPLAY) -> None:
        self._buffer = buffer
        self._recent: deque[str] = deque(maxlen=replay)
        self._subscribers: set[_Subscriber] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._closed = False

    def bind(self) -> None:
        """Called on the running loop: subscribers wait on it, other threads' lines hop onto it."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()

    def publish(self, line: str) -> None:
        """Hand a rendered log line to every subscriber; safe from any thread, never blocks."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        if threading.get_ident() == self._loop_thread:
            self._deliver(line)
        else:
            loop.call_soon_threadsafe(self._deliver, line)

    def _deliver(self, line: str) -> None:
        self._recent.append(line)
        for subscriber in self._subscribers:
            if len(subscriber.lines) == subscriber.lines.maxlen:
                subscriber.dropped += 1  # the deque drops the oldest line itself
            subscriber.lines.append(line)
            subscriber.ready.set()

    def close(self) -> None:
        """End every subscription (at shutdown: an open feed must not hold the drain)."""
        self._closed = True
        for subscriber in self._subscribers:
            subscriber.ready.set()

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    async def subscribe(self) -> AsyncIterator[tuple[str | None, int]]:
        """(line, dropped-so-far) pairs, starting with recent lines; (None, n) while idle
        for 15 s, so the caller can send a keep-alive and notice a vanished client."""
        subscriber = _Subscriber(self._buffer)
        subscriber.lines.extend(self._recent)
        subscriber.ready.set()
        self._subscribers.add(subscriber)
        try:
            while not self._closed:
                try:
                    await asyncio.wait_for(subscriber.ready.wait(), 15)
                except TimeoutError:
                    yield None, subscriber.dropped
                    continue
                subscriber.ready.clear()
                while subscriber.lines and not self._closed:
                    yield subscriber.lines.popleft(), subscriber.dropped
        finally:
            self._subscribers.discard(subscriber)
