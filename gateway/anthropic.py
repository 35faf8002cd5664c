"""The Anthropic Messages protocol."""

from __future__ import annotations

ROUTES: list = []
