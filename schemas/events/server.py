"""Events of the gateway process: started, configuration reloaded or rejected, draining and
stopping, and background work that raised."""

from __future__ import annotations

from schemas.events.base import Event


class TaskFailed(Event, tag="task_failed"):
    """Background work (a load, an idle unload, a drain) that raised: a bug, said loudly."""

    task: str
    error: str
    traceback: str


class ServerStarted(Event, tag="server_started"):
    host: str
    port: int
    config: str
    models: list[str]
    platform: dict[str, str]
    responses_store: str = ""  # the stored Responses' file (":memory:" for none)
    # Why that store cannot be used (corrupt, unreadable, read-only); null when it can.
    responses_store_problem: str | None = None


class ConfigReloaded(Event, tag="config_reloaded"):
    trigger: str
    added: list[str]
    removed: list[str]
    changed: list[str]
    unchanged: list[str]
    restarted: list[str]
    drained_first: list[str] = []  # old runner drained before the new one could fit
    failed: dict[str, str] = {}  # model id -> why it failed to load, and what serves it now


class ConfigRejected(Event, tag="config_rejected"):
    trigger: str
    errors: list[str]


class ServerDraining(Event, tag="server_draining"):
    """SIGTERM (or SIGINT): new requests get 503 while `in_flight` ones finish."""

    signal: int
    in_flight: int
    grace_s: float


class ServerStopping(Event, tag="server_stopping"):
    """The drain ended: every request finished (`drained`), or the grace period ran out."""

    drained: bool
    left_in_flight: int
    drain_s: float
