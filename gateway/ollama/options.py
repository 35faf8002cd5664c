"""Ollama's request options and `keep_alive`: each honoured, or refused by name.

`options` map onto the canonical request (sampling and its penalties, `num_predict`, `stop`,
`num_ctx` as the request's own window); what changes no output (the runner's hardware
hints, `mirostat: 0` and other samplers at Ollama's "off") is accepted, not applied, and
named in an `options_ignored` event; Ollama's other options are refused by name when set.
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
from engines.log import emit
from engines.runner import Runner
from engines.runner.keep import KeepAlive
from schemas import ollama as wire
from schemas.events import OptionsIgnored

# Go's time.ParseDuration units, which Ollama's `keep_alive` strings use ("5m", "1h30m").
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


# Ollama's options that the gateway does not apply: typed `Any` in `wire.Options`.
UNSUPPORTED = [f.name for f in msgspec.structs.fields(wire.Options) if f.type is Any]
# Ollama's runner's hardware hints: how it computes, not what (no output changes).
HINTS = [
    "num_batch",
    "num_gpu",
    "main_gpu",
    "low_vram",
    "use_mmap",
    "use_mlock",
    "num_thread",
    "numa",
]
# Samplers at Ollama's own "off" value, which is what runs here anyway.
OFF = {"mirostat": 0, "typical_p": 1.0, "tfs_z": 1.0}
# Mirostat's settings, unused while it is off.
MIROSTAT = ["mirostat_tau", "mirostat_eta"]
SUPPORTED = (
    "num_predict, temperature, top_p, top_k, min_p, stop, seed, num_ctx, repeat_penalty, "
    "repeat_last_n, presence_penalty, frequency_penalty; accepted and ignored: "
    + ", ".join([*HINTS, *(f"{name}: {value:g}" for name, value in OFF.items()), *MIROSTAT])
)


def _is(value: Any, off: float) -> bool:
    """Whether an option's value is the sampler's off value (a number, not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and value == off


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
    """Ollama's options as `ChatAsk` fields. What changes no output is accepted and named
    in an `options_ignored` event; what would change it and is not applied: 400."""
    o = value or wire.Options()
    ignored = [name for name in HINTS if getattr(o, name) is not None]
    for name in UNSUPPORTED:
        set_to = getattr(o, name)
        if set_to is None:
            continue
        mirostat_off = not o.mirostat  # unset or 0: its settings change nothing
        if name in OFF and _is(set_to, OFF[name]) or name in MIROSTAT and mirostat_off:
            ignored.append(name)
            continue
        raise BadRequest(
            f"$.options.{name}: not supported by this gateway (supported: {SUPPORTED})"
        )
    if ignored:
        reason = "they change no output here: hardware hints, or samplers off"
        emit(OptionsIgnored(options=sorted(ignored), reason=reason))
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
