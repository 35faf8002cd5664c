"""What a runner holds per request, and how it paces its model's output."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Iterator

from schemas.canonical import (
    ChatRequest,
    Embedded,
    EmbedRequest,
    Finished,
    Output,
    PromptRead,
    ReasoningDelta,
    Reranked,
    RerankRequest,
    SpeechRequest,
    Spoken,
    TextDelta,
    ToolCallOutput,
    Transcribed,
    TranscribeRequest,
)

# Whom to tell of the tokens a key's jobs spend, as they are spent: (key label, tokens,
# seconds of audio transcribed or spoken).
Meter = Callable[[str, int, float], None]


class Job:
    """One request in a runner: its place in line, its cancel flag and its own result channel."""

    def __init__(
        self,
        request: ChatRequest | EmbedRequest | RerankRequest | TranscribeRequest | SpeechRequest,
        meter: Meter | None = None,
    ) -> None:
        self.request = request
        self.enqueued_at = time.perf_counter()
        self.started_at: float | None = None
        self.first_token_at: float | None = None
        # Set by the reader once it took the first token, when the model's thread waits for
        # that (a lone request's: engines/runner/thread.py FIRST_FRAME_WAIT_S).
        self.taken: threading.Event | None = None
        self.outputs: asyncio.Queue[Output | BaseException] = asyncio.Queue()
        self.read: PromptRead | None = None  # how the engine read the prompt, once it said
        # The request's log context (request_id), for events emitted from the model's thread.
        self.context = contextvars.copy_context()
        self._cancelled = threading.Event()
        # The client behind it (its key's label, its priority) rides on the request; its
        # tokens are told to `meter` under that label.
        self.client = request.client
        self._meter = meter if request.client.key is not None else None
        self._spent = 0  # tokens told to the meter so far

    def spend(self, output: Output | BaseException) -> None:
        """On the loop, for each output: a step's output counts as the token it took; the
        last one brings the count to the engine's own total (prompt + completion)."""
        if self._meter is None or self.client.key is None:
            return
        audio = 0.0
        if isinstance(output, Finished | Embedded | Reranked | Transcribed | Spoken):
            made = getattr(output, "new_tokens", 0)
            tokens = max(0, output.prompt_tokens + made - self._spent)
            audio = getattr(output, "audio_seconds", 0.0)
        elif isinstance(output, TextDelta | ReasoningDelta | ToolCallOutput):
            tokens = 1
        else:
            return
        self._spent += tokens
        self._meter(self.client.key, tokens, audio)

    def cancel(self) -> None:
        self._cancelled.set()

    def is_cancelled(self) -> bool:
        return self._cancelled.is_set()


class _Scope:
    """One HTTP request's jobs: their withdrawals, and how many it has still to submit (while
    any, it is on its way)."""

    __slots__ = ("owned", "to_submit")

    def __init__(self) -> None:
        self.owned: list[Callable[[], None]] = []
        self.to_submit = 1


# The current scope (an HTTP request), or None outside any. Shared by every task the
# scope's code starts.
_SCOPE: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar("job_scope", default=None)
# Scopes with jobs still to submit: requests being read, checked and routed on the event
# loop, on their way to some model's queue. Changed on the loop thread only.
_on_their_way = 0


@contextlib.contextmanager
def job_scope() -> Iterator[None]:
    """Jobs submitted inside end with the scope: whatever still waits or runs when it
    exits is withdrawn (a queued job leaves the line, a running one stops within a token).

    The HTTP layer wraps each request in one, so a job lives as long as its request, not
    as long as a result generator that the framework may never start or never close. Until
    its jobs are submitted (`arrived`), the request counts as on its way (`on_their_way`).
    """
    global _on_their_way
    scope = _Scope()
    token = _SCOPE.set(scope)
    _on_their_way += 1
    try:
        yield
    finally:
        _SCOPE.reset(token)
        _settle(scope, scope.to_submit)  # ended, whatever it submitted
        for withdraw in scope.owned:
            withdraw()


def own(withdraw: Callable[[], None]) -> None:
    """Register a job's withdrawal with the current scope, if there is one."""
    scope = _SCOPE.get()
    if scope is not None:
        scope.owned.append(withdraw)


def expect_jobs(count: int) -> None:
    """The current scope's request will submit `count` jobs (its `n` answers, its prompts):
    it stays on its way until the last of them is submitted."""
    scope = _SCOPE.get()
    if scope is not None and scope.to_submit:
        scope.to_submit = max(count, 1)


def arrived() -> None:
    """A job of the current scope's request has reached a model's queue: after its last
    (`expect_jobs`), the request is no longer on its way. Nothing outside a scope."""
    scope = _SCOPE.get()
    if scope is not None:
        _settle(scope, 1)


def _settle(scope: _Scope, jobs: int) -> None:
    """`jobs` of the scope's are submitted (or never will be)."""
    global _on_their_way
    if scope.to_submit:
        scope.to_submit = max(scope.to_submit - jobs, 0)
        if not scope.to_submit:
            _on_their_way -= 1


def on_their_way() -> int:
    """How many requests are being read and routed, no job of theirs submitted yet: a
    model thread holding a lone request waits for company only while some are."""
    return _on_their_way


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
