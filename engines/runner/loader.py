"""A model's residency: loading it (download, memory budget, back-off), unloading it, and
the idle timer that unloads an on-demand model nobody has used for `idle_ttl`.

Every load and unload runs on the runner's one worker thread (the model's), so it never
overlaps a batch step; everything else here lives on the event loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from engines.backoff import Backoff
from engines.base import Engine, EngineState
from engines.download import (
    DownloadStopped,
    DownloadThrottle,
    SourceFetch,
    downloading_event,
    report_downloaded,
)
from engines.errors import GatewayError, ModelUnavailable
from engines.log import emit
from engines.residency import MemoryBudget, Resident
from engines.runner.admission import DEFAULT_RETRY_AFTER_S
from engines.sources.hub_client import FileProgress
from engines.tasks import Tasks
from schemas.config import ModelConfig, seconds
from schemas.events import (
    ContextBeyondTraining,
    ModelAttached,
    ModelDetached,
    ModelFailed,
    ModelLoading,
)


class Loader:
    """Loads and unloads one model's engine; the owner of its state and what a load found.

    A pinned model loads at start and stays; an on-demand one loads when its first request
    arrives (concurrent callers share the one load) and unloads after `idle_ttl` without
    requests. Loading first downloads what `fetch` says is missing (an `hf:` source), then
    makes room in the shared memory budget. A failed on-demand load is tried again by the
    first request after a back-off that doubles with each failure in a row (a model that
    cannot load is not hammered by every request; one whose cause went away comes back).
    """

    def __init__(
        self,
        settings: Callable[[], ModelConfig],
        engine: Engine,
        executor: ThreadPoolExecutor,
        *,
        budget: MemoryBudget | None,
        fetch: SourceFetch | None,
        resident: Resident,
        busy: Callable[[], bool],
        drop_batch: Callable[[], None],
        ready: Callable[[], None],
        failed: Callable[[], None],
    ) -> None:
        """`resident` is what the budget accounts the memory to (the runner); `busy` says
        whether a job waits, runs or holds the model (it must not unload); `drop_batch` runs
        on the model's thread before the engine unloads; `ready` and `failed` are called on
        the loop when a load ends, either way."""
        self._settings = settings
        self._engine = engine
        self._executor = executor
        # Requests decoded together: as the last load sized them (`concurrency: auto`).
        self.concurrency = declared_streams(settings())
        self._budget = budget
        self._fetch = fetch
        self._resident = resident
        self._busy = busy
        self._drop_batch = drop_batch
        self._ready = ready
        self._failed = failed
        self.state = EngineState.UNLOADED
        self.error: str | None = None
        self.download: FileProgress | None = None  # the file arriving now, while DOWNLOADING
        self.source_detail: dict[str, str] = {}  # the hub revision and commit, once fetched
        self.context: int | None = None
        self.dimensions: int | None = None  # an embedding model's, known once it loaded
        self.memory_bytes = 0
        self.weights_bytes = 0  # of memory_bytes; the rest is the KV cache reserved
        self.last_used = time.monotonic()
        # Ollama's `keep_alive`: the idle seconds the latest Ollama request asked for (inf:
        # stay), in place of `residency.idle_ttl`; None follows the config. Pinned: unused.
        self.keep_alive: float | None = None
        self.closed: str | None = None  # why no more loads or idle unloads come (`close`)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._context = contextvars.copy_context()  # replaced by `bind`'s
        self._loading: asyncio.Future[None] | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._tasks = Tasks()  # background loads and unloads, kept and watched
        self._backoff = Backoff()
        self._retry_at = 0.0
        self._after: asyncio.Future[None] | None = None  # a load waits for this first

    def bind(
        self,
        loop: asyncio.AbstractEventLoop,
        context: contextvars.Context,
        after: asyncio.Future[None] | None,
    ) -> None:
        """The loop and context to load in; any load first waits for `after`."""
        self._loop, self._context, self._after = loop, context, after

    def idle_ttl(self) -> float:
        """Seconds an idle on-demand model stays loaded: `keep_alive`, else `idle_ttl`."""
        model = self._settings()
        if model.pinned:
            return math.inf
        if self.keep_alive is not None:
            return self.keep_alive
        return seconds(model.residency.idle_ttl)

    def unloads_in(self) -> float | None:
        """Seconds until the idle unload, for an on-demand model; None when it never will."""
        ttl = self.idle_ttl()
        if self._settings().pinned or math.isinf(ttl):
            return None
        if self._busy() or self.state is not EngineState.READY:
            return ttl
        return max(0.0, self.last_used + ttl - time.monotonic())

    def refuse_failed(self) -> None:
        """A FAILED model refuses, unless it is on demand and its back-off has passed."""
        model = self._settings()
        wait = self._retry_at - time.monotonic()
        if not model.pinned and wait <= 0:
            return  # the caller queues the request and the load is tried again
        refused = ModelUnavailable(f"model {model.id!r} failed to load: {self.error}")
        if not model.pinned:
            refused.retry_after = round(max(wait, DEFAULT_RETRY_AFTER_S), 1)
        raise refused

    def load_soon(self) -> None:
        """Start `load(retry=True)` in the background (a request waits for it in line)."""
        self._tasks.spawn(self.load(retry=True), f"load {self._settings().id}")

    async def load(self, *, retry: bool = False) -> None:
        """Load the model if it is not loaded; every caller waits for the same one load.

        A FAILED model is tried again only with `retry`.
        """
        if self.state is EngineState.READY:
            return
        if self.state is EngineState.FAILED and not retry:
            return
        if self._loading is None:
            self._loading = asyncio.ensure_future(self._load())
        await asyncio.shield(self._loading)

    async def settled(self) -> None:
        """Until a load under way has ended (failed or not)."""
        if self._loading:
            await asyncio.gather(self._loading, return_exceptions=True)

    def forget_failure(self) -> None:
        """After a failed load whose cause is gone: the next request loads again."""
        if self.state is EngineState.FAILED:
            self.state, self.error = EngineState.UNLOADED, None

    async def unload(self, reason: str) -> bool:
        """Unload now if nothing waits or runs; False when busy (or not loaded)."""
        if self.state is not EngineState.READY or self._busy():
            return False
        self.state = EngineState.UNLOADED
        await self._loop.run_in_executor(self._executor, self._drop_weights)
        if self._budget:
            self._budget.release(self._resident)
        emit(ModelDetached(model=self._settings().id, reason=reason))
        return True

    def close(self, reason: str) -> None:
        """No more idle unloads, and a download under way stops (shutdown, reload, removal)."""
        self.closed = reason
        if self._idle_timer:
            self._idle_timer.cancel()

    def discard(self) -> None:
        """The runner has stopped: whatever its state, nothing is loaded for it any more."""
        self.state = EngineState.UNLOADED

    def touch(self) -> None:
        """The model was used now: the idle unload, if armed, is off."""
        self.last_used = time.monotonic()
        if self._idle_timer:
            self._idle_timer.cancel()
            self._idle_timer = None

    def rest(self) -> None:
        """Nothing waits or runs from now: arm the idle unload of an on-demand model."""
        self.touch()
        ttl = self.idle_ttl()
        if (
            not self._settings().pinned
            and not math.isinf(ttl)
            and not self.closed
            and self.state is EngineState.READY
        ):
            name = f"idle unload {self._settings().id}"
            self._idle_timer = self._loop.call_later(
                ttl, lambda: self._tasks.spawn(self._idle_out(), name), context=self._context
            )

    async def _idle_out(self) -> None:
        self._idle_timer = None
        await self.unload("idle")

    def _drop_weights(self) -> None:
        self._drop_batch()
        self._engine.unload()

    async def _load(self) -> None:
        model_id = self._settings().id
        self.state = EngineState.LOADING
        self.error = None
        if self._after is not None:  # the runner this one replaces must let go first
            await asyncio.gather(self._after, return_exceptions=True)
            self._after = None
        emit(ModelLoading(model=model_id))
        started = time.perf_counter()
        try:
            if self._fetch is not None:
                await self._download()
            left = None
            if self._budget:
                needed = self.memory_bytes or await self._loop.run_in_executor(
                    self._executor, self._engine.estimate_memory
                )
                left = await self._budget.make_room(self._resident, needed)
            # In (a copy of) the context the runner was bound in: an engine whose load starts
            # threads of its own (engine upstream) emits its events to this app's listeners.
            load = self._context.copy().run
            info = await self._loop.run_in_executor(self._executor, load, self._engine.load, left)
        except Exception as error:  # any load failure is this model's alone
            if self._budget:
                self._budget.release(self._resident)  # the reservation, if it got one
            self.state = EngineState.FAILED
            self.error = error.message if isinstance(error, GatewayError) else repr(error)
            self._retry_at = time.monotonic() + self._backoff.next_delay(0.0)
            emit(ModelFailed(model=model_id, error=self.error), level="error")
            self._failed()
            return
        finally:
            self._loading = None
        self.state = EngineState.READY
        self._backoff.reset()
        self.context, self.memory_bytes = info.context, info.memory_bytes
        self.weights_bytes = info.weights_bytes
        self.dimensions = info.dimensions
        self.concurrency = info.concurrency or declared_streams(self._settings())
        if self._budget:
            self._budget.hold(self._resident, info.memory_bytes)
        emit(
            ModelAttached(
                model=model_id,
                load_s=round(time.perf_counter() - started, 3),
                memory_bytes=info.memory_bytes,
                context=info.context,
                detail={**info.detail, **self.source_detail},
                steering=info.steering,
            )
        )
        if info.trained_context and info.context > info.trained_context:
            emit(
                ContextBeyondTraining(
                    model=model_id, context=info.context, trained=info.trained_context
                ),
                level="warning",
            )
        self._ready()

    async def _download(self) -> None:
        """Fetch the hub sources not in the cache, on the model's thread (state DOWNLOADING
        while bytes arrive); a failure raises `SourceError` into the load's own handler."""
        throttle, started = DownloadThrottle(), time.perf_counter()
        model_id = self._settings().id

        def arrived(progress: FileProgress) -> None:  # on the loop, posted by the download
            if self.state in (EngineState.LOADING, EngineState.DOWNLOADING):
                self.state, self.download = EngineState.DOWNLOADING, progress
                if throttle.ready():
                    emit(downloading_event(model_id, progress))

        def report(progress: FileProgress) -> None:  # on the download thread, per chunk
            if self.closed:  # stopping (shutdown, reload, removal): abandon the transfer
                raise DownloadStopped(f"download stopped: the model was {self.closed}")
            self._loop.call_soon_threadsafe(arrived, progress, context=self._context)

        try:
            snapshots = await self._loop.run_in_executor(self._executor, self._fetch, report)
        finally:
            self.state, self.download = EngineState.LOADING, None
        self.source_detail = report_downloaded(model_id, self._fetch, snapshots, started)


def declared_streams(model: ModelConfig) -> int:
    """`concurrency` where no load sized it: the number models.yaml gives, else one at a time
    (an engine that sizes none, as the scripted one, decodes serially under `auto`)."""
    return 1 if model.concurrency == "auto" else model.concurrency
