"""OpenAI completions."""

from __future__ import annotations

ROUTES: list = []
