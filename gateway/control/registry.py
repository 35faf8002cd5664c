"""Names to runners, one config generation at a time."""

from __future__ import annotations

from typing import NamedTuple

from engines.errors import BadRequest, ModelNotFound
from engines.log import emit
from engines.runner import Runner
from engines.runner.adapter_view import AdapterView
from gateway.control.keys import check_model_allowed, usable_models, visible_names
from schemas.config import GatewayConfig, ModelConfig
from schemas.events import RequestRouted


class Route(NamedTuple):
    runner: Runner
    requested: str
    alias: str | None
    fallback: bool
    model: ModelConfig  # as this request's config generation declares it

    @property
    def served(self) -> str:
        return self.runner.model.id


class Generation:
    """One config and the runners serving it. Never mutated: a reload builds a new one.

    A request resolves against exactly one generation, captured once when it arrives.
    """

    def __init__(self, config: GatewayConfig, runners: dict[str, Runner]) -> None:
        self.config = config
        self.runners = runners
        self.models = {m.id: m for m in config.models}
        self._names: dict[str, tuple[str, str | None]] = {}
        # Each adapter a model of its own, served by its base's runner (`runner_of`).
        self.views: dict[str, AdapterView] = {}
        for model in config.models:
            for adapter in model.adapters if model.id in runners else ():
                view = AdapterView(runners[model.id], model, adapter)
                self.views[adapter.id] = view
                self.models[adapter.id] = view.model
        self._listed = [*config.models, *(v.model for v in self.views.values())]
        for model in self._listed:
            self._names[model.id] = (model.id, None)
            for alias in model.aliases:
                self._names[alias] = (model.id, alias)

    def runner_of(self, model_id: str) -> Runner:
        """The runner serving a model id: its own, or an adapter's view of its base's."""
        return self.views[model_id] if model_id in self.views else self.runners[model_id]

    def with_lora(self, route: Route, asked: list | None) -> Route:
        """The route under a request's `lora` (llama.cpp's `[{id, scale}]`): one declared
        adapter of the base model named, at its scale; `BadRequest` naming the field for
        anything else. None or `[]`: the route as it is."""
        if not asked:
            return route
        if len(asked) > 1:
            raise BadRequest("$.lora: one adapter per request (each row of a batch runs one)")
        if isinstance(route.runner, AdapterView):
            raise BadRequest(
                f"$.lora: model {route.model.id!r} is an adapter already; name its base "
                f"{route.runner.base_id!r} with `lora`, or drop `lora`"
            )
        base = self.models[route.model.id]
        adapters = {a.id: a for a in base.adapters}
        entry = asked[0]
        if entry.id not in adapters:
            known = ", ".join(adapters) or "none"
            raise BadRequest(
                f"$.lora[0].id: {entry.id!r} is no adapter of model {base.id!r} (its adapters: "
                f"{known})"
            )
        view = AdapterView(route.runner, base, adapters[entry.id], entry.scale)
        return route._replace(runner=view)

    def resolve(self, name: str) -> Route:
        """The runner for a model id or alias, else the fallback, else `ModelNotFound`;
        `Forbidden` when the request's API key may not use the model it resolves to."""
        route = self._lookup(name)
        check_model_allowed(self.resolve_name, route.requested, route.served)
        return route

    def listed(self) -> list[ModelConfig]:
        """What the listing routes show: the models the request's API key may use."""
        return usable_models(self._listed, self.resolve_name)

    def resolve_name(self, name: str) -> str | None:
        """The model id an id or alias names, or None."""
        return self._names[name][0] if name in self._names else None

    def _lookup(self, name: str) -> Route:
        if name in self._names:
            model_id, alias = self._names[name]
            return Route(self.runner_of(model_id), name, alias, False, self.models[model_id])
        fallback = self.config.server.fallback
        if fallback is not None:
            model_id, _ = self._names[fallback]
            return Route(self.runner_of(model_id), name, None, True, self.models[model_id])
        known = ", ".join(visible_names(self._listed, self.resolve_name))
        raise ModelNotFound(f"model {name!r} not found; known models: {known}")


class Registry:
    """Holds the current config generation; a reload swaps the one reference."""

    def __init__(self, generation: Generation) -> None:
        self.current = generation


def announce(route: Route, *, stream: bool, protocol: str) -> Route:
    """Log which model serves the request (`request_routed`), and hand the route on."""
    emit(
        RequestRouted(
            requested=route.requested,
            served=route.served,
            alias=route.alias,
            fallback=route.fallback,
            stream=stream,
            protocol=protocol,
        )
    )
    return route
