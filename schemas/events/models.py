"""Events of a model's life: downloading, loading, attached, detached, failed, restarting
(engine process) and its server's log lines; its replicas in and out of rotation, a batch
step that raised, and a swap waiting for memory."""

from __future__ import annotations

import msgspec

from schemas.events.base import Event


class ModelLoading(Event, tag="model_loading"):
    model: str


class ModelDownloading(Event, tag="model_downloading"):
    """A hub source's file arriving; at most one a second per model."""

    model: str
    file: str
    done: int  # bytes on disk so far
    total: int | None  # bytes in the file, when the Hub says
    rate: float  # bytes per second since this file's download started


class ModelDownloaded(Event, tag="model_downloaded"):
    """A hub source is complete in the cache; `revision` resolved to `commit`."""

    model: str
    source: str
    revision: str
    commit: str
    bytes: int  # fetched by this download (0 when everything was cached)
    download_s: float


class SteeringAnnounced(msgspec.Struct, frozen=True, kw_only=True):
    """A steering vector a served model adds to its residual stream (`steering:`): the
    tokens it answers are edited, and it says so (docs/adapters.md)."""

    file: str
    sha256: str  # of the file's bytes
    layers: list[int]
    scale: float
    format: str  # "gguf" (llama.cpp's control vector) | "safetensors"


class ModelAttached(Event, tag="model_attached"):
    model: str
    load_s: float
    memory_bytes: int
    context: int
    detail: dict[str, str] = {}
    # Each model id this load serves that is steered (the model's own, its adapters').
    steering: dict[str, SteeringAnnounced] = {}


class ContextBeyondTraining(Event, tag="context_beyond_training"):
    """A fixed window past the model's trained context: it loads, with this warning."""

    model: str
    context: int
    trained: int


class ModelDetached(Event, tag="model_detached"):
    model: str
    reason: str


class ModelFailed(Event, tag="model_failed"):
    model: str
    error: str
    exit_code: int | None = None  # engine process: its server's exit status (-N: signal N)
    rank: int | None = None  # a distributed model: the rank that failed, and its host
    host: str | None = None


class ModelRestarting(Event, tag="model_restarting"):
    """Engine process: its server exited on its own; it starts again after `delay_s`."""

    model: str
    attempt: int
    delay_s: float


class ModelLog(Event, tag="model_log"):
    """Engine process: a line its server wrote (rate-limited; `dropped` lines were not)."""

    model: str
    stream: str  # stdout | stderr
    line: str
    dropped: int = 0


class ReplicaDown(Event, tag="replica_down"):
    """A replica taken out of rotation (failed health check or request); probed back later."""

    model: str
    replica: str
    reason: str


class ReplicaUp(Event, tag="replica_up"):
    """A replica back in rotation: its health check passed (at load, or after a cool-down)."""

    model: str
    replica: str


class BatchFailed(Event, tag="batch_failed"):
    """A step of a model's batch raised: every request in it ended with an error."""

    model: str
    requests: int
    error: str
    traceback: str


class SwapWaiting(Event, tag="swap_waiting"):
    """A model with waiting requests needs memory a busy model holds: the busy one serves
    on for at most `server.max_swap_wait`, then finishes what runs and is swapped out."""

    model: str
    holders: list[str]  # the busy models it waits for
