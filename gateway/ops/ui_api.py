"""`/ui/api/`: every fact the ops page shows, as JSON a script can read too.

Same rules as the page (gateway/ops/viewer.py): the admin sees everything; another API key
sees the models it may use and its own requests only. Reads of the Activity store run on a
worker thread (SQLite blocks).
"""

from __future__ import annotations

import asyncio
import math
from typing import Annotated, Literal

import msgspec
from litestar import get
from litestar.datastructures import State
from litestar.di import Provide
from litestar.params import Parameter

from engines.base import EngineState
from engines.cache.store import disk_usage
from engines.errors import ModelNotFound
from engines.policy.request import build_chat_request
from gateway.canonical.model_facts import reads_images, task_of
from gateway.control.registry import Generation
from gateway.control.state import cache_dir
from gateway.logs.setup import current_redactor
from gateway.ops.activity.history import history
from gateway.ops.expert_metrics import experts_row
from gateway.ops.ui import model_state
from gateway.ops.viewer import OWN_GUARD, Viewer, only_admin, provide_viewer, require_viewer
from schemas.canonical import ChatAsk, Message
from schemas.config import ModelConfig

# SQLite's integers are 64-bit: a larger one in a query is a 400, not an OverflowError.
MAX_ID = 2**63 - 1
API = {
    "guards": [require_viewer],
    "opt": OWN_GUARD,
    "dependencies": {"viewer": Provide(provide_viewer)},
}


def visible(generation: Generation, viewer: Viewer) -> list:
    """The models the viewer may see: all for the admin, else its key's."""
    if viewer.models is None:
        return list(generation.config.models)
    allowed = {generation.resolve_name(name) for name in viewer.models}
    return [m for m in generation.config.models if m.id in allowed]


def known_model(generation: Generation, viewer: Viewer, model_id: str):
    for model in visible(generation, viewer):
        if model.id == model_id:
            return model
    known = ", ".join(m.id for m in visible(generation, viewer))
    raise ModelNotFound(f"model {model_id!r} not found; known models: {known}")


@get("/ui/api/models", **API)
async def models(state: State, generation: Generation, viewer: Viewer) -> dict:
    """Each model the viewer may see: state, queue, speed, memory; and the budget."""
    rows = []
    for model in visible(generation, viewer):
        runner = generation.runners[model.id]
        rows.append(
            model_state(state, model, runner)
            | {
                "task": task_of(generation, model),
                "images": reads_images(generation, model),
                # Pinned from the page (until unpinned or the process ends).
                "pinned_now": bool(runner.keep_alive and math.isinf(runner.keep_alive)),
                "memory_bytes": runner.memory_bytes if runner.state is EngineState.READY else 0,
                # Of memory_bytes, the weights; the rest is the KV cache reserved (0: no split).
                "weights_bytes": runner.weights_bytes if runner.state is EngineState.READY else 0,
                "context": runner.context,
                "unloads_in_s": runner.unloads_in(),
                "sampling": sampling_of(model),
                "experts": experts_row(runner),  # `experts:`: resident per layer, hit rate
                # `steering:`: each model id of this load whose rows are steered, and by what.
                "steering": steering_row(runner),
            }
        )
    return {
        "viewer": {"admin": viewer.admin, "key": viewer.key},
        "draining": state.admission.draining,
        "memory_budget_bytes": state.budget.total,
        "memory_used_bytes": state.budget.used,
        "device_memory_bytes": state.device_memory_bytes,
        "activity_store": str(state.activity.path or ":memory:"),
        "activity_store_problem": state.activity.problem,
        "activity_lines_dropped": state.activity.dropped,
        "models": rows,
    }


def steering_row(runner) -> dict:
    """The vectors a loaded model steers its rows with, by model id (the base's, its
    adapters'): file, sha256, layers, scale, format, as `model_attached` announced them."""
    steering = getattr(runner.engine, "steering", None)
    if runner.state is not EngineState.READY or steering is None:
        return {}
    adapters = getattr(runner.engine, "adapters", None)
    return msgspec.to_builtins(steering.announced(adapters.current if adapters else None))


def sampling_of(model: ModelConfig) -> dict:
    """What a chat request that sets no sampling runs with on `model` (its `sampling`, the
    file's `defaults:`, the built-in values): the playground's placeholders."""
    request = build_chat_request(model, ChatAsk(messages=[Message(role="user", content="")]))
    sampling = request.sampling
    return {
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_tokens": request.max_tokens,
    }


