"""Events of one request: started, routed, queued, generated, finished; its guardrails, its
Ollama options ignored, a refused image fetch, a rate limit, a replica that failed it, and
an unexpected error."""

from __future__ import annotations

from schemas.events.base import Event


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
    # Prompt tokens past the reused ones this request left in a tier for later requests.
    cache_written_tokens: int = 0
    session_evicted: bool = False
    truncated_messages: int = 0  # oldest turns dropped to fit (context.overflow: truncate)
    images: int = 0  # images in the prompt (vision models)
    image_tokens: int = 0  # prompt tokens standing for them (counted in prompt_tokens)
    replica: str | None = None  # engine upstream/process: the replica that served it
    drafted_tokens: int = 0  # speculation: tokens proposed by the draft
    accepted_tokens: int = 0  # speculation: of those, the ones decoding kept
    documents: int = 0  # a rerank: the documents scored (stop_reason "reranked")
    # Speech to text (stop_reason "transcribed"): the clip's length, and the real-time
    # factor, seconds spent per second of audio (below 1: faster than it plays).
    audio_seconds: float = 0.0
    # Text to speech (stop_reason "spoken"): the audio generated; real_time_factor is then
    # seconds spent per second of audio out (its tokens are 0: it spends none).
    audio_out_seconds: float = 0.0
    real_time_factor: float | None = None
    # `experts:`: routed experts found resident, read from disk, and the bytes read, between
    # the request's start and end (requests decoded together share their steps' look-ups).
    expert_hits: int = 0
    expert_misses: int = 0
    expert_bytes_read: int = 0
    # `concurrency: auto`: seconds it waited in the batch for room in the KV pool its rows
    # share (engines/llm/pool.py), counted in ttft_s, not in queue_wait_s nor prefill_s.
    kv_wait_s: float = 0.0


class OptionsIgnored(Event, tag="options_ignored"):
    """Ollama options a request set that change no output here, accepted and not applied:
    hardware hints (threads, GPU layers, mmap) and samplers set to Ollama's "off"."""

    options: list[str]  # their names, sorted
    reason: str


class Guardrail(Event, tag="guardrail"):
    """A tool call that failed its checks (guardrails.tool_calls), and what was done."""

    model: str
    tool: str | None  # None when the call was too broken to name one
    problem: str
    action: str  # repaired | reasked | refused | passed | constrained


class ToolsDropped(Event, tag="tools_dropped"):
    """Tool definitions left out of a prompt they alone would overflow
    (`context.tools_overflow: drop_unused`); the response's `x-gateway-dropped-tools` names
    them too."""

    model: str
    dropped: list[str]  # their names, in the order the request declared them
    kept: int  # tools still offered: those the conversation used, then those that fit
    prompt_tokens: int  # the prompt with every tool
    window: int


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


class UpstreamFailed(Event, tag="upstream_failed"):
    """A request's replica failed it: before its first output (`failover` says whether
    another replica took it) or mid-stream (the client got the protocol's in-stream error)."""

    model: str
    replica: str
    error: str
    phase: str  # before_first_byte | mid_stream
    failover: bool
    status: int | None = None  # the replica's HTTP status, when it answered one


class LimitReached(Event, tag="rate_limited"):
    """A key's request refused past one of its limits; the key is named by its label only."""

    key_label: str
    limit: str  # rpm | tpm | audio_per_minute | concurrent | budget
    retry_after_s: float
