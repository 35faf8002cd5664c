"""Admin routes: reload the config, load or unload a model. Guarded by `server.admin_key`;
without one, open only to a peer on this machine."""

from __future__ import annotations

import hmac

import msgspec
from litestar import post
from litestar.connection import ASGIConnection
from litestar.datastructures import State
from litestar.handlers.base import BaseRouteHandler

from engines.base import EngineState
from engines.errors import Forbidden, ModelBusy, ModelNotFound, Unauthorized
from gateway.control.keys import key_entries
from gateway.control.registry import Generation
from gateway.http.auth import presented_key
from gateway.http.exposure import is_loopback

ADMIN_LOOPBACK_ONLY = (
    "admin routes answer only on this machine (a loopback peer) while server.admin_key is "
    "not set; set server.admin_key to reload, load or unload models from elsewhere"
)
ADMIN_KEY_MISSING = (
    "admin routes are closed: server.api_keys is set but server.admin_key is not, and API "
    "keys do not open admin routes; set server.admin_key to reload, load or unload models"
)


def require_admin_key(connection: ASGIConnection, _: BaseRouteHandler) -> None:
    """With `server.admin_key` set, admin routes need it (Bearer or x-api-key). With API keys
    and no admin key they are closed (403): the gateway is guarded, and no key opens them.
    With no key at all they answer a loopback peer only (403 to any other)."""
    server = connection.app.state.registry.current.config.server
    admin_key = server.admin_key
    if admin_key is None:
        if key_entries(server):
            raise Forbidden(ADMIN_KEY_MISSING)
        # No key at all: the peer's own address is the guard, whatever the bind (the Host
        # header is the client's to write; the peer address is not).
        peer = (connection.client.host if connection.client else "").removeprefix("::ffff:")
        if not is_loopback(peer):
            raise Forbidden(ADMIN_LOOPBACK_ONLY)
        return
    key = presented_key(connection) or ""
    if not hmac.compare_digest(key.encode(), admin_key.encode()):
        raise Unauthorized("admin routes need the admin key (server.admin_key)")


ADMIN_GUARDS = [require_admin_key]
ADMIN = {"admin": True}  # the API-key guard leaves these to the admin-key guard


@post("/admin/reload", status_code=200, guards=ADMIN_GUARDS, opt=ADMIN)
async def reload_config(state: State) -> dict:
    """Reload models.yaml now; answers the diff, or 400 with every validation error."""
    diff = await state.reloader.reload("admin")
    return msgspec.structs.asdict(diff)


def _runner(generation: Generation, model_id: str):
    if model_id not in generation.runners:
        known = ", ".join(sorted(generation.runners))
        raise ModelNotFound(f"model {model_id!r} not found; known models: {known}")
    return generation.runners[model_id]


@post("/admin/models/{model_id:str}/load", status_code=200, guards=ADMIN_GUARDS, opt=ADMIN)
async def load_model(model_id: str, generation: Generation) -> dict:
    runner = _runner(generation, model_id)
    await runner.load(retry=True)  # a FAILED model is tried again
    return {"model": model_id, "state": runner.state.value, "error": runner.error}


@post("/admin/models/{model_id:str}/unload", status_code=200, guards=ADMIN_GUARDS, opt=ADMIN)
async def unload_model(model_id: str, generation: Generation) -> dict:
    """Unload now; a model with requests waiting or running is left loaded (409)."""
    runner = _runner(generation, model_id)
    if not await runner.unload("admin") and runner.state is EngineState.READY:
        raise ModelBusy(f"model {model_id!r} is busy; retry when its queue is empty")
    return {"model": model_id, "state": runner.state.value}


ROUTES = [reload_config, load_model, unload_model]
