"""`create_app`: the whole gateway as one Litestar constructor call."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from litestar import Litestar
from litestar.datastructures import State
from litestar.di import Provide
from litestar.types import ASGIApp, Receive, Scope, Send

from engines.errors import ConfigInvalid
from engines.job import job_scope
from engines.platform import PlatformPath
from engines.pulls import PullPool
from engines.residency import MemoryBudget, auto_budget
from engines.tasks import Tasks
from gateway import model_list
from gateway.anthropic import errors as anthropic_errors
from gateway.anthropic import messages as anthropic_messages
from gateway.audio import routes as audio_routes
from gateway.audio import speech as speech_routes
from gateway.batches import files as batch_files
from gateway.batches import routes as batch_routes
from gateway.batches.runner import BatchRunner
from gateway.batches.store import BatchStore
from gateway.control.key_names import key_names
from gateway.control.limits import KeyLimiter
from gateway.control.registry import Generation, Registry
from gateway.control.reload import Reloader, make_runner
from gateway.control.state import state_dir
from gateway.http.auth import require_api_key
from gateway.http.errors import error_response
from gateway.http.exposure import cors_config, host_guard, origin_guard
from gateway.http.limits import request_limits
from gateway.http.middleware import request_events
from gateway.http.protocols import Protocols
from gateway.http.shutdown import Admission
from gateway.logs.setup import PRESENTED, LogScope, Redactor
from gateway.mcp import routes as mcp_routes
from gateway.mcp.pool import McpPool
from gateway.ollama import chat as ollama_chat
from gateway.ollama import embed as ollama_embed
from gateway.ollama import errors as ollama_errors
from gateway.ollama import models as ollama_models
from gateway.ollama import pull as ollama_pull
from gateway.openai import chat as openai_chat
from gateway.openai import completions, responses
from gateway.openai import embeddings as openai_embeddings
from gateway.openai import errors as openai_errors
from gateway.openai.background import BackgroundResponses
from gateway.openai.response_store import ResponseStore, store_path
from gateway.ops import admin, benchmark, controls, health, playground, ui, ui_api, viewer
from gateway.ops import batches as admin_batches
from gateway.ops import metrics as metrics_routes
from gateway.ops.activity.capture import Capture
from gateway.ops.activity.sampler import sample_runners
from gateway.ops.activity.store import ActivityStore, activity_path
from gateway.ops.events_feed import EventsFeed
from gateway.ops.metrics import Metrics
from gateway.rerank import errors as rerank_errors
from gateway.rerank import routes as rerank_routes
from schemas.config import GatewayConfig, seconds, size_bytes


def provide_generation(state: State) -> Generation:
    """Each request sees exactly one config generation, captured as it arrives."""
    return state.registry.current


def make_protocols() -> Protocols:
    """Every protocol, registered with http/ (its error envelope, its rate-limit headers,
    the requests it speaks on): OpenAI's is the default, for every path no other claims."""
    protocols = Protocols(default=openai_errors.PROTOCOL)
    anthropic_errors.register(protocols)
    ollama_errors.register(protocols)
    rerank_errors.register(protocols)
    return protocols


