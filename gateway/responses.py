"""OpenAI responses."""

from __future__ import annotations

ROUTES: list = []
