"""Ollama's model routes: tags, ps, show and version, and the naming shared with chat.

Everything here reads the config and the runners' state; nothing loads a model.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from datetime import UTC, datetime
from typing import Any

import msgspec
from litestar import MediaType, Request, Response, get, post

from engines.base import EngineState
from engines.errors import BadRequest, ModelNotFound, SourceError
from engines.factory import known_context
from engines.runner import Runner
from engines.sources.hub import Snapshot, is_hub_source, locate, parse_hub_source
from gateway.canonical.model_facts import capabilities
from gateway.control.registry import Generation, Route, announce
from gateway.http.body import decode_body
from schemas import ollama as wire
from schemas.config import ModelConfig

# Ollama's default tag: clients write `smollm2:latest` for a model we call `smollm2`.
LATEST = ":latest"
# A model that never unloads (pinned, or `keep_alive` -1) expires at a date far in the
# future: Ollama shows keep_alive -1 the same way.
FAR_FUTURE = "2318-01-01T00:00:00Z"
# Ollama's ChatML Go template, for the scripted engine, which renders exactly that.
CHATML_TEMPLATE = (
    "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n"
    "{{ end }}<|im_start|>assistant\n"
)


def now() -> str:
    """The current time in RFC 3339, as Ollama writes `created_at`."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


# Ollama's tags say when a model was pulled; ours were "pulled" when this process started.
STARTED_AT = now()


def json_reply(body: msgspec.Struct) -> Response:
    """One JSON object (reply structs omit their defaults, which litestar's encoder keeps)."""
    return Response(content=msgspec.json.encode(body), media_type=MediaType.JSON)


def _names(generation: Generation) -> set[str]:
    return {n for m in generation.config.models for n in (m.id, *m.aliases)}


def local_name(generation: Generation, name: str) -> str:
    """`name` with a `:latest` tag dropped when only the bare name is known."""
    known = _names(generation)
    bare = name.removesuffix(LATEST)
    return bare if name not in known and bare in known else name


def ollama_route(generation: Generation, name: str, stream: bool) -> Route:
    """The route every Ollama generating route takes (chat, generate, embed, embeddings):
    `name:latest` as `name`, then ids, aliases and the fallback as everywhere; logged as the
    client wrote it."""
    route = generation.resolve(local_name(generation, name))._replace(requested=name)
    return announce(route, stream=stream, protocol="ollama")


def _details(model: ModelConfig) -> wire.ModelDetails:
    # Family, size and quantization are only known once the weights are read: left empty.
    family = "scripted" if model.engine == "scripted" else ""
    return wire.ModelDetails(
        format=model.engine,
        family=family,
        families=[family] if family else None,
        parameter_size="",
        quantization_level="",
    )


def _digest(model: ModelConfig) -> str:
    # One model, one digest: its aliases share it, as tags of one Ollama model do.
    return hashlib.sha256(model.id.encode()).hexdigest()


def _context(model: ModelConfig, runner: Runner) -> int | None:
    """The context window, as far as it is known without loading the model."""
    return runner.context or known_context(model)


def _cached(model: ModelConfig) -> Snapshot | None:
    """An `hf:` model's snapshot in the Hugging Face cache (read from disk, no network)."""
    if not is_hub_source(model.source):
        return None
    try:
        return locate(model.id, model.source)
    except SourceError:
        return None


def _modified(snapshot: Snapshot | None) -> str:
    """When the snapshot was downloaded; for local models, when this process started."""
    if snapshot is None:
        return STARTED_AT
    at = datetime.fromtimestamp(snapshot.path.stat().st_mtime, UTC)
    return at.isoformat(timespec="microseconds").replace("+00:00", "Z")


@get("/api/tags")
async def tags(generation: Generation) -> Response:
    """Every model id and alias, listed as Ollama lists pulled models; an `hf:` model with
    its cached size and commit."""
    listed = []
    for model in generation.listed():
        snapshot = _cached(model)
        listed += [
            wire.TagModel(
                name=name,
                model=name,
                modified_at=_modified(snapshot),
                size=snapshot.size if snapshot else 0,
                digest=_digest(model),
                details=_details(model),
                revision=snapshot.commit if snapshot else None,
            )
            for name in (model.id, *model.aliases)
        ]
    return json_reply(wire.Tags(models=listed))


