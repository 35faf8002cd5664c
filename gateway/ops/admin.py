"""Admin routes: reload the config, load or unload a model. Guarded by `server.admin_key`;
without one, open only to a peer on this machine. Each also answers under `/ui/api/` (the
ops page's controls)."""

from __future__ import annotations

import msgspec
from litestar import post
from litestar.connection import ASGIConnection
from litestar.datastructures import State
from litestar.handlers.base import BaseRouteHandler

from engines.base import EngineState
from engines.errors import ModelBusy, ModelNotFound
from gateway.control.registry import Generation
from gateway.http.auth import admin_refusal


def require_admin_key(connection: ASGIConnection, _: BaseRouteHandler) -> None:
    """Litestar guard: the admin routes answer the admin only (see `admin_refusal`)."""
    if (refusal := admin_refusal(connection)) is not None:
        raise refusal


ADMIN_GUARDS = [require_admin_key]
ADMIN = {"admin": True}  # the API-key guard leaves these to the admin-key guard


@post(["/admin/reload", "/ui/api/reload"], status_code=200, guards=ADMIN_GUARDS, opt=ADMIN)
async def reload_config(state: State) -> dict:
    """Reload models.yaml now; answers the diff, or 400 with every validation error."""
    diff = await state.reloader.reload("admin")
    return msgspec.structs.asdict(diff)


def runner_of(generation: Generation, model_id: str):
    if model_id not in generation.runners:
        known = ", ".join(sorted(generation.runners))
        raise ModelNotFound(f"model {model_id!r} not found; known models: {known}")
    return generation.runners[model_id]


@post(
    ["/admin/models/{model_id:str}/load", "/ui/api/models/{model_id:str}/load"],
    status_code=200,
    guards=ADMIN_GUARDS,
    opt=ADMIN,
)
async def load_model(model_id: str, generation: Generation) -> dict:
    runner = runner_of(generation, model_id)
    await runner.load(retry=True)  # a FAILED model is tried again
    return {"model": model_id, "state": runner.state.value, "error": runner.error}


@post(
    ["/admin/models/{model_id:str}/unload", "/ui/api/models/{model_id:str}/unload"],
    status_code=200,
    guards=ADMIN_GUARDS,
    opt=ADMIN,
)
async def unload_model(model_id: str, generation: Generation) -> dict:
    """Unload now; a model with requests waiting or running is left loaded (409)."""
    runner = runner_of(generation, model_id)
    if not await runner.unload("admin") and runner.state is EngineState.READY:
        raise ModelBusy(f"model {model_id!r} is busy; retry when its queue is empty")
    return {"model": model_id, "state": runner.state.value}


ROUTES = [reload_config, load_model, unload_model]
