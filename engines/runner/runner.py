"""One runner per model: its engine, the one thread that touches it, and its FIFO queue."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import math
import queue
import time
from collections import deque
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

from engines.backoff import Backoff
from engines.base import Engine, EngineState
from engines.batch import Batch
from engines.download import (
    DownloadStopped,
    DownloadThrottle,
    SourceFetch,
    downloading_event,
    report_downloaded,
)
from engines.errors import (
    BadRequest,
    GatewayError,
    ModelUnavailable,
    QueueFull,
    QueueTimeout,
)
from engines.job import Job, own
from engines.log import emit
from engines.residency import MemoryBudget
from engines.runner.thread import ModelThread
from engines.sources.hub_client import FileProgress
from engines.tasks import Tasks
from schemas.canonical import (
    ChatRequest,
    Embedded,
    EmbedRequest,
    Finished,
    Output,
    request_images,
)
from schemas.config import ModelConfig, seconds
from schemas.events import (
    ContextBeyondTraining,
    ModelAttached,
    ModelDetached,
    ModelFailed,
    ModelLoading,
    RequestQueued,
)

# How long a refused client is told to wait before retrying, when nothing better is known.
DEFAULT_RETRY_AFTER_S = 1.0


def refuse_images(engine: Engine, model_id: str, request: ChatRequest | EmbedRequest) -> None:
    """`BadRequest` for images sent to an engine that reads none (`reads_images` unset), before
    the request queues; a vision engine refuses them itself when its vision is disabled."""
    images = request_images(request) if isinstance(request, ChatRequest) else []
    if images and not getattr(engine, "reads_images", False):
        # "Could not process image" first: Anthropic's wording, which Claude Code recovers
        # from by sending the conversation again without the images.
        raise BadRequest(
            f"Could not process image: model {model_id!r} reads text only; send images to a "
            f"vision model ({images[0].where or 'an image'})"
        )


class Runner(ModelThread):
    """Admits a model's requests in arrival order and runs them on the model's own thread.

    Admission order:
    1. `submit` refuses at once with `QueueFull` when `queue.max_depth` requests already wait.
    2. Otherwise the job joins the back of the line; nothing overtakes it.
    3. Whenever the engine is ready and free, the front job is handed to the runner's thread.
    4. A job cancelled while waiting (its client went away) leaves the line without generating.
    5. A job still waiting after `queue.max_wait` fails with `QueueTimeout` (503 + Retry-After).
    A waiting job is only an entry in a deque: it holds no thread. All queue state lives on
    the event loop; the thread only runs the engine and posts outputs back.

    Residency: a pinned model loads at `start` and stays; an on-demand one loads when its
    first request arrives (that request waits in the line meanwhile; concurrent first
    requests share the one load) and unloads after `idle_ttl` without requests. Loading
    first downloads what `fetch` says is missing (an `hf:` source), then makes room in the
    shared memory budget.

    A model that failed to load (FAILED) is loaded again by `load(retry=True)` (the admin
    route, a reload), and an on-demand one also by the first request after a back-off.
    """

    def __init__(
        self,
        model: ModelConfig,
        engine: Engine,
        budget: MemoryBudget | None = None,
        fetch: SourceFetch | None = None,
    ):
        self.model = model
        self.engine = engine
        self.state = EngineState.UNLOADED
        self.error: str | None = None
        self._fetch = fetch
        self.download = None  # the file arriving now (hub.FileProgress) while DOWNLOADING
        self.source_detail: dict[str, str] = {}  # the hub revision and commit, once fetched
        self.context: int | None = None
        self.memory_bytes = 0
        self.last_used = time.monotonic()
        self._budget = budget
        self._waiting: deque[Job] = deque()
        self._running = 0
        # Admitted jobs cross to the model's thread here; only that thread reads it.
        self._inbox: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._in_batch: set[Job] = set()  # touched only on the model's thread
        self._batch: Batch | None = None  # made and used only on the model's thread
        self._serving = False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"runner-{model.id}")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._context = contextvars.copy_context()  # replaced by `bind`'s
        self._loading: asyncio.Future[None] | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._closed: str | None = None  # why this runner admits no more requests
        self._idle = asyncio.Event()
        self._idle.set()
        self._tasks = Tasks()  # background loads and unloads, kept and watched
        self._holds = 0  # requests between admission and their end (see `hold`)
        # A failed on-demand model is tried again by the first request after a back-off that
        # doubles with each failure in a row (a model that cannot load is not hammered by
        # every request, and one whose cause went away comes back by itself).
        self._load_backoff = Backoff()
        self._retry_at = 0.0
        self._after: asyncio.Future[None] | None = None  # a load waits for this first
        # Ollama's `keep_alive`: the idle seconds the latest Ollama request asked for (inf:
        # stay), in place of `residency.idle_ttl`; None follows the config. Pinned: unused.
        self.keep_alive: float | None = None

    def idle_ttl(self) -> float:
        """Seconds an idle on-demand model stays loaded: `keep_alive`, else `idle_ttl`."""
        if self.model.pinned:
            return math.inf
        if self.keep_alive is not None:
            return self.keep_alive
        return seconds(self.model.residency.idle_ttl)

    @property
    def queue_depth(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        return self._running

    @property
    def _busy(self) -> bool:
        """Something waits, runs, or holds the model: it must not unload."""
        return bool(self._running or self._waiting or self._holds)

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        """Keep the model loaded while a request is served outside the queue (counting
        and fitting its prompt before it joins the line): no idle unload, eviction or
        admin unload comes in between. The hold also ends with the caller's job scope (its
        HTTP request), should the block never be left (a generator nobody closes)."""
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._holds -= 1
                self._settle()

        self._holds += 1
        self._touch()
        self._idle.clear()
        own(release)
        try:
            yield
        finally:
            release()

    @property
    def evictable(self) -> bool:
        """Loaded, not pinned, and with nothing waiting or running."""
        return (
            self.state is EngineState.READY
            and not self.model.pinned
            and not self._running
            and not self._waiting
            and not self._holds
        )

    def unloads_in(self) -> float | None:
        """Seconds until the idle unload, for an on-demand model; None when it never will."""
        ttl = self.idle_ttl()
        if self.model.pinned or math.isinf(ttl):
            return None
        if self._busy or self.state is not EngineState.READY:
            return ttl
        return max(0.0, self.last_used + ttl - time.monotonic())

    async def start(self) -> None:
        """Bind to the running loop; pinned models load now, on-demand ones at first use."""
        self.bind()
        if self.model.pinned:
            await self.load()

    def bind(self, *, after: asyncio.Future[None] | None = None) -> None:
        """Bind to the running loop without loading; any load first waits for `after`.

        A reload uses `after` for a changed model that cannot fit beside its old runner:
        the new runner takes requests at once (they wait in its queue) and loads once the
        old one has drained and let go of its memory.
        """
        self._loop = asyncio.get_running_loop()
        # The context of whoever started the runner (the app's lifespan: its event listeners,
        # engines/log.py). Work the model's thread posts back, and timers, run in it, so
        # their events reach the same listeners as a request's.
        self._context = contextvars.copy_context()
        self._after = after

    def submit(self, request: ChatRequest | EmbedRequest) -> Job:
        """Put a request at the back of the line, or refuse it at once."""
        if self._closed:
            raise ModelUnavailable(f"model {self.model.id!r} was {self._closed}; retry")
        if self.state is EngineState.FAILED:
            self._refuse_failed()
        if len(self._waiting) >= self.model.queue.max_depth:
            raise QueueFull(
                f"model {self.model.id!r} has {len(self._waiting)} requests queued "
                f"(queue.max_depth {self.model.queue.max_depth}); retry later",
                retry_after=DEFAULT_RETRY_AFTER_S,
            )
        refuse_images(self.engine, self.model.id, request)
        job = Job(request)
        own(functools.partial(self._withdraw, job))  # it ends with its caller's scope
        self._waiting.append(job)
        self._touch()
        emit(RequestQueued(model=self.model.id, position=len(self._waiting)))
        job._expiry = self._loop.call_later(seconds(self.model.queue.max_wait), self._expire, job)
        if self.state in (EngineState.UNLOADED, EngineState.FAILED):
            self._tasks.spawn(self.load(retry=True), f"load {self.model.id}")
        self._pump()
        return job

    def _refuse_failed(self) -> None:
        """A FAILED model refuses, unless it is on demand and its back-off has passed."""
        wait = self._retry_at - time.monotonic()
        if not self.model.pinned and wait <= 0:
            return  # the caller queues the request and the load is tried again
        refused = ModelUnavailable(f"model {self.model.id!r} failed to load: {self.error}")
        if not self.model.pinned:
            refused.retry_after = round(max(wait, DEFAULT_RETRY_AFTER_S), 1)
        raise refused

    async def count_prompt(self, request: ChatRequest) -> int:
        """Tokens in the rendered prompt, without queueing behind generations.

        Rendering and tokenizing touch no MLX state, so a worker thread other than the
        model's may do it while the model generates. The model is held meanwhile.
        """
        refuse_images(self.engine, self.model.id, request)
        async with self.hold():
            if self.state is not EngineState.READY:
                await self.load()
            if self.state is not EngineState.READY:
                raise ModelUnavailable(f"model {self.model.id!r} is not available: {self.error}")
            return await asyncio.to_thread(self.engine.count_prompt, request)

    async def results(self, job: Job) -> AsyncIterator[Output]:
        """The job's outputs as they come; leaving early (client gone) cancels the job."""
        try:
            while True:
                item = await job.outputs.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if isinstance(item, Finished | Embedded):
                    return
        finally:
            self._withdraw(job)

    async def load(self, *, retry: bool = False) -> None:
        """Load the model if it is not loaded; every caller waits for the same one load.

        A FAILED model is tried again only with `retry` (the admin route, a reload, an
        on-demand request after the back-off).
        """
        if self.state is EngineState.READY:
            return
        if self.state is EngineState.FAILED and not retry:
            return
        if self._loading is None:
            self._loading = asyncio.ensure_future(self._load())
        await asyncio.shield(self._loading)

    def forget_failure(self) -> None:
        """After a failed load whose cause is gone (its files downloaded since): the next
        request loads again instead of being refused with the old error."""
        if self.state is EngineState.FAILED:
            self.state, self.error = EngineState.UNLOADED, None

    async def unload(self, reason: str) -> bool:
        """Unload now if nothing waits or runs; False when busy (or not loaded)."""
        if self.state is not EngineState.READY or self._busy:
            return False
        self.state = EngineState.UNLOADED
        await self._loop.run_in_executor(self._executor, self._drop_weights)
        if self._budget:
            self._budget.release(self)
        emit(ModelDetached(model=self.model.id, reason=reason))
        return True

    async def stop(self, reason: str, *, finish_queued: bool = False) -> None:
        """Admit nothing more, let what runs finish, unload, and end the model's thread.

        Requests still waiting get a clear 503 — unless `finish_queued` (a model replaced by
        a reload finishes everything it admitted on its old runner).
        """
        self._closed = reason
        if self._idle_timer:
            self._idle_timer.cancel()
        while self._waiting and not finish_queued:
            job = self._waiting.popleft()
            job._expiry.cancel()
            job.outputs.put_nowait(ModelUnavailable(f"model {self.model.id!r} was {reason}"))
        self._settle()
        if self._loading:
            await asyncio.gather(self._loading, return_exceptions=True)
        await self._idle.wait()
        if not await self.unload(reason):
            self.state = EngineState.UNLOADED
        self._executor.shutdown(wait=False)

    def _drop_weights(self) -> None:
        self._batch = None
        self.engine.unload()

    async def _load(self) -> None:
        self.state = EngineState.LOADING
        self.error = None
        if self._after is not None:  # the runner this one replaces must let go first
            await asyncio.gather(self._after, return_exceptions=True)
            self._after = None
        emit(ModelLoading(model=self.model.id))
        started = time.perf_counter()
        try:
            if self._fetch is not None:
                await self._download()
            left = None
            if self._budget:
                needed = self.memory_bytes or await self._loop.run_in_executor(
                    self._executor, self.engine.estimate_memory
                )
                left = await self._budget.make_room(self, needed)
            # In (a copy of) the context the runner was bound in: an engine whose load starts
            # threads of its own (engine upstream) emits its events to this app's listeners.
            load = self._context.copy().run
            info = await self._loop.run_in_executor(self._executor, load, self.engine.load, left)
        except Exception as error:  # any load failure is this model's alone
            if self._budget:
                self._budget.release(self)  # the reservation, if it got one
            self.state = EngineState.FAILED
            self.error = error.message if isinstance(error, GatewayError) else repr(error)
            self._retry_at = time.monotonic() + self._load_backoff.next_delay(0.0)
            emit(ModelFailed(model=self.model.id, error=self.error), level="error")
            self._fail_waiting()
            return
        finally:
            self._loading = None
        self.state = EngineState.READY
        self._load_backoff.reset()
        self.context, self.memory_bytes = info.context, info.memory_bytes
        if self._budget:
            self._budget.hold(self, info.memory_bytes)
        emit(
            ModelAttached(
                model=self.model.id,
                load_s=round(time.perf_counter() - started, 3),
                memory_bytes=info.memory_bytes,
                context=info.context,
                detail={**info.detail, **self.source_detail},
            )
        )
        if info.trained_context and info.context > info.trained_context:
            emit(
                ContextBeyondTraining(
                    model=self.model.id, context=info.context, trained=info.trained_context
                ),
                level="warning",
            )
        self._pump()
        self._settle()

    async def _download(self) -> None:
        """Fetch the hub sources not in the cache, on the model's thread (state DOWNLOADING
        while bytes arrive); a failure raises `SourceError` into the load's own handler."""
        throttle, started = DownloadThrottle(), time.perf_counter()

        def arrived(progress: FileProgress) -> None:  # on the loop, posted by the download
            if self.state in (EngineState.LOADING, EngineState.DOWNLOADING):
                self.state, self.download = EngineState.DOWNLOADING, progress
                if throttle.ready():
                    emit(downloading_event(self.model.id, progress))

        def report(progress: FileProgress) -> None:  # on the download thread, per chunk
            if self._closed:  # stopping (shutdown, reload, removal): abandon the transfer
                raise DownloadStopped(f"download stopped: the model was {self._closed}")
            self._loop.call_soon_threadsafe(arrived, progress, context=self._context)

        try:
            snapshots = await self._loop.run_in_executor(self._executor, self._fetch, report)
        finally:
            self.state, self.download = EngineState.LOADING, None
        self.source_detail = report_downloaded(self.model.id, self._fetch, snapshots, started)

    def _pump(self) -> None:
        """Admit from the front of the line while the batch has room (`concurrency`)."""
        while (
            self.state is EngineState.READY
            and self._running < self.model.concurrency
            and self._waiting
        ):
            job = self._waiting.popleft()
            job._expiry.cancel()
            if job.is_cancelled():  # its client left while it waited: never generate
                continue
            self._running += 1
            job.started_at = time.perf_counter()
            self._inbox.put(job)
            # A batch whose step() blocks on I/O (engine upstream) is woken to take it now.
            if self._batch is not None:
                self._batch.wake()
        if self._running and not self._serving:
            self._serving = True
            future = self._loop.run_in_executor(self._executor, self._serve)
            future.add_done_callback(self._served)

    def _served(self, future: asyncio.Future[None]) -> None:
        self._serving = False
        error = future.exception()
        if error is not None:  # a bug of the runner itself: end what it held, say so loudly
            self._fail_batch(error)
        self._pump()

    def _finished_one(self) -> None:
        self._running -= 1
        self._pump()
        self._settle()

    def _withdraw(self, job: Job) -> None:
        job.cancel()
        if job.started_at is None and job in self._waiting:
            self._waiting.remove(job)
            job._expiry.cancel()
            self._settle()

    def _expire(self, job: Job) -> None:
        if job in self._waiting:
            self._waiting.remove(job)
            self._settle()
            waited = self.model.queue.max_wait
            job.outputs.put_nowait(
                QueueTimeout(
                    f"model {self.model.id!r}: waited {waited} in the queue (queue.max_wait)",
                    retry_after=seconds(waited),
                )
            )

    def _fail_waiting(self) -> None:
        while self._waiting:
            job = self._waiting.popleft()
            job._expiry.cancel()
            job.outputs.put_nowait(
                ModelUnavailable(f"model {self.model.id!r} failed to load: {self.error}")
            )
        self._settle()

    def _settle(self) -> None:
        """Keep `_idle` true exactly when nothing waits or runs, and arm the idle unload."""
        if self._busy:
            self._idle.clear()
            return
        self._idle.set()
        self._touch()
        ttl = self.idle_ttl()
        if (
            not self.model.pinned
            and not math.isinf(ttl)
            and not self._closed
            and self.state is EngineState.READY
        ):
            self._idle_timer = self._loop.call_later(
                ttl,
                lambda: self._tasks.spawn(self._idle_out(), f"idle unload {self.model.id}"),
                context=self._context,
            )

    def _touch(self) -> None:
        self.last_used = time.monotonic()
        if self._idle_timer:
            self._idle_timer.cancel()
            self._idle_timer = None

    async def _idle_out(self) -> None:
        self._idle_timer = None
        await self.unload("idle")
