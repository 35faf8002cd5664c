"""What a runner holds per request, and how it paces its model's output."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

from schemas.canonical import ChatRequest, EmbedRequest, Output


class Job:
    """One request in a runner: its place in line, its cancel flag and its own result channel."""

    def __init__(self, request: ChatRequest | EmbedRequest) -> None:
        self.request = request
        self.enqueued_at = time.perf_counter()
        self.started_at: float | None = None
        self.first_token_at: float | None = None
        self.outputs: asyncio.Queue[Output | BaseException] = asyncio.Queue()
        # The request's log context (request_id), for events emitted from the model's thread.
        self.context = contextvars.copy_context()
        self._cancelled = threading.Event()
        self._expiry: asyncio.TimerHandle | None = None

    def cancel(self) -> None:
        self._cancelled.set()

    def is_cancelled(self) -> bool:
        return self._cancelled.is_set()


class Pace:
    """`rate.max_tokens_per_sec`: sleep between steps so the model's output stays under it."""

    def __init__(self, max_tokens_per_sec: float | None) -> None:
        self._rate = max_tokens_per_sec
        self._due = time.perf_counter()

    def wait(self, tokens: int) -> None:
        if not self._rate:
            return
        # Idle time earns at most one step of credit: no burst after a pause.
        step = tokens / self._rate
        self._due = max(self._due, time.perf_counter() - step) + step
        delay = self._due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
