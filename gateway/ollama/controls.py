"""Ollama's output controls in canonical form (`format`, `logprobs`, `top_logprobs`), and
logprobs in Ollama's shape."""

from __future__ import annotations

from typing import Any

from engines.errors import BadRequest
from schemas import ollama as wire
from schemas.canonical import OutputControls, OutputFormat
from schemas.logprobs import LogprobsRequest, TokenLogprob


def controls(format: Any, logprobs: bool | None, top: int | None) -> OutputControls:
    """Ollama's `format` ("json", or a JSON Schema) and `logprobs`/`top_logprobs`."""
    fmt = None
    if format == "json":
        fmt = OutputFormat(field="$.format")
    elif isinstance(format, dict):
        fmt = OutputFormat(schema=format, field="$.format")
    elif format not in (None, ""):
        raise BadRequest('$.format must be "json" or a JSON Schema object')
    if top and not logprobs:
        raise BadRequest("$.top_logprobs needs logprobs: true")
    asked = LogprobsRequest(top=top or 0) if logprobs else None
    return OutputControls(format=fmt, logprobs=asked)


def wire_logprobs(tokens: list[TokenLogprob]) -> list[wire.Logprob] | None:
    """Logprobs in Ollama's shape (token, logprob, bytes, top_logprobs)."""
    if not tokens:
        return None
    return [
        wire.Logprob(
            token=t.token,
            logprob=t.logprob if t.logprob is not None else 0.0,
            bytes=t.bytes,
            top_logprobs=[
                wire.TopLogprob(token=a.token, logprob=a.logprob, bytes=a.bytes) for a in t.top
            ]
            or None,
        )
        for t in tokens
    ]
