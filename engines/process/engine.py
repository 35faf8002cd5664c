"""`ProcessEngine`: start the model's server program, wait until it is healthy, then serve
it as an upstream of one replica on a loopback port.

Load (pinned: at startup; on demand: at the first request, which waits in the queue) starts
it; unload, reload and shutdown stop it. A server that exits on its own is `model_failed`
with its exit status and starts again after a back-off (`engines.backoff`: 1 s, doubling
to 60 s; reset once a run has lasted a minute); meanwhile its requests get a 503 with
Retry-After.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import msgspec

from engines.backoff import Backoff
from engines.base import Capabilities, LoadInfo
from engines.batch import Batch
from engines.errors import ModelUnavailable
from engines.log import emit
from engines.process.child import ServerProcess, shown_command
from engines.upstream.engine import UpstreamEngine
from engines.upstream.loop import LoopThread
from schemas.canonical import ChatRequest, Output
from schemas.config import ModelConfig, UpstreamConfig, seconds, size_bytes
from schemas.events import ModelAttached, ModelFailed, ModelRestarting

POLL_S = 0.2  # how often a starting server's health is asked


class ServerFailed(ModelUnavailable):
    """The server program would not start, or exited before it was healthy."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ProcessEngine:
    """A model server program of the gateway's own, served through an `UpstreamEngine` of one
    replica (its loopback port) that this engine holds while the program runs."""

    capabilities = Capabilities(chat=True)

    def __init__(self, model: ModelConfig, base_dir: Path | None) -> None:
        self._model = model
        self._process = model.process
        self._port = 0
        self._loop: LoopThread | None = None
        self._upstream: UpstreamEngine | None = None  # while loaded
        cwd = Path(self._process.cwd) if self._process.cwd else None
        if cwd is not None and not cwd.is_absolute() and base_dir is not None:
            cwd = base_dir / cwd
        self._cwd = cwd
        self._server: ServerProcess | None = None
        self._supervisor: concurrent.futures.Future[None] | None = None
        self._stopping = False

    def _upstream_settings(self) -> UpstreamConfig:
        p = self._process
        return UpstreamConfig(
            urls=[f"http://127.0.0.1:{self._port or 1}/v1"],
            model=p.model,
            max_in_flight=p.max_in_flight,
            timeout=p.timeout,
            check_interval="5s",
            cooldown="1s",
        )

    def estimate_memory(self) -> int:
        return size_bytes(self._process.memory) or 0

    def load(self, memory_left: int | None = None) -> LoadInfo:
        self._stopping = False
        self._port = free_port()
        self._loop = LoopThread(f"process-{self._model.id}")
        self._upstream = UpstreamEngine(
            self._model, self._upstream_settings(), health=self._process.health, loop=self._loop
        )
        try:
            self._loop.call(self._start())
            info = self._upstream.load(memory_left)
        except BaseException:
            self.unload()
            raise
        self._supervisor = self._loop.start(self._keep_running())
        return msgspec.structs.replace(
            info, memory_bytes=self.estimate_memory(), detail=self._detail()
        )

    def _detail(self) -> dict[str, str]:
        return {
            "engine": "process",
            "pid": str(self._server.pid),  # the keeper's, which leads the server's group
            "port": str(self._port),
            "command": shown_command(self._process.command),
        }

    async def _start(self) -> None:
        """Start the server and wait until its health check answers 200."""
        p = self._process
        try:
            self._server = await ServerProcess.start(
                self._model.id,
                p.command,
                port=self._port,
                env=p.env,
                cwd=self._cwd,
                grace=seconds(p.stop_grace),
            )
        except OSError as error:
            what = f"model {self._model.id!r}: cannot start its server: {error}"
            raise ServerFailed(what) from None
        deadline = time.monotonic() + seconds(p.startup_timeout)
        url = f"http://127.0.0.1:{self._port}{p.health}"
        async with httpx.AsyncClient(timeout=2.0) as client:
            while True:
                if self._server.exited:
                    code = await self._server.wait()
                    tail = " | ".join(list(self._server.tail)[-3:])
                    raise ServerFailed(
                        f"model {self._model.id!r}: its server exited with code {code} "
                        f"before it was healthy: {tail or 'no output'}"
                    )
                try:
                    if (await client.get(url)).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    await self._server.stop(seconds(p.stop_grace))
                    raise ServerFailed(
                        f"model {self._model.id!r}: its server was not healthy at {p.health} "
                        f"within {p.startup_timeout} (process.startup_timeout)"
                    )
                await asyncio.sleep(POLL_S)

    async def _keep_running(self) -> None:
        """Restart the server whenever it exits on its own, backing off between tries."""
        backoff = Backoff()
        while True:
            began = time.monotonic()
            code = await self._server.wait()
            if self._stopping:
                return
            pool = self._upstream.pool
            replica = pool.replicas[0]
            await pool.mark_down(replica, f"its server exited with code {code}")
            emit(
                ModelFailed(
                    model=self._model.id,
                    error=f"its server exited with code {code}; restarting",
                    exit_code=code,
                ),
                level="error",
            )
            ran_s = time.monotonic() - began
            while not self._stopping:
                delay = backoff.next_delay(ran_s)
                emit(ModelRestarting(model=self._model.id, attempt=backoff.attempt, delay_s=delay))
                await asyncio.sleep(delay)
                started = time.perf_counter()
                try:
                    await self._start()
                except ServerFailed as error:
                    emit(ModelFailed(model=self._model.id, error=error.message), level="error")
                    ran_s = 0.0
                    continue
                await pool.mark_up(replica)
                # Attached again, as after a load: ops see the new server's pid.
                emit(
                    ModelAttached(
                        model=self._model.id,
                        load_s=round(time.perf_counter() - started, 3),
                        memory_bytes=self.estimate_memory(),
                        context=0,
                        detail=self._detail(),
                    )
                )
                break

    def unload(self) -> None:
        self._stopping = True
        if self._loop is not None and self._server is not None:
            grace = seconds(self._process.stop_grace)

            async def stop() -> None:
                if self._supervisor is not None:
                    self._supervisor.cancel()
                await self._server.stop(grace)

            self._loop.call(stop(), timeout=grace + 30)
        self._server = self._supervisor = None
        if self._upstream is not None:  # which stops the loop
            self._upstream.unload()
        self._upstream = self._loop = None

    # Requests go to the server through the upstream engine.

    def count_prompt(self, request: ChatRequest) -> int:
        return self._upstream.count_prompt(request)

    def generate(self, request: ChatRequest, cancelled: Callable[[], bool]) -> Iterator[Output]:
        return self._upstream.generate(request, cancelled)

    def open_batch(self) -> Batch:
        return self._upstream.open_batch()

    def trim(self) -> None:
        """Nothing cached here: the server holds the model."""

    def reasons(self) -> bool:
        """Not known here: the server's reasoning comes as it sends it."""
        return False