@get("/ui/api/models/{model_id:str}/settings", **API)
async def settings(model_id: str, generation: Generation, viewer: Viewer) -> dict:
    """A model's effective settings (after `defaults:`), read-only, secrets redacted."""
    only_admin(viewer)
    model = known_model(generation, viewer, model_id)
    text = msgspec.json.encode(model).decode()
    return msgspec.json.decode(current_redactor().redact(text))


@get("/ui/api/models/{model_id:str}/events", **API)
async def model_events(
    model_id: str,
    state: State,
    generation: Generation,
    viewer: Viewer,
    after: Annotated[int, Parameter(ge=0, le=MAX_ID)] = 0,
    limit: Annotated[int, Parameter(ge=1, le=1000)] = 200,
) -> dict:
    """The model's own events (`model_log` lines of a process model among them) past `after`."""
    only_admin(viewer)
    known_model(generation, viewer, model_id)
    events = await asyncio.to_thread(
        state.activity.model_events, model_id, after=after, limit=limit
    )
    return {"model": model_id, "events": events}


@get("/ui/api/activity", **API)
async def activity(
    state: State,
    viewer: Viewer,
    model: str | None = None,
    key: str | None = None,
    status: Annotated[int | None, Parameter(ge=100, le=599)] = None,
    protocol: str | None = None,
    before: float | None = None,
    limit: Annotated[int, Parameter(ge=1, le=1000)] = 100,
) -> dict:
    """One row per request, newest first; filters are exact. A key sees its own rows only."""
    filters = {"model": model, "key": key, "status": status, "protocol": protocol}
    if viewer.key is not None:
        filters["key"] = viewer.key
    filters = {column: value for column, value in filters.items() if value is not None}
    rows = await asyncio.to_thread(state.activity.activity, filters, limit=limit, before=before)
    return {"rows": rows}


@get("/ui/api/activity/{request_id:str}", **API)
async def request_trail(request_id: str, state: State, viewer: Viewer) -> dict:
    """One request's row and its whole event trail (404 for another key's request)."""
    row, events = await asyncio.to_thread(state.activity.request, request_id)
    if row is None or (viewer.key is not None and row["key"] != viewer.key):
        raise ModelNotFound(f"no request {request_id!r} in the activity history")
    return {"row": row, "events": events}


@get("/ui/api/history", **API)
async def plots(state: State, viewer: Viewer, window: Literal["5m", "1h", "24h"] = "5m") -> dict:
    """Series for the plots over `window`; a key sees its own requests' only."""
    series = await asyncio.to_thread(history, state.activity, window, viewer.key)
    series["memory_budget_bytes"] = state.budget.total
    series["device_memory_bytes"] = state.device_memory_bytes
    return series


@get("/ui/api/reload", **API)
async def last_reload(state: State, viewer: Viewer) -> dict:
    """The last reload's outcome: `config_reloaded` (the diff) or `config_rejected`."""
    only_admin(viewer)
    event = await asyncio.to_thread(state.activity.last_event, "config_reloaded", "config_rejected")
    return {"last": event}


@get("/ui/api/cache", **API)
async def kv_cache(state: State, generation: Generation, viewer: Viewer) -> dict:
    """The KV cache's disk tier (`server.cache`): where, how full; and since the gateway
    started, hits and reused tokens by tier per model, misses, evictions, corrupt blocks."""
    only_admin(viewer)
    where = cache_dir(generation.config.server, state.reloader.path.resolve().parent)
    blocks, size = (0, 0) if where is None else await asyncio.to_thread(disk_usage, where.path)
    snapshot = state.metrics.kv_cache.snapshot()
    # A scripted model keeps no KV cache: its requests' misses would say nothing.
    weightless = {m.id for m in generation.config.models if m.engine == "scripted"}
    snapshot["models"] = {m: row for m, row in snapshot["models"].items() if m not in weightless}
    return {
        "dir": None if where is None else str(where.path),
        "max_bytes": 0 if where is None else where.max_bytes,
        "blocks": blocks,
        "disk_bytes": size,
        **snapshot,
    }


@get("/ui/api/mcp", **API)
async def mcp_servers(state: State, viewer: Viewer) -> dict:
    """The declared MCP servers: state (idle, running, failed, stopped), tools listed, last
    error; never started by this read."""
    only_admin(viewer)
    return {"servers": [server.describe() for server in state.mcp_pool.servers()]}


@get("/ui/api/benchmarks", **API)
async def benchmarks(state: State, viewer: Viewer) -> dict:
    """Benchmark runs kept, newest first, each with its settings."""
    only_admin(viewer)
    return {"runs": await asyncio.to_thread(state.activity.benchmarks)}


ROUTES = [
    models,
    settings,
    model_events,
    activity,
    request_trail,
    plots,
    last_reload,
    kv_cache,
    mcp_servers,
    benchmarks,
]
