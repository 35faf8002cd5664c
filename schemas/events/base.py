"""The base of every event the gateway logs: the name is the struct's tag, the payload its
fields (the kinds are in this package's modules, by what they tell of)."""

from __future__ import annotations

import msgspec


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="event"):
    """Base of every event; `request_id` is bound per request by the logger's context."""
