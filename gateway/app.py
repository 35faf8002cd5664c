"""`create_app`: the whole gateway as one Litestar constructor call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from litestar import Litestar
from litestar.datastructures import State
from litestar.di import Provide

from engines.factory import make_engine
from engines.platform import PlatformPath
from engines.runner import Runner
from gateway import anthropic, completions, embeddings, ollama, openai, ops, responses
from gateway.auth import require_api_key
from gateway.errors import error_response
from gateway.middleware import request_events
from gateway.registry import Generation
from schemas.config import GatewayConfig


class Registry:
    """Holds the current config generation; a reload swaps the reference."""

    def __init__(self, generation: Generation) -> None:
        self.current = generation


def build_generation(
    config: GatewayConfig, platform: PlatformPath, base_dir: Path | None
) -> Generation:
    runners = {m.id: Runner(m, make_engine(m, platform, base_dir)) for m in config.models}
    return Generation(config, runners)


def provide_generation(state: State) -> Generation:
    """Each request sees exactly one config generation, captured as it arrives."""
    return state.registry.current


def create_app(
    config: GatewayConfig, platform: PlatformPath, base_dir: Path | None = None
) -> Litestar:
    registry = Registry(build_generation(config, platform, base_dir))

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        runners = registry.current.runners.values()
        for runner in runners:
            await runner.start()
        try:
            yield
        finally:
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
        ],
        dependencies={"generation": Provide(provide_generation, sync_to_thread=False)},
        exception_handlers={Exception: error_response},
        middleware=[request_events],
        guards=[require_api_key],
        lifespan=[lifespan],
        state=State({"registry": registry}),
        openapi_config=None,
    )