def create_app(
    config: GatewayConfig,
    platform: PlatformPath,
    config_path: Path,
    *,
    bind_host: str | None = None,
) -> Litestar:
    """The gateway for `config` (read from `config_path`, which reloads re-read).

    `bind_host` is the address served on; on loopback, requests must name a loopback Host.
    """
    total = size_bytes(config.server.memory_budget) or auto_budget(
        platform.memory_bytes, platform.cuda
    )
    budget = MemoryBudget(
        total, swap_wait=lambda: seconds(registry.current.config.server.max_swap_wait)
    )
    base_dir = config_path.resolve().parent
    # Opened (and checked) at start: what is wrong with it is said before the first request.
    responses_store = ResponseStore(config.server, base_dir)
    # Uploaded files and batches (gateway/batches/): what a restart resumes.
    batch_store = BatchStore(config.server, base_dir)
    batch_runner = BatchRunner(batch_store, lambda: registry.current.config)
    # `background: true` responses: worked through this app's door, stored in the store above.
    background_responses = BackgroundResponses(responses_store)
    # Each key's limits; every runner tells it the tokens a keyed request spends, by the key's
    # label on the request (schemas/canonical.py `Client`).
    limiter = KeyLimiter()
    runners = {
        m.id: make_runner(m, config, platform, base_dir, budget, limiter.spend)
        for m in config.models
    }
    registry = Registry(Generation(config, runners))
    reloader = Reloader(registry, config_path, platform, budget, limiter.spend)
    admission = Admission()
    protocols = make_protocols()
    background = Tasks()
    pulls = PullPool()  # /api/pull's own threads: downloads never take the default executor's
    feed = EventsFeed()
    admission.on_drain.append(feed.close)
    admission.on_drain.append(batch_runner.halt)
    metrics = Metrics(registry, admission)
    # This app's listeners, taps and redactor: entered for its lifespan and each request.
    redactor = Redactor()
    redactor.follow(lambda: registry.current.config, config_path)
    log_scope = LogScope(redactor)
    inflight = controls.InFlight()
    # What a key without `label` is named by wherever the key may not be: its rows, its
    # counts, its events (the secret in state_dir, so names outlive the process).
    names = key_names(state_dir(config.server, base_dir))
    activity = ActivityStore(
        activity_path(store_path(config.server, base_dir)),
        lambda: registry.current.config.server.activity,
        lambda: viewer.row_key(registry.current.config.server, names, PRESENTED.get()),
    )
    capture = Capture(activity, lambda: registry.current.config)
    mcp_pool = McpPool(base_dir)  # the declared MCP servers, each started at first use
    mcp_pool.follow(config.mcp_servers)
    # A reload stops the servers it removes or changes (those kept run on).
    reloader.after.append(lambda applied: mcp_pool.follow(applied.mcp_servers))

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        log_scope.enter()  # runners, the watch and signal handlers start from here
        feed.bind()
        log_scope.taps.append(feed.publish)
        log_scope.taps.append(activity.tap)
        sampler = background.spawn(sample_runners(activity, registry), "activity sampler")
        log_scope.listeners.append(metrics.observe)
        log_scope.listeners.append(capture.observe)
        for runner in registry.current.runners.values():
            await runner.start()
        # What startup built (runners, configs, loaded weights' wrappers) lives as long as
        # the process: exempt it from the cyclic GC, whose full passes over it would
        # otherwise stall the loop for a large part of a second whenever another thread (a
        # reload's parse) allocates. Process-wide, and it only ever takes work away.
        gc.collect()
        gc.freeze()
        loop.add_signal_handler(signal.SIGHUP, _reload_soon, reloader, background)
        watch = config.server.watch_config
        watcher = background.spawn(reloader.watch(), "config watch") if watch else None
        await batch_runner.start()  # the batches a previous run left live go on
        await background_responses.start()  # what a previous run left running: failed
        try:
            yield
        finally:
            await batch_runner.stop()  # lines in flight are left to run again at next start
            await background_responses.stop()  # what still runs: failed, saying so
            loop.remove_signal_handler(signal.SIGHUP)
            if watcher:
                watcher.cancel()
            pulls.close()
            await mcp_pool.close()
            for runner in registry.current.runners.values():
                await runner.stop("shutdown")
            sampler.cancel()
            log_scope.taps.remove(feed.publish)
            log_scope.taps.remove(activity.tap)
            activity.close()
            batch_store.close()
            log_scope.listeners.remove(metrics.observe)
            log_scope.listeners.remove(capture.observe)

    app = Litestar(
        route_handlers=[
            *openai_chat.ROUTES,
            *completions.ROUTES,
            *responses.ROUTES,
            *openai_embeddings.ROUTES,
            *batch_files.ROUTES,
            *batch_routes.ROUTES,
            *model_list.ROUTES,
            *anthropic_messages.ROUTES,
            *ollama_chat.ROUTES,
            *ollama_models.ROUTES,
            *ollama_pull.ROUTES,
            *ollama_embed.ROUTES,
            *rerank_routes.ROUTES,
            *audio_routes.ROUTES,
            *speech_routes.ROUTES,
            *health.ROUTES,
            *admin.ROUTES,
            *admin_batches.ROUTES,
            *metrics_routes.ROUTES,
            *ui.ROUTES,
            *ui_api.ROUTES,
            *controls.ROUTES,
            *benchmark.ROUTES,
            *playground.ROUTES,
            *mcp_routes.ROUTES,
        ],
        dependencies={"generation": Provide(provide_generation, sync_to_thread=False)},
        exception_handlers={Exception: error_response},
        # Outermost first: every request is Host- and Origin-checked, admitted (or 503 while
        # draining), and held to its size limits before any handler reads it.
        middleware=[host_guard, origin_guard, admission.middleware, request_limits],
        guards=[require_api_key],
        request_max_body_size=None,  # limits.max_body_bytes rules, in request_limits
        cors_config=cors_config(config.server, protocols.cors_headers()),
        lifespan=[lifespan],
        state=State(
            {
                "registry": registry,
                "mcp_pool": mcp_pool,
                "reloader": reloader,
                "budget": budget,
                "admission": admission,
                "feed": feed,
                "metrics": metrics,
                "limiter": limiter,
                "key_names": names,
                "protocols": protocols,
                "bind_host": bind_host,
                "log_scope": log_scope,
                "responses_store": responses_store,
                "batch_store": batch_store,
                "batch_runner": batch_runner,
                "background_responses": background_responses,
                "pulls": pulls,
                # The ops page's history, requests in flight, and the device's memory.
                "activity": activity,
                "inflight": inflight,
                "device_memory_bytes": platform.memory_bytes,
                # Read at start, like the CORS headers they must agree with.
                "cors_origins": tuple(config.server.cors_origins),
            }
        ),
        openapi_config=None,
        # litestar's default would configure the root logger (a process global) with its own
        # stderr handler; events are ours (structlog), library logs the CLI's (`repeats`).
        logging_config=None,
    )
    # Around the router too, not only the routes: a path no route matches (Claude Code's
    # `HEAD /`) or a method a route lacks is logged and carries `x-request-id` like the rest.
    # Inside it, the requests in flight by id (what the ops page's cancel control reaches)
    # and the bodies of those to models with `capture: true`.
    # Inside the events, each request's jobs end with it, however it ends (engines/job.py).
    handler = inflight.wrap(capture.wrap(app.asgi_handler))
    app.asgi_handler = request_events(jobs_end_with_request(handler))
    batch_runner.bind(app)  # each batch line is a request to this app
    background_responses.bind(app)  # so is each background response's work
    return app


def jobs_end_with_request(app: ASGIApp) -> ASGIApp:
    """ASGI middleware: an HTTP request is one job scope, so whatever of its jobs still
    waits or runs when it ends is withdrawn (engines/job.py `job_scope`)."""

    async def scoped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        with job_scope():
            await app(scope, receive, send)

    return scoped


def _reload_soon(reloader: Reloader, background: Tasks) -> None:
    """SIGHUP: reload in the background; a refusal is already logged as config_rejected."""

    async def reload() -> None:
        with contextlib.suppress(ConfigInvalid):
            await reloader.reload("sighup")

    background.spawn(reload(), "sighup reload")
