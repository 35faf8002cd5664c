"""Ollama's request options and `keep_alive`: each honoured, or refused by name.

`options` map onto the canonical request (sampling and its penalties, `num_predict`, `stop`,
`num_ctx` as the request's own window); Ollama's other options are refused when set.
`keep_alive` sets how long an on-demand model stays loaded after the request (a duration,
`0` unloads it right after, a negative value keeps it); pinned models stay whatever it says
(`/api/ps` shows them as `pinned`).
"""

from __future__ import annotations

import math
import re
from typing import Any

import msgspec

from engines.errors import BadRequest
from engines.runner import Runner
from engines.runner.keep import KeepAlive
from schemas import ollama as wire

# Go's time.ParseDuration units, which Ollama's `keep_alive` strings use ("5m", "1h30m").
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


# Ollama's options that the gateway does not apply: typed `Any` in `wire.Options`.
UNSUPPORTED = [f.name for f in msgspec.structs.fields(wire.Options) if f.type is Any]


def keep_alive_seconds(value: str | float | None) -> float | None:
    """`keep_alive` in seconds (inf: stay loaded); None when the request did not say.

    A number is seconds, as Ollama reads it; a string is a Go duration or a number of
    seconds; anything negative keeps the model loaded.
    """
    if value is None:
        return None
    seconds = float(value) if isinstance(value, int | float) else _duration(value.strip())
    if math.isnan(seconds):
        raise BadRequest(f"$.keep_alive: {value!r} is not a duration")
    return math.inf if seconds < 0 else seconds


def _duration(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    parts = _PART.findall(body)
    if not body or "".join(n + u for n, u in parts) != body:
        raise BadRequest(
            f'$.keep_alive: {text!r} is not a duration; send seconds or "5m", "1h30m", "0", "-1"'
        )
    return sign * sum(float(n) * _UNITS[u] for n, u in parts)


async def keep(runner: Runner, value: str | float | None, *, now: bool = False) -> bool:
    """Ask the model's runner to keep it as the request's `keep_alive` says (on-demand
    models; pinned ones stay); with `now` (a load request) at once. True: it unloaded."""
    return await runner.reside(KeepAlive(keep_alive_seconds(value), now=now))


def options(value: wire.Options | None) -> dict[str, Any]:
    """Ollama's options as `ChatAsk` fields; unsupported ones set: 400."""
    o = value or wire.Options()
    refused = [name for name in UNSUPPORTED if getattr(o, name) is not None]
    if refused:
        raise BadRequest(
            f"$.options.{refused[0]}: not supported by this gateway (supported: num_predict, "
            "temperature, top_p, top_k, min_p, stop, seed, num_ctx, repeat_penalty, "
            "repeat_last_n, presence_penalty, frequency_penalty)"
        )
    return {
        # -1 (no limit) and -2 (fill the context) mean the model's default here; so does 0.
        "max_tokens": o.num_predict if o.num_predict and o.num_predict > 0 else None,
        "temperature": o.temperature,
        "top_p": o.top_p,
        "top_k": o.top_k,
        "min_p": o.min_p,
        "seed": o.seed,
        "repeat_penalty": o.repeat_penalty,
        "repeat_last_n": o.repeat_last_n,
        "presence_penalty": o.presence_penalty,
        "frequency_penalty": o.frequency_penalty,
        "stop": [o.stop] if isinstance(o.stop, str) else o.stop,
        "window": o.num_ctx,
    }
