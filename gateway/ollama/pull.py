"""Ollama's `POST /api/pull` for the models the config declares: the real Hub download,
streamed as Ollama's progress lines (`pulling manifest`, `downloading FILE` with `total` and
`completed`, `success`). The YAML is the registry: a name it does not declare is refused.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator

import msgspec
from litestar import Request, Response, post

from engines.download import convert, converts
from engines.download import pull as pull_source
from engines.errors import BadRequest, DownloadFailed, ModelNotFound, SourceError
from engines.job import arrived
from engines.pulls import PullPool, PullStopped
from engines.sources.hub import Snapshot, is_hub_source, parse_hub_source
from engines.sources.hub_client import FileProgress
from gateway.control.registry import Generation
from gateway.http.auth import admin_refusal
from gateway.http.body import decode_body
from gateway.http.streaming import Streamed, stream_body, unless_client_leaves
from gateway.ollama.models import json_reply, local_name
from schemas import ollama as wire
from schemas.config import ModelConfig

NDJSON = "application/x-ndjson"
LINE_INTERVAL_S = 0.1  # progress lines per file at most this often (plus each file's last)


def _encode(line: wire.PullProgress) -> bytes:
    return msgspec.json.encode(line) + b"\n"


@post("/api/pull", status_code=200, opt={"admin_too": True})
async def pull(request: Request, generation: Generation) -> Response | Streamed:
    """Download a declared `hf:` model into the cache now (nothing is loaded).

    A branch-tracked model moves to the branch's newest commit only for the admin: any
    other caller fetches the commit it serves now (the one the cache last resolved).
    """
    data = await decode_body(request, wire.PullRequest)
    if not (data.model or data.name):
        raise BadRequest("$.model: name the model to pull")
    if data.insecure:  # no registry of our own whose TLS checks could be skipped
        raise BadRequest("$.insecure: not supported; the Hub is reached as HF_ENDPOINT says")
    name = local_name(generation, data.model or data.name)
    model_id = generation.resolve_name(name)
    if model_id is None:  # never the fallback: a pull names exactly what it fetches
        known = ", ".join(sorted(n for m in generation.config.models for n in (m.id, *m.aliases)))
        raise ModelNotFound(
            f"model {name!r} is not declared in the gateway's config, so it cannot be pulled: "
            f"add it to models.yaml (source: hf:ORG/REPO); known models: {known}"
        )
    generation.resolve(name)  # a key limited to other models may not pull this one
    model = generation.models[model_id]
    offline = generation.config.server.offline
    move = admin_refusal(request) is None
    arrived()  # a download of minutes, not a request on its way to a model's queue
    lines = _start(model, offline, move, generation, request.app.state.pulls)  # 429: all busy
    if data.stream:
        # The stream helper: the client watched (gone: the transfer stops at its next
        # chunk), and a failure ends the stream with Ollama's error line.
        return Streamed(stream_body(request, lines, _error_tail, _no_cleanup), media_type=NDJSON)
    last = await unless_client_leaves(request, _last(lines))  # a client gone stops its pull
    if "error" in last:
        raise DownloadFailed(last["error"])
    return json_reply(wire.PullProgress(status="success"))


def _start(
    model: ModelConfig, offline: bool, move: bool, generation: Generation, pulls: PullPool
) -> AsyncIterator[bytes]:
    """Start the download on a pull thread (`QueueFull` when none is free); its lines."""
    if not is_hub_source(model.source):  # on disk already (or no weights): nothing to fetch
        return _lines("pulling manifest", "success")
    loop = asyncio.get_running_loop()
    updates: asyncio.Queue[FileProgress | str | None] = asyncio.Queue()
    last_line: dict[str, float] = {}
    left = threading.Event()  # set once the client is gone: the transfer stops

    def report(progress: FileProgress) -> None:  # on the download thread, per chunk
        if left.is_set():
            raise PullStopped("the client left")
        now = time.monotonic()
        final = progress.total is not None and progress.done >= progress.total
        if final or now - last_line.get(progress.file, 0.0) >= LINE_INTERVAL_S:
            last_line[progress.file] = now
            loop.call_soon_threadsafe(updates.put_nowait, progress)

    def download() -> Snapshot:
        try:
            snapshot = pull_source(model, offline=offline, progress=report, refresh=move)
            if converts(model):
                loop.call_soon_threadsafe(updates.put_nowait, "converting to MLX")
                convert(model)
            return snapshot
        finally:
            loop.call_soon_threadsafe(updates.put_nowait, None)

    task = pulls.run(download)
    # A client that leaves stops the transfer at its next chunk (a load of the model fetches
    # for itself, on its model's thread, and goes on); the outcome is then read here, not
    # reported as a never-retrieved exception.
    task.add_done_callback(lambda done: done.cancelled() or done.exception())
    return _follow(model, generation, task, updates, left)


async def _follow(
    model: ModelConfig,
    generation: Generation,
    task: asyncio.Future[Snapshot],
    updates: asyncio.Queue[FileProgress | str | None],
    left: threading.Event,
) -> AsyncIterator[bytes]:
    try:
        yield _encode(wire.PullProgress(status="pulling manifest"))
        while (progress := await updates.get()) is not None:
            if isinstance(progress, str):
                yield _encode(wire.PullProgress(status=progress))
                continue
            yield _encode(
                wire.PullProgress(
                    status=f"downloading {progress.file}",
                    # The ollama CLI draws one bar per digest; a small file without an LFS
                    # digest is keyed by its name instead.
                    digest=progress.digest or f"file:{progress.file}",
                    total=progress.total,
                    completed=progress.done,
                )
            )
        snapshot = await task
    except SourceError as error:
        yield _encode_error(error.reason)
        return
    finally:  # the pull ended, or its client left (the stream was cancelled or closed)
        left.set()
    runner = generation.runners.get(model.id)
    if runner is not None:
        runner.forget_failure()  # a model that failed for want of its files may load now
    revision = parse_hub_source(model.id, model.source).revision
    yield _encode(wire.PullProgress(status=f"resolved {revision} to {snapshot.commit}"))
    yield _encode(wire.PullProgress(status="success"))


async def _lines(*statuses: str) -> AsyncIterator[bytes]:
    for status in statuses:
        yield _encode(wire.PullProgress(status=status))


async def _last(lines: AsyncIterator[bytes]) -> dict:
    last: dict = {}
    async for line in lines:
        last = msgspec.json.decode(line)
    return last


def _encode_error(reason: str) -> bytes:
    return msgspec.json.encode({"error": reason}) + b"\n"


def _error_tail(_status: int, message: str, _kind: str) -> bytes:
    return _encode_error(message)


async def _no_cleanup() -> None:
    """Nothing to stop beyond the lines themselves: closing them ends the transfer."""


ROUTES = [pull]
