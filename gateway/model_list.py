"""`GET /v1/models` and `GET /v1/models/{id}`: one path, two protocols. The list and each
card come in OpenAI's shape, or Anthropic's when the client sends `anthropic-version` (the
Anthropic SDK's `models.retrieve`, Claude Code's model check).

It names models as the listings do: ids and aliases, and for Anthropic clients the `claude-`
names of chat models. There is no fallback here: a name the config does not hold is a 404, as
is a model the request's API key may not use (listings show a limited key only its own).
"""

from __future__ import annotations

import time

from litestar import Request, get

from engines.errors import ModelNotFound
from gateway.anthropic.models import model_page
from gateway.control.registry import Generation
from schemas import openai as wire
from schemas.anthropic import ModelInfo, ModelPage


@get("/v1/models/{model_id:path}")
async def retrieve_model(
    request: Request, generation: Generation, model_id: str
) -> wire.ModelCard | ModelInfo:
    """One model's card; an alias's card says which id it routes to (`alias_of`)."""
    name = model_id.lstrip("/")
    if "anthropic-version" in request.headers:
        card = next((c for c in model_page(generation).data if c.id == name), None)
        if card is None:
            raise _not_found(name, [c.id for c in model_page(generation).data])
        return card
    created = int(time.time())
    for model in generation.listed():
        if name == model.id:
            return wire.ModelCard(id=name, created=created, aliases=list(model.aliases))
        if name in model.aliases:
            return wire.ModelCard(id=name, created=created, alias_of=model.id)
    known = [n for m in generation.listed() for n in (m.id, *m.aliases)]
    raise _not_found(name, known)


def _not_found(name: str, known: list[str]) -> ModelNotFound:
    return ModelNotFound(f"model {name!r} not found; known models: {', '.join(sorted(known))}")


@get("/v1/models")
async def list_models(request: Request, generation: Generation) -> wire.ModelList | ModelPage:
    """Every model id and alias this config generation answers to.

    Anthropic clients (Claude Code among them) send `anthropic-version` and get Anthropic's
    model page, which also lists each chat model under its `claude-` name.
    """
    if "anthropic-version" in request.headers:
        return model_page(generation)
    created = int(time.time())
    cards = []
    for model in generation.listed():
        cards.append(wire.ModelCard(id=model.id, created=created, aliases=list(model.aliases)))
        cards += [wire.ModelCard(id=a, created=created, alias_of=model.id) for a in model.aliases]
    return wire.ModelList(data=cards)


ROUTES = [list_models, retrieve_model]
