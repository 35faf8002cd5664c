"""One runner per model: its engine, the one thread that touches it, and its FIFO queue."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import math
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

from engines import timeline
from engines.base import Engine, EngineState
from engines.download import SourceFetch
from engines.errors import BadRequest, ModelUnavailable
from engines.job import Job, Meter, arrived, own
from engines.residency import MemoryBudget
from engines.runner.admission import (
    DEFAULT_RETRY_AFTER_S,
    AdmissionQueue,
    refuse_unable,
)
from engines.runner.keep import KeepAlive, Pin, Residency, Unpin
from engines.runner.loader import Loader
from engines.runner.thread import ModelThread
from engines.sources.hub_client import FileProgress
from schemas.canonical import (
    ChatRequest,
    Embedded,
    EmbedRequest,
    Finished,
    Output,
    PromptRead,
    Reranked,
    RerankRequest,
    SpeechRequest,
    Spoken,
    Transcribed,
    TranscribeRequest,
)
from schemas.config import ModelConfig

__all__ = ["DEFAULT_RETRY_AFTER_S", "Runner"]


class Runner:
    """Admits a model's requests in arrival order and runs them on the model's own thread.

    Three parts, each the only owner of its state: the `AdmissionQueue` (the line, in the
    order written down in engines/runner/admission.py), the `Loader` (residency: load,
    back-off, download, idle unload, the memory budget) and the `ModelThread` (the worker
    that steps admitted jobs through the engine's batch). The runner holds what joins
    them: whether it still admits, and the holds of requests served outside the queue.

    A model that failed to load (FAILED) is loaded again by `load(retry=True)` (the admin
    route, a reload), and an on-demand one also by the first request after a back-off.
    """

    def __init__(
        self,
        model: ModelConfig,
        engine: Engine,
        budget: MemoryBudget | None = None,
        fetch: SourceFetch | None = None,
        meter: Meter | None = None,
    ):
        self.model = model  # a reload may replace it (settings that need no new engine)
        self.engine = engine
        self._budget = budget
        self._meter = meter  # told of the tokens each keyed request spends
        # When it last loaded, and how many requests it has admitted since: a burst it
        # serves while another model waits for its memory (engines/residency.py).
        self._loaded_at = 0.0
        self._burst = 0
        # The model's one thread: loads, unloads and batch steps all run on it, in turn.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"runner-{model.id}")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed: str | None = None  # why this runner admits no more requests
        self._holds = 0  # requests between admission and their end (see `hold`)
        self._counting = 0  # prompts being counted on the engine's tokenizer right now
        self._idle = asyncio.Event()  # set exactly when nothing waits, runs or holds
        self._idle.set()
        self._queue = AdmissionQueue(self._settings, left=self._settle)
        self._thread = ModelThread(
            self._settings,
            engine,
            self._executor,
            freed=self._resume,
            stopped=self._pump,
            capacity=lambda: self._loader.concurrency,
        )
        self._loader = Loader(
            self._settings,
            engine,
            self._executor,
            budget=budget,
            fetch=fetch,
            resident=self,
            busy=lambda: self._holds_model,
            drop_batch=self._thread.drop_batch,
            ready=self._loaded,
            failed=self._fail_waiting,
        )

    def _settings(self) -> ModelConfig:
        return self.model

    # What the loader found and decided, read through the runner (the loader's to change).
    @property
    def state(self) -> EngineState:
        return self._loader.state

    @property
    def error(self) -> str | None:
        return self._loader.error

    @property
    def download(self) -> FileProgress | None:
        """The file arriving now, while DOWNLOADING."""
        return self._loader.download

    @property
    def source_detail(self) -> dict[str, str]:
        return self._loader.source_detail

    @property
    def context(self) -> int | None:
        return self._loader.context

    @property
    def dimensions(self) -> int | None:
        """An embedding model's vector size, once it has loaded (None before, or for chat)."""
        return self._loader.dimensions

    @property
    def memory_bytes(self) -> int:
        return self._loader.memory_bytes

    @property
    def weights_bytes(self) -> int:
        """Of `memory_bytes`, the weights' (0 where the engine does not tell them apart)."""
        return self._loader.weights_bytes

    @property
    def last_used(self) -> float:
        return self._loader.last_used

    @property
    def keep_alive(self) -> float | None:
        """Ollama's `keep_alive` in idle seconds (inf: stay); None follows `idle_ttl`."""
        return self._loader.keep_alive

    @property
    def model_id(self) -> str:
        return self.model.id

    def idle_ttl(self) -> float:
        """Seconds an idle on-demand model stays loaded: `keep_alive`, else `idle_ttl`."""
        return self._loader.idle_ttl()

    def unloads_in(self) -> float | None:
        """Seconds until the idle unload, for an on-demand model; None when it never will."""
        return self._loader.unloads_in()

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    @property
    def running(self) -> int:
        return self._thread.running

    @property
    def _busy(self) -> bool:
        """Something waits, runs, or holds the model: it must not unload."""
        return bool(self._thread.running or self._queue or self._holds)

    @property
    def _holds_model(self) -> bool:
        """Something runs or holds the model, or waits for it to admit more: it must not
        unload. Once its burst is over only what runs on it counts: the requests waiting
        (and holding it) load it again when room comes back."""
        if self._yielding():
            return bool(self._thread.running or self._counting)
        return bool(self._thread.running or self._holds or self._queue)

    @property
    def evictable(self) -> bool:
        """Loaded, not pinned, and with nothing running, holding it, or waiting (unless it
        has served its burst while another model waits for its memory)."""
        return self.state is EngineState.READY and not self.model.pinned and not self._holds_model

    @property
    def swappable(self) -> bool:
        """Holds memory it lets go of after a burst: not pinned, loaded or loading."""
        serving = (EngineState.READY, EngineState.LOADING, EngineState.DOWNLOADING)
        return not self.model.pinned and self.state in serving

    def _yielding(self) -> bool:
        """Its burst is over: another model waits for its memory (engines/residency.py)."""
        if self._budget is None or self.model.pinned or not self._burst:
            return False
        return self._budget.yield_due(self, self._loaded_at)

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
        self._loader.touch()
        self._idle.clear()
        own(release)
        try:
            yield
        finally:
            release()

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
        context = contextvars.copy_context()
        self._thread.bind(self._loop, context)
        self._loader.bind(self._loop, context, after)

    def submit(
        self,
        request: ChatRequest | EmbedRequest | RerankRequest | TranscribeRequest | SpeechRequest,
    ) -> Job:
        """Put a request at the back of the line, or refuse it at once (the admission
        order: engines/runner/admission.py)."""
        if timeline.ON:  # the protocol's handler has read, checked and routed the body
            timeline.mark("submit")
        if self._closed:
            raise ModelUnavailable(f"model {self.model.id!r} was {self._closed}; retry")
        if self.state is EngineState.FAILED:
            self._loader.refuse_failed()
        self._queue.refuse_when_full()
        refuse_unable(self.engine, self.model.id, request)
        job = Job(request, self._meter)
        own(functools.partial(self._withdraw, job))  # it ends with its caller's scope
        self._loader.touch()
        self._queue.join(job, self._loop)
        if self.state in (EngineState.UNLOADED, EngineState.FAILED):
            self._loader.load_soon()
        self._pump()
        arrived()  # queued, perhaps already in the model's inbox: no longer on its way
        return job

    async def count_prompt(self, request: ChatRequest) -> int:
        """Tokens in the rendered prompt, without queueing behind generations.

        Rendering and tokenizing touch no MLX state, so a worker thread other than the
        model's may do it while the model generates. The model is held meanwhile.
        """
        async with self.hold():
            if self.state is not EngineState.READY:
                await self.load()
            if self.state is not EngineState.READY:
                raise ModelUnavailable(f"model {self.model.id!r} is not available: {self.error}")
            self._counting += 1
            try:
                return await asyncio.to_thread(self.engine.count_prompt, request)
            finally:
                self._counting -= 1

    async def results(self, job: Job) -> AsyncIterator[Output]:
        """The job's outputs as they come; leaving early (client gone) cancels the job."""
        try:
            while True:
                item = await job.outputs.get()
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item, PromptRead):  # for the adapters, not an output
                    job.read = item
                    continue
                yield item
                if job.taken is not None:  # back for more: the first token's frame is out
                    job.taken.set()
                    job.taken = None
                if isinstance(item, Finished | Embedded | Reranked | Transcribed | Spoken):
                    return
        finally:
            if job.taken is not None:
                job.taken.set()
            self._withdraw(job)

    async def load(self, *, retry: bool = False) -> None:
        """Load the model if it is not loaded; every caller waits for the same one load.

        A FAILED model is tried again only with `retry` (the admin route, a reload, an
        on-demand request after the back-off).
        """
        await self._loader.load(retry=retry)

    async def reside(self, ask: Residency) -> bool:
        """Change the model's residency as a client asks (engines/runner/keep.py); True when
        the model unloaded for it."""
        match ask:
            case KeepAlive(seconds=seconds, now=now):
                if not self.model.pinned:
                    self._loader.keep_alive = seconds
                if not now:
                    return False
                if self._loader.keep_alive == 0:
                    # Busy: it unloads when its requests finish (keep_alive 0 applies to them).
                    await self.unload("keep_alive")
                    return True
                await self.load()
                if self.state is not EngineState.READY:
                    raise ModelUnavailable(f"model {self.model.id!r} failed to load: {self.error}")
            case Pin():
                self._loader.keep_alive = math.inf
                await self.load(retry=True)
            case Unpin():
                if self.model.pinned:
                    raise BadRequest(
                        f"model {self.model.id!r} is pinned in models.yaml (residency: pinned)"
                    )
                self._loader.keep_alive = None
        return False

    def forget_failure(self) -> None:
        """After a failed load whose cause is gone (its files downloaded since): the next
        request loads again instead of being refused with the old error."""
        self._loader.forget_failure()

    async def unload(self, reason: str) -> bool:
        """Unload now if nothing waits or runs; False when busy (or not loaded). A model
        swapped out at the end of its burst loads again for the requests still in line."""
        unloaded = await self._loader.unload(reason)
        if unloaded and self._queue and not self._closed:
            self._loader.load_soon()
        return unloaded

    async def stop(self, reason: str, *, finish_queued: bool = False) -> None:
        """Admit nothing more, let what runs finish, unload, and end the model's thread.

        Requests still waiting get a clear 503 — unless `finish_queued` (a model replaced by
        a reload finishes everything it admitted on its old runner).
        """
        self._closed = reason
        self._loader.close(reason)
        if not finish_queued:
            for job in self._queue.empty_out():
                job.outputs.put_nowait(ModelUnavailable(f"model {self.model.id!r} was {reason}"))
        self._settle()
        await self._loader.settled()
        await self._idle.wait()
        if not await self.unload(reason):
            self._loader.discard()
        self._thread.cancel_trim()
        self._executor.shutdown(wait=False)

    def _pump(self) -> None:
        """Admit from the front of the line while the batch has room (`concurrency`) and
        its burst lasts (engines/residency.py)."""
        while self.state is EngineState.READY and self._thread.running < self._loader.concurrency:
            if self._yielding():
                break
            job = self._queue.take()
            if job is None:
                break
            self._burst += 1
            self._thread.hand(job)
        self._thread.serve_if_needed()

    def wake(self) -> None:
        """The memory budget's call: a model that waited for this one's memory no longer
        does, so a burst it cut short goes on."""
        if self._loop is not None:
            self._resume()

    def _loaded(self) -> None:
        """A load succeeded: a new burst starts."""
        self._loaded_at, self._burst = time.monotonic(), 0
        self._resume()

    def _resume(self) -> None:
        """A load ended or a job did: admit what now fits, and settle."""
        self._pump()
        self._settle()

    def _withdraw(self, job: Job) -> None:
        job.cancel()
        if job.started_at is None and self._queue.remove(job):
            self._settle()

    def _fail_waiting(self) -> None:
        for job in self._queue.empty_out():
            job.outputs.put_nowait(
                ModelUnavailable(f"model {self.model.id!r} failed to load: {self.error}")
            )
        self._settle()

    def _settle(self) -> None:
        """Keep `_idle` true exactly when nothing waits or runs, and arm the idle unload."""
        if self._budget:
            self._budget.changed()  # a load waiting for this model's memory looks again
        if self._busy:
            self._idle.clear()
            return
        self._idle.set()
        self._loader.rest()
