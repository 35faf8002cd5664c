"""Ollama's `POST /api/pull` for the models the config declares: the real Hub download,
streamed as Ollama's progress lines (`pulling manifest`, `downloading FILE` with `total` and
`completed`, `success`). The YAML is the registry: a name it does not declare is refused.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import msgspec
from litestar import Request, Response, post
from litestar.response import Stream

from engines.errors import BadRequest, DownloadFailed, ModelNotFound, SourceError
from engines.sources.hub import fetch, is_hub_source, parse_hub_source
from engines.sources.hub_client import FileProgress
from gateway.control.registry import Generation
from gateway.http.body import decode_body
from gateway.ollama.models import json_reply, local_name
from schemas import ollama as wire
from schemas.config import ModelConfig

NDJSON = "application/x-ndjson"
LINE_INTERVAL_S = 0.1  # progress lines per file at most this often (plus each file's last)


def _encode(line: wire.PullProgress) -> bytes:
    return msgspec.json.encode(line) + b"\n"


@post("/api/pull", status_code=200)
async def pull(request: Request, generation: Generation) -> Response | Stream:
    """Download a declared `hf:` model into the cache now (nothing is loaded)."""
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
    lines = _progress(model, offline, generation)
    if data.stream:
        return Stream(lines, media_type=NDJSON)
    last = None
    async for line in lines:
        last = msgspec.json.decode(line)
    if "error" in last:
        raise DownloadFailed(last["error"])
    return json_reply(wire.PullProgress(status="success"))


async def _progress(
    model: ModelConfig, offline: bool, generation: Generation
) -> AsyncIterator[bytes]:
    yield _encode(wire.PullProgress(status="pulling manifest"))
    if not is_hub_source(model.source):  # on disk already (or no weights): nothing to fetch
        yield _encode(wire.PullProgress(status="success"))
        return
    loop = asyncio.get_running_loop()
    updates: asyncio.Queue[FileProgress | None] = asyncio.Queue()
    last_line: dict[str, float] = {}

    def report(progress: FileProgress) -> None:  # on the download thread
        now = time.monotonic()
        final = progress.total is not None and progress.done >= progress.total
        if final or now - last_line.get(progress.file, 0.0) >= LINE_INTERVAL_S:
            last_line[progress.file] = now
            loop.call_soon_threadsafe(updates.put_nowait, progress)

    def download():
        try:
            return fetch(model.id, model.source, token=model.hf_token, offline=offline,
                         progress=report, refresh=True)  # fmt: skip
        finally:
            loop.call_soon_threadsafe(updates.put_nowait, None)

    task = asyncio.ensure_future(asyncio.to_thread(download))
    # A client that leaves mid-stream leaves the download to finish into the cache; its
    # outcome is then read here, not reported as a never-retrieved task exception.
    task.add_done_callback(lambda done: done.cancelled() or done.exception())
    while (progress := await updates.get()) is not None:
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
    try:
        snapshot = await task
        if parse_hub_source(model.id, model.source).file:
            yield _encode(wire.PullProgress(status="converting to MLX"))
            from engines.sources.resolve import resolve_source

            await asyncio.to_thread(resolve_source, model.id, model.source)
    except SourceError as error:
        yield _encode_error(error.reason)
        return
    runner = generation.runners.get(model.id)
    if runner is not None:
        runner.forget_failure()  # a model that failed for want of its files may load now
    revision = parse_hub_source(model.id, model.source).revision
    yield _encode(wire.PullProgress(status=f"resolved {revision} to {snapshot.commit}"))
    yield _encode(wire.PullProgress(status="success"))


def _encode_error(reason: str) -> bytes:
    return msgspec.json.encode({"error": reason}) + b"\n"


ROUTES = [pull]
