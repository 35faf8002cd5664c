"""The one door events leave by: a struct from `schemas.events` becomes one JSON line."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import Any

import msgspec
import structlog

from schemas.events import Event

_logger = structlog.get_logger("gateway")
# What `emit` logs through: the lazy proxy above until the log is set up, then one logger
# bound to that set-up (`bind_logger`). The proxy binds a new logger on every call, a third
# of an event's cost, most events being emitted on the event loop (bench/log_events.py).
_bound: Any = _logger

# Called with every event emitted, whatever the log level lets through (metrics count them
# all); in the emitter's context, so `request_id` is at hand. A context variable, not a
# process global: each app sets its own list for its lifespan and for each of its requests,
# so two apps in one process never hear each other's events.
LISTENERS: ContextVar[Sequence[Callable[[Event], None]]] = ContextVar("event_listeners", default=())
# In a model's own process (`isolation: process`) events are not logged there: they go to
# the gateway with their level (engines/llm/isolated.py), which logs them and tells its
# listeners, so they join its stream and its metrics as a threaded model's do.
RELAY: ContextVar[Callable[[Event, str], None] | None] = ContextVar("event_relay", default=None)

# The fields every event of the current request carries (`request_id`, `key_label`), in one
# context variable holding a dict that is replaced, never changed in place (a task copies
# the context it starts in, dict and all). Not structlog's contextvars: each of its keys is
# a variable of its own, so reading them (`merge_contextvars`, `get_contextvars`) walks
# every variable of the context, litestar's and asyncio's too, some 14 times a request on
# the event loop the model threads share the GIL with.
_BOUND: ContextVar[dict[str, Any]] = ContextVar("event_fields", default={})  # noqa: B039 - never mutated


def emit(event: Event, *, level: str = "info") -> None:
    """Log `event` under its tag with its fields; the request's (`bind`) join it as it renders."""
    if (relay := RELAY.get()) is not None:
        relay(event, level)
        return
    fields = msgspec.structs.asdict(event)
    name = type(event).__struct_config__.tag
    getattr(_bound, level)(name, **fields)
    for listener in LISTENERS.get():
        listener(event)


def bound() -> dict[str, Any]:
    """The current request's event fields (read only)."""
    return _BOUND.get()


def bind(**fields: Any) -> None:
    """Add `fields` to every event the current context emits from now on."""
    _BOUND.set(_BOUND.get() | fields)


def bind_only(**fields: Any) -> None:
    """Make `fields` the only ones every event of the current context carries."""
    _BOUND.set(fields)


def merge_bound(_logger: Any, _method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """structlog processor: the bound fields join the event, after its own (which win)."""
    for key, value in _BOUND.get().items():
        event_dict.setdefault(key, value)
    return event_dict


def bind_logger() -> None:
    """Emit through a logger bound to structlog's configuration as it is now (after
    `structlog.configure`). Its processors stay the configured list itself, so
    `structlog.testing.capture_logs`, which edits that list in place, still sees events."""
    global _bound
    _bound = _logger.bind()