def _expiry(runner: Runner) -> str:
    """When an idle on-demand model will unload; pinned ones never do."""
    unloads_in = runner.unloads_in()
    if unloads_in is None:
        return FAR_FUTURE
    at = datetime.now(UTC).timestamp() + unloads_in
    return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")


@get("/api/ps")
async def ps(generation: Generation) -> Response:
    """The models loaded now; reads runner state only, never loads one."""
    loaded = [
        wire.RunningModel(
            name=runner.model.id,
            model=runner.model.id,
            size=runner.memory_bytes,
            digest=_digest(runner.model),
            details=_details(runner.model),
            expires_at=_expiry(runner),
            size_vram=0,
            context_length=runner.context,
            pinned=runner.model.pinned,
        )
        for runner in generation.runners.values()
        if runner.state is EngineState.READY
    ]
    return json_reply(wire.Running(models=loaded))


def _parameters(model: ModelConfig) -> str:
    """The model's sampling defaults as Ollama's `name value` lines."""
    s = model.sampling
    pairs = [
        ("temperature", s.temperature),
        ("top_p", s.top_p),
        ("top_k", s.top_k),
        ("min_p", s.min_p),
        ("num_predict", s.max_tokens),
        ("seed", s.seed),
        ("num_ctx", model.context.max if isinstance(model.context.max, int) else None),
    ]
    return "\n".join(f"{name} {value}" for name, value in pairs if value is not None)


@post("/api/show", status_code=200)
async def show(request: Request, generation: Generation) -> Response:
    """What the config says about one model (no fallback here: an unknown name is a 404)."""
    data = await decode_body(request, wire.ShowRequest)
    if not (data.model or data.name):
        raise BadRequest("$.model: name the model to show")
    name = local_name(generation, data.model or data.name)
    # Only the models the request's key may use: another tenant's model is not found here.
    visible = generation.listed()
    model = next((m for m in visible if name in (m.id, *m.aliases)), None)
    if model is None:
        known = ", ".join(sorted(n for m in visible for n in (m.id, *m.aliases)))
        raise ModelNotFound(f"model {name!r} not found; known models: {known}")
    info: dict[str, Any] = {"general.architecture": model.engine}
    if is_hub_source(model.source):
        snapshot = _cached(model)
        info["general.source"] = model.source
        info["general.revision"] = parse_hub_source(model.id, model.source).revision
        info["general.commit"] = snapshot.commit if snapshot else None
        info["general.size"] = snapshot.size if snapshot else 0
    context = _context(model, generation.runner_of(model.id))
    if context:
        info[f"{model.engine}.context_length"] = context
    parameters = _parameters(model)
    lines = [f"FROM {model.id}", *(f"PARAMETER {p}" for p in parameters.splitlines() if p)]
    body = wire.ShowAnswer(
        modelfile="\n".join(lines) + "\n",
        parameters=parameters,
        template=CHATML_TEMPLATE if model.engine == "scripted" else "",
        details=_details(model),
        model_info=info,
        capabilities=capabilities(generation, model),
        modified_at=STARTED_AT,
    )
    return json_reply(body)


# The Ollama release whose API this adapter follows (think, streamed tool calls, embed
# `dimensions`, the `logprobs` fields, /api/ps `context_length`): clients read this number to
# decide which features to use, so it is Ollama's, not our package's.
OLLAMA_API_VERSION = "0.12.11"


@get("/api/version")
async def version() -> Response:
    """The Ollama API version the gateway matches (our own version is in `x-gateway-version`)."""
    return Response(
        content=msgspec.json.encode(wire.Version(version=OLLAMA_API_VERSION)),
        media_type=MediaType.JSON,
        headers={"x-gateway-version": importlib.metadata.version("mlx-gateway")},
    )


ROUTES = [tags, ps, show, version]
