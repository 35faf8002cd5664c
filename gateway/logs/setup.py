"""structlog set-up: one JSON object per line, to stdout and optionally a file, secrets redacted.

Every line passes the redactor as it is rendered, and every rendered line is offered to
the taps (the ops page's live feed), so what a watcher sees is exactly what the log holds.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
import time
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path
from typing import IO, Any

import msgspec
import structlog

from engines.log import LISTENERS, bind_logger, merge_bound
from gateway.control.yaml_source import ENV_REF
from gateway.logs.writer import LineWriter
from schemas.config import ApiKey, GatewayConfig
from schemas.events import Event

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
REDACTED = "***"
# Values read from the environment shorter than this are not taken for secrets: a port or
# a flag redacted would garble every line, and a secret that short protects nothing.
MIN_ENV_SECRET = 8
SECRET_ENV_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.IGNORECASE)

# A bearer token anywhere in a text, in any case (an upstream's error quoting the header it
# was sent): the scheme stays, the token goes, whether the gateway knew it or not.
BEARER = re.compile(r"(?i)\b(bearer)(\s+)[A-Za-z0-9\-._~+/]{8,}=*")

# The Authorization / x-api-key values the current request presented, right or wrong.
PRESENTED: ContextVar[tuple[str, ...]] = ContextVar("presented_secrets", default=())


class Redactor:
    """Replaces every known secret (in any case) and every bearer token inside every string
    of an event with `***`.

    Known secrets: the API keys and the admin key of the config in force, the values the
    config read from `${VAR}` (MIN_ENV_SECRET characters or more), and the keys the current
    request presented. A secret once known stays known, across reloads.
    """

    def __init__(self) -> None:
        self._config: Callable[[], GatewayConfig] | None = None
        self._path: Path | None = None
        self._seen: GatewayConfig | None = None
        self._known: set[str] = set()
        self._ordered: tuple[str, ...] = ()

    def follow(self, config: Callable[[], GatewayConfig], path: Path) -> None:
        """Take secrets from `config()` (the generation in force) and the file at `path`."""
        self._config, self._path, self._seen = config, path, None

    def secrets(self) -> tuple[str, ...]:
        current = self._config() if self._config else None
        if current is not None and current is not self._seen:
            self._seen = current
            self._known |= config_secrets(current, self._path)
            # Longest first, so a secret containing another is replaced whole.
            self._ordered = tuple(sorted(self._known, key=len, reverse=True))
        return self._ordered

    def redact(self, text: str, secrets: tuple[str, ...] | None = None) -> str:
        """`text` with every known secret (and the request's presented keys) replaced, in
        any case (a server may echo a key upper-cased), and every bearer token. `secrets`:
        the lowered secrets to look for, when the caller has them at hand (`_lowered`)."""
        lowered = text.lower()
        for secret in self._lowered() if secrets is None else secrets:
            if secret in lowered:
                text = re.sub(re.escape(secret), REDACTED, text, flags=re.IGNORECASE)
                lowered = text.lower()
        # BEARER needs the word; most strings (every number, name and id) do not have it.
        return BEARER.sub(rf"\1\2{REDACTED}", text) if "bearer" in lowered else text

    def line(self, event: dict[str, Any]) -> str:
        """`event` as one JSON line, every string in it redacted.

        Rendered first, then looked over once: only a line holding a known secret or the
        word "bearer" (in any case, as JSON writes them) has its strings walked and is
        rendered again. Every line of the log passes here, most of them on the event loop,
        and almost none holds either: the walk over every value took about a third of an
        event's cost (bench/RESULTS.md, "Log events: the cost of one")."""
        secrets = self._lowered()
        text = msgspec.json.encode(event).decode()
        lowered = text.lower()
        if "bearer" not in lowered and not any(json_escaped(s) in lowered for s in secrets):
            return text
        # Builtins first: a nested struct's strings are walked too.
        walked = self._walk(msgspec.to_builtins(event), secrets)
        return msgspec.json.encode(walked).decode()

    def _lowered(self) -> tuple[str, ...]:
        return tuple(s.lower() for s in (*self.secrets(), *PRESENTED.get()) if s)

    def _walk(self, value: Any, secrets: tuple[str, ...]) -> Any:
        if isinstance(value, str):
            return self.redact(value, secrets)
        if isinstance(value, dict):
            return {k: self._walk(v, secrets) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._walk(v, secrets) for v in value]
        return value


def config_secrets(config: GatewayConfig, path: Path | None) -> set[str]:
    """The API keys, admin key, Hugging Face tokens and upstream keys of `config`, the
    environment values its file reads, and HF_TOKEN (which huggingface_hub reads by itself)."""
    found = {k.key if isinstance(k, ApiKey) else k for k in config.server.api_keys}
    found.add(config.server.admin_key)
    found |= {m.hf_token for m in config.models} | {config.defaults.hf_token}
    if len(hf_token := os.environ.get("HF_TOKEN") or "") >= MIN_ENV_SECRET:
        found.add(hf_token)
    # The keys the gateway itself sends to upstream replicas (engine upstream).
    found |= {m.upstream.api_key for m in config.models if m.upstream}
    # What a process model's server is given under a secret's name (`OPENAI_API_KEY: sk-…`).
    found |= {
        value
        for m in config.models
        if m.process
        for name, value in m.process.env.items()
        if SECRET_ENV_NAME.search(name) and len(value) >= MIN_ENV_SECRET
    }
    try:
        text = path.read_text(encoding="utf-8") if path else ""
    except OSError:
        text = ""
    for match in ENV_REF.finditer(text):
        value = os.environ.get(match.group(1)) or ""
        if len(value) >= MIN_ENV_SECRET:
            found.add(value)
    return {secret for secret in found if secret}


class LogScope:
    """One app's share of the process-wide log: its event listeners (metrics), its taps
    (the ops page's feed, called with every rendered line) and its redactor.

    `enter()` makes it the scope of the current context: an app enters its own for its
    lifespan (tasks started there inherit it) and for each request, so two apps in one
    process neither hear each other's events nor redact with each other's secrets.
    """

    def __init__(self, redactor: Redactor | None = None) -> None:
        self.redactor = redactor or Redactor()
        self.listeners: list[Callable[[Event], None]] = []
        self.taps: list[Callable[[str], None]] = []

    def enter(self) -> None:
        _SCOPE.set(self)
        LISTENERS.set(self.listeners)


# Outside any app (the CLI before serving, a test): no listeners, no taps, and a redactor
# that knows only the keys the request presented.
_OUTSIDE = LogScope()
_SCOPE: ContextVar[LogScope | None] = ContextVar("log_scope", default=None)


def current_redactor() -> Redactor:
    """The redactor of the app the current code serves."""
    return (_SCOPE.get() or _OUTSIDE).redactor


@functools.lru_cache(maxsize=1024)  # the config's secrets, and the keys requests present
def json_escaped(text: str) -> str:
    """`text` as it stands inside a JSON string: itself, unless it holds a quote, a
    backslash or a control character (escaped, with lowercase hex, as the line writes it)."""
    return msgspec.json.encode(text).decode()[1:-1]


def _taps() -> list[Callable[[str], None]]:
    return (_SCOPE.get() or _OUTSIDE).taps


class _Clock:
    """UTC ISO 8601 timestamps to the microsecond, "2026-12-03T13:40:35.123456Z": the date
    and time of day formatted once a second, not on every line (structlog's TimeStamper
    made a datetime each time, an eighth of an event's cost)."""

    def __init__(self) -> None:
        self._second = -1
        self._prefix = ""

    def now(self) -> str:
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second = second
            self._prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return f"{self._prefix}.{int((now - second) * 1e6):06d}Z"


_CLOCK = _Clock()


def _render(_logger: Any, level: str, event: dict[str, Any]) -> str:
    # The fields every line has come first, so a line reads well in a terminal too.
    head = {"event": event.pop("event"), "ts": _CLOCK.now(), "level": level}
    if "request_id" in event:
        head["request_id"] = event.pop("request_id")
    return current_redactor().line(head | event)


def setup_logging(level: str = "info", log_file: str | None = None) -> None:
    """Route every event to stdout (and `log_file`) as JSON lines, filtered by `level`."""
    streams: list[IO[str]] = [sys.stdout]
    if log_file:
        streams.append(open(log_file, "a", encoding="utf-8"))  # noqa: SIM115 - lives with the process
    writer = LineWriter(streams, _taps)
    structlog.configure(
        processors=[
            merge_bound,  # request_id, key_label
            _render,  # with the time and level, and redacted
        ],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS[level]),
        logger_factory=lambda *_: writer,
        cache_logger_on_first_use=False,
    )
    bind_logger()
