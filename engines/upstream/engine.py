"""`UpstreamEngine`: the Engine protocol over a model's OpenAI-protocol replicas.

Loading starts the engine's own event loop and HTTP client, probes every replica once and
starts the health checks; nothing is held in memory but connections. The runner in front
keeps the model's FIFO queue, `max_depth`, pacing and events exactly as for a local model;
the batch streams each admitted request from the least busy replica in rotation.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Callable, Iterator

from engines.base import Capabilities, LoadInfo
from engines.batch import Batch
from engines.errors import BadRequest
from engines.upstream.batch import UpstreamBatch
from engines.upstream.client import Upstream
from engines.upstream.loop import LoopThread
from engines.upstream.replicas import ReplicaPool
from schemas.canonical import ChatRequest, Finished, Output
from schemas.config import ModelConfig, UpstreamConfig, seconds


class UpstreamEngine:
    """A model whose requests go to `upstream.urls` (or, for engine process, to its child)."""

    # Text only: image parts are refused before they queue, as for a local text model.
    capabilities = Capabilities(chat=True)

    def __init__(
        self,
        model: ModelConfig,
        settings: UpstreamConfig | None = None,
        *,
        health: str | None = None,
        loop: LoopThread | None = None,
    ) -> None:
        """`settings`, `health` (a fixed health path) and `loop` (the event loop to run on,
        stopped with this engine) are engine process's, which serves its child through one."""
        self._model = model
        self._settings = settings or model.upstream
        self._health = health
        self._loop = loop
        self._upstream: Upstream | None = None
        self._watch: concurrent.futures.Future[None] | None = None

    def estimate_memory(self) -> int:
        return 0  # the weights live on the replicas

    def load(self, memory_left: int | None = None) -> LoadInfo:
        settings = self._settings
        if self._loop is None:  # engine process hands in its own, which started its server
            self._loop = LoopThread(f"upstream-{self._model.id}")
        self._upstream = self._loop.call(self._open(settings))
        healthy = self._loop.call(self.check_all())
        self._watch = self._loop.start(self._watch_health())
        names = [r.name for r in self._upstream.pool.replicas]
        return LoadInfo(
            memory_bytes=0,
            context=0,  # the replicas' own window; they refuse what does not fit
            detail={
                "engine": self._model.engine,
                "replicas": ", ".join(names),
                "healthy": f"{healthy}/{len(names)}",
            },
        )

    async def _open(self, settings: UpstreamConfig) -> Upstream:
        pool = ReplicaPool(
            self._model.id, settings.urls, settings.max_in_flight, seconds(settings.cooldown)
        )
        return Upstream(
            self._model.id,
            pool,
            model=settings.model if settings.model is not None else self._default_model(),
            api_key=settings.api_key,
            timeout=seconds(settings.timeout),
            health=self._health,
        )

    def _default_model(self) -> str | None:
        return self._model.id

    @property
    def pool(self) -> ReplicaPool:
        """The replicas in rotation, while loaded."""
        return self._upstream.pool

    async def check_all(self) -> int:
        """Probe every replica due a check; returns how many are in rotation after."""
        pool = self._upstream.pool

        async def check(replica) -> None:
            if not pool.due(replica):
                return
            problem = await self._upstream.probe(replica)
            if problem is None:
                await pool.mark_up(replica)
            else:
                await pool.mark_down(replica, problem)

        await asyncio.gather(*(check(r) for r in pool.replicas))
        return sum(r.up for r in pool.replicas)

    async def _watch_health(self) -> None:
        interval = seconds(self._settings.check_interval)
        while True:
            await asyncio.sleep(interval)
            await self.check_all()

    def count_prompt(self, request: ChatRequest) -> int:
        """The replica's own count: one token generated, and its usage read back."""
        probe = ChatRequest(
            messages=request.messages, max_tokens=1, tools=request.tools, reasoning="off"
        )
        answer = self._loop.call(self._upstream.complete(probe))
        usage = answer.get("usage") if isinstance(answer, dict) else None
        if not isinstance(usage, dict) or not isinstance(usage.get("prompt_tokens"), int):
            raise BadRequest(f"model {self._model.id!r}: its upstream does not count tokens")
        return usage["prompt_tokens"]

    def generate(self, request: ChatRequest, cancelled: Callable[[], bool]) -> Iterator[Output]:
        """One request on its own batch (the runner uses `open_batch`; this is for tools)."""
        batch = self.open_batch()
        batch.add("one", request, cancelled)
        while True:
            for _, output in batch.step():
                if isinstance(output, Exception):
                    raise output
                yield output
                if isinstance(output, Finished):
                    return

    def open_batch(self) -> Batch:
        return UpstreamBatch(self._loop, self._upstream)

    def trim(self) -> None:
        """Nothing cached here: the replicas hold the model."""

    def reasons(self) -> bool:
        """Not known here: a replica's reasoning comes as it sends it."""
        return False

    def unload(self) -> None:
        if self._loop is None:
            return
        if self._watch is not None:
            self._watch.cancel()
        if self._upstream is not None:  # None: engine process's start failed before it opened
            with contextlib.suppress(Exception):
                self._loop.call(self._upstream.close(), timeout=10)
        self._loop.stop()
        self._loop = self._upstream = self._watch = None
