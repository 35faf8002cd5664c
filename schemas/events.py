"""Every event the gateway logs: the name is the struct's tag, the payload its fields."""

from __future__ import annotations

import msgspec


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="event"):
    """Base of every event; `request_id` is bound per request by the logger's context."""


class RequestStarted(Event, tag="request_started"):
    method: str
    path: str


class RequestRouted(Event, tag="request_routed"):
    requested: str
    served: str
    alias: str | None
    fallback: bool
    stream: bool
    protocol: str


class RequestQueued(Event, tag="request_queued"):
    model: str
    position: int
    priority: int = 0  # as admitted: asked (x-gateway-priority) or the key's default, clamped


class Generated(Event, tag="generated"):
    model: str
    prompt_tokens: int
    new_tokens: int
    prefill_s: float
    decode_s: float
    queue_wait_s: float
    ttft_s: float | None
    stop_reason: str
    reused_prefix_tokens: int = 0
    # The same tokens by tier: parked in RAM, read from the disk tier (`server.cache`).
    reused_ram_tokens: int = 0
    reused_disk_tokens: int = 0
    disk_load_s: float = 0.0  # time spent reading those blocks from disk
    session_evicted: bool = False
    truncated_messages: int = 0  # oldest turns dropped to fit (context.overflow: truncate)
    images: int = 0  # images in the prompt (vision models)
    image_tokens: int = 0  # prompt tokens standing for them (counted in prompt_tokens)
    replica: str | None = None  # engine upstream/process: the replica that served it
    drafted_tokens: int = 0  # speculation: tokens proposed by the draft
    accepted_tokens: int = 0  # speculation: of those, the ones decoding kept


class Guardrail(Event, tag="guardrail"):
    """A tool call that failed its checks (guardrails.tool_calls), and what was done."""

    model: str
    tool: str | None  # None when the call was too broken to name one
    problem: str
    action: str  # repaired | reasked | refused | passed | constrained


class RequestFinished(Event, tag="request_finished"):
    status: int
    duration_ms: float
    error: str | None = None


class ImageFetchFailed(Event, tag="image_fetch_failed"):
    """A remote image was not fetched; the client heard only `could not fetch image N`, so
    the reason (refused address, closed port, HTTP status) is told to the operator alone."""

    where: str
    reason: str  # names the host, never the whole URL (a signed URL's query is a secret)


class InternalError(Event, tag="internal_error"):
    """An unexpected exception (a bug, not the request's fault), logged at level error with
    its traceback; the client hears only a generic message with the request id."""

    where: str  # the request's method and path, or the background task's name
    type: str
    message: str
    traceback: str


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


class CacheRebuilt(Event, tag="cache_rebuilt"):
    """A converted model in the cache was found damaged at load and is being built again."""

    model: str
    path: str
    reason: str


class CacheSaved(Event, tag="cache_saved"):
    """KV cache blocks written to the disk tier (`server.cache`), off the model's thread."""

    model: str
    blocks: int  # blocks written now (those already on disk are not written again)
    tokens: int  # tokens the conversation's cache covers on disk
    bytes: int
    save_s: float
    dir_bytes: int  # the directory's size after the write (and any eviction)


class CacheEvicted(Event, tag="cache_evicted"):
    """Least recently used blocks removed to keep the directory under `max_bytes`."""

    model: str  # whose write pushed the directory past its limit
    blocks: int
    bytes: int
    dir_bytes: int


class CacheCorrupt(Event, tag="cache_corrupt"):
    """A block failed its checksum (cut short, altered): removed; the request prefills."""

    model: str
    block: str
    reason: str


class CacheUnwritable(Event, tag="cache_unwritable"):
    """A write to the disk tier failed (disk full, read-only): RAM-only from now on."""

    model: str
    dir: str
    reason: str


class CacheRatesIgnored(Event, tag="cache_rates_ignored"):
    """The disk tier's saved read-or-prefill rates could not be used: measured again."""

    model: str
    path: str
    reason: str


class ModelAttached(Event, tag="model_attached"):
    model: str
    load_s: float
    memory_bytes: int
    context: int
    detail: dict[str, str] = {}


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


class UpstreamFailed(Event, tag="upstream_failed"):
    """A request's replica failed it: before its first output (`failover` says whether
    another replica took it) or mid-stream (the client got the protocol's in-stream error)."""

    model: str
    replica: str
    error: str
    phase: str  # before_first_byte | mid_stream
    failover: bool
    status: int | None = None  # the replica's HTTP status, when it answered one


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


class LimitReached(Event, tag="rate_limited"):
    """A key's request refused past one of its limits; the key is named by its label only."""

    key_label: str
    limit: str  # rpm | tpm | concurrent | budget
    retry_after_s: float


class SwapWaiting(Event, tag="swap_waiting"):
    """A model with waiting requests needs memory a busy model holds: the busy one serves
    on for at most `server.max_swap_wait`, then finishes what runs and is swapped out."""

    model: str
    holders: list[str]  # the busy models it waits for
