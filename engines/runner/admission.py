"""The line a model's requests wait in: by priority, then arrival; bounded in depth and time.

Admission order (the runner's `submit` and `_pump` drive it; this queue keeps it):
1. `refuse_when_full` refuses at once with `QueueFull` when `queue.max_depth` requests
   already wait; then `refuse_unable` with `BadRequest` what the engine cannot do.
2. Otherwise `join` places the job by its rank: its arrival time, moved earlier by
   `priority x queue.aging` (the priority its ticket carries: engines/job.py). So a higher
   priority goes first, equal priorities keep arrival order, and waiting ages a request
   upwards: one is never overtaken by a request that arrived more than
   (their priority - its priority) x `queue.aging` after it, so nothing starves.
3. Whenever the engine is ready and free, the runner `take`s the front job and hands it to
   its model thread.
4. A job cancelled while waiting (its client went away) leaves the line without generating:
   `remove` takes it out at once, and `take` passes over one that is still there.
5. A job still waiting after `queue.max_wait` fails with `QueueTimeout` (503 + Retry-After).

A waiting job is only an entry in a list: it holds no thread. The queue lives on the event
loop and is its jobs' only owner until `take` hands one over. Running requests are never
pre-empted: priority orders only who starts next.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
from collections.abc import Callable

from engines.base import Engine
from engines.errors import BadRequest, QueueFull, QueueTimeout
from engines.job import Job
from engines.log import emit
from schemas.canonical import (
    ChatRequest,
    EmbedRequest,
    RerankRequest,
    SpeechRequest,
    TranscribeRequest,
)
from schemas.config import ModelConfig, seconds
from schemas.events import RequestQueued

# How long a refused client is told to wait before retrying, when nothing better is known.
DEFAULT_RETRY_AFTER_S = 1.0


class AdmissionQueue:
    """The waiting jobs of one model, in admission order, each with its `max_wait` timer."""

    def __init__(self, settings: Callable[[], ModelConfig], left: Callable[[], None]) -> None:
        """`settings` gives the model's config as it is now (a reload may retune `queue`);
        `left` is called when a job leaves the line other than by `take`."""
        self._settings = settings
        self._left = left
        # Front first, by (rank, arrival number): see `join`.
        self._waiting: list[tuple[float, int, Job]] = []
        self._expiry: dict[Job, asyncio.TimerHandle] = {}
        self._arrivals = itertools.count()

    def __len__(self) -> int:
        return len(self._waiting)

    def refuse_when_full(self) -> None:
        """Step 1: `QueueFull` (429 + Retry-After) when `queue.max_depth` jobs wait."""
        model = self._settings()
        if len(self._waiting) >= model.queue.max_depth:
            raise QueueFull(
                f"model {model.id!r} has {len(self._waiting)} requests queued "
                f"(queue.max_depth {model.queue.max_depth}); retry later",
                retry_after=DEFAULT_RETRY_AFTER_S,
            )

    def join(self, job: Job, loop: asyncio.AbstractEventLoop) -> None:
        """Step 2: the job's place by rank, and the `max_wait` timer armed (step 5)."""
        model = self._settings()
        priority = job.client.priority
        rank = job.enqueued_at - priority * seconds(model.queue.aging)
        entry = (rank, next(self._arrivals), job)
        position = bisect.bisect(self._waiting, entry[:2], key=lambda e: e[:2])
        self._waiting.insert(position, entry)
        emit(RequestQueued(model=model.id, position=position + 1, priority=priority))
        self._expiry[job] = loop.call_later(seconds(model.queue.max_wait), self._expire, job)

    def take(self) -> Job | None:
        """Step 3: the front job, passing over any cancelled while it waited; None if none."""
        while self._waiting:
            job = self._leave()
            if not job.is_cancelled():  # its client left while it waited: never generate
                return job
        return None

    def remove(self, job: Job) -> bool:
        """Step 4: take `job` out of the line; False when it is not waiting (any more)."""
        if not self._drop(job):
            return False
        self._expiry.pop(job).cancel()
        return True

    def empty_out(self) -> list[Job]:
        """Every waiting job, front first, out of the line (the runner tells each why)."""
        jobs = []
        while self._waiting:
            jobs.append(self._leave())
        return jobs

    def _drop(self, job: Job) -> bool:
        for i, (_, _, waiting) in enumerate(self._waiting):
            if waiting is job:
                del self._waiting[i]
                return True
        return False

    def _leave(self) -> Job:
        job = self._waiting.pop(0)[2]
        self._expiry.pop(job).cancel()
        return job

    def _expire(self, job: Job) -> None:
        """Step 5, on the loop when the job's timer fires."""
        if not self._drop(job):
            return
        del self._expiry[job]
        self._left()
        model = self._settings()
        waited = model.queue.max_wait
        job.outputs.put_nowait(
            QueueTimeout(
                f"model {model.id!r}: waited {waited} in the queue (queue.max_wait)",
                retry_after=seconds(waited),
            )
        )


def refuse_unable(
    engine: Engine,
    model_id: str,
    request: ChatRequest | EmbedRequest | RerankRequest | TranscribeRequest | SpeechRequest,
) -> None:
    """`BadRequest`, before the request queues, for what the engine cannot do (its
    `capabilities`): a chat for an embedding model, an embedding for a chat model. (Images
    for a model that reads none are refused by the door, `engines/chat.py`, with the rest
    of a chat's policy.)"""
    if isinstance(request, EmbedRequest):
        if not engine.capabilities.embed:
            task = engine.capabilities.task
            raise BadRequest(f"model {model_id!r} is a {task} model; it does not embed")
        return
    if isinstance(request, RerankRequest):
        if not engine.capabilities.rerank:
            raise BadRequest(
                f"model {model_id!r} is a {engine.capabilities.task} model; it does not rerank: "
                "send rerank requests to a `task: rerank` or `task: embed` model"
            )
        return
    if isinstance(request, TranscribeRequest):
        if not engine.capabilities.transcribe:
            raise BadRequest(
                f"model {model_id!r} is a {engine.capabilities.task} model; it does not "
                "transcribe audio: send audio to a `task: transcribe` model (Whisper)"
            )
        return
    if isinstance(request, SpeechRequest):
        if not engine.capabilities.speech:
            raise BadRequest(
                f"model {model_id!r} is a {engine.capabilities.task} model; it does not "
                "speak: send text to read aloud to a `task: speech` model (Kokoro)"
            )
        return
    if not engine.capabilities.chat:
        embeds = engine.capabilities.embed
        kind, send = ("an embedding", "embedding") if embeds else ("a reranking", "rerank")
        if engine.capabilities.transcribe:
            kind, send = ("a speech-to-text", "audio transcription")
        if engine.capabilities.speech:
            kind, send = ("a text-to-speech", "speech (/v1/audio/speech)")
        raise BadRequest(
            f"model {model_id!r} is {kind} model; it does not generate text: "
            f"send it {send} requests"
        )
