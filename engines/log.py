"""The one door events leave by: a struct from `schemas.events` becomes one JSON line."""

from __future__ import annotations

import msgspec
import structlog

from schemas.events import Event

_logger = structlog.get_logger("gateway")


def emit(event: Event, *, level: str = "info") -> None:
    """Log `event` under its tag with its fields; context (request_id) comes from structlog."""
    fields = msgspec.structs.asdict(event)
    name = type(event).__struct_config__.tag
    getattr(_logger, level)(name, **fields)
