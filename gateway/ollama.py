"""The Ollama protocol."""

from __future__ import annotations

ROUTES: list = []
