"""`create_app`: the whole gateway as one Litestar constructor call."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from litestar import Litestar
from litestar.datastructures import State
from litestar.di import Provide

from engines.errors import ConfigInvalid
from engines.platform import PlatformPath
from engines.residency import MemoryBudget, auto_budget
from gateway import admin, anthropic, completions, embeddings, ollama, openai, ops, responses
from gateway.auth import require_api_key
from gateway.errors import error_response
from gateway.middleware import request_events
from gateway.registry import Generation, Registry
from gateway.reload import Reloader, make_runner
from schemas.config import GatewayConfig, size_bytes


def provide_generation(state: State) -> Generation:
    """Each request sees exactly one config generation, captured as it arrives."""
    return state.registry.current


def create_app(config: GatewayConfig, platform: PlatformPath, config_path: Path) -> Litestar:
    """The gateway for `config` (read from `config_path`, which reloads re-read)."""
    total = size_bytes(config.server.memory_budget) or auto_budget()
    budget = MemoryBudget(total)
    base_dir = config_path.resolve().parent
    runners = {m.id: make_runner(m, config, platform, base_dir, budget) for m in config.models}
    registry = Registry(Generation(config, runners))
    reloader = Reloader(registry, config_path, platform, budget)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        for runner in registry.current.runners.values():
            await runner.start()
        loop.add_signal_handler(signal.SIGHUP, _reload_soon, reloader)
        watcher = asyncio.ensure_future(reloader.watch()) if config.server.watch_config else None
        try:
            yield
        finally:
            loop.remove_signal_handler(signal.SIGHUP)
            if watcher:
                watcher.cancel()
            for runner in registry.current.runners.values():
                await runner.stop("shutdown")

    return Litestar(
        route_handlers=[
            *openai.ROUTES,
            *completions.ROUTES,
            *responses.ROUTES,
            *anthropic.ROUTES,
            *ollama.ROUTES,
            *embeddings.ROUTES,
            *ops.ROUTES,
            *admin.ROUTES,
        ],
        dependencies={"generation": Provide(provide_generation, sync_to_thread=False)},
        exception_handlers={Exception: error_response},
        middleware=[request_events],
        guards=[require_api_key],
        lifespan=[lifespan],
        state=State({"registry": registry, "reloader": reloader, "budget": budget}),
        openapi_config=None,
    )


def _reload_soon(reloader: Reloader) -> None:
    """SIGHUP: reload in the background; a refusal is already logged as config_rejected."""

    async def reload() -> None:
        with contextlib.suppress(ConfigInvalid):
            await reloader.reload("sighup")

    asyncio.ensure_future(reload())
