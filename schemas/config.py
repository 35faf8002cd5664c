"""The structs of `models.yaml`: the one source of both validation and the JSON Schema.

Every struct forbids unknown fields, so a misspelt key is an error rather than a
silently ignored setting. Durations and sizes stay strings here ("120s", "12GiB");
`seconds()` and `size_bytes()` turn them into numbers where they are used.
"""

from __future__ import annotations

import functools
import re
from typing import Annotated, Literal

import msgspec
from msgspec import Meta


class Strict(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Base of every hand-written config section."""


DURATION_PATTERN = r"^\d+(\.\d+)?(ms|s|m|h)$"
SIZE_PATTERN = r"^(auto|\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB))$"

Duration = Annotated[
    str, Meta(pattern=DURATION_PATTERN, description='A duration: "500ms", "120s", "10m", "1h".')
]
Size = Annotated[str, Meta(pattern=SIZE_PATTERN, description='"auto" or a size such as "12GiB".')]
Identifier = Annotated[
    str,
    Meta(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$",
        max_length=128,
        description="A model id or alias: letters, digits and . _ : / -",
    ),
]
PositiveInt = Annotated[int, Meta(ge=1)]
Port = Annotated[int, Meta(ge=1, le=65535)]

_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_SIZE_UNITS = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
}


@functools.lru_cache(maxsize=256)  # a model thread reads its `stream_interval` every step
def seconds(duration: str) -> float:
    """Seconds in a `Duration` string."""
    number, unit = re.fullmatch(r"([\d.]+)(ms|s|m|h)", duration).groups()
    return float(number) * _DURATION_UNITS[unit]


def size_bytes(size: str) -> int | None:
    """Bytes in a `Size` string; None for "auto"."""
    if size == "auto":
        return None
    number, unit = re.fullmatch(r"([\d.]+)\s*(\w+)", size).groups()
    return int(float(number) * _SIZE_UNITS[unit])


ByteSize = Annotated[
    str,
    Meta(pattern=r"^\d+(\.\d+)?\s*(B|KB|MB|GB|KiB|MiB|GiB)$", description='A size: "10MiB".'),
]
Origin = Annotated[
    str,
    Meta(
        pattern=r"^https?://[^/*\s]+$",
        description='An exact origin, scheme://host[:port], such as "https://chat.example.com"',
    ),
]

Network = Annotated[
    str,
    Meta(
        pattern=r"^[0-9A-Fa-f:.]+(/\d{1,3})?$",
        description='An IP network, "10.1.2.0/24", or one address, "127.0.0.1"',
    ),
]


# A request's priority: higher is admitted first within a model's queue.
Priority = Annotated[int, Meta(ge=-100, le=100, description="From -100 to 100; higher first.")]
# A DNS name as a Host header carries it, without its port: "gateway.example.com".
HostName = Annotated[
    str,
    Meta(
        pattern=r"^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$",
        max_length=253,
        description='A DNS name the gateway is reached by, such as "gateway.example.com"',
    ),
]
Label = Annotated[
    str,
    Meta(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        max_length=64,
        description="A key's name in events and metrics: letters, digits and . _ -",
    ),
]


class KeyPriority(Strict):
    """A key's requests' priority: `default` when a request asks none, at most `max`."""

    default: Priority = 0
    max: Priority = 0


class KeyBudget(Strict):
    """Tokens (prompt + completion) a key may use per `period`; the count starts afresh at
    each multiple of `period` since the Unix epoch (`24h`: at midnight UTC)."""

    tokens: PositiveInt
    period: Duration


class KeyLimits(Strict):
    """What one key may take; past any of them its requests get a 429."""

    rpm: PositiveInt | None = None  # requests per minute
    tpm: PositiveInt | None = None  # prompt + completion tokens per minute
    concurrent: PositiveInt | None = None  # requests in flight at once
    # Audio per minute, sliding: seconds of speech transcribed (in) and spoken (out).
    audio_per_minute: Duration | None = None
    budget: KeyBudget | None = None


class ApiKey(Strict):
    """An API key, with what it may use and take. `key` from an unset `${VAR}` drops the
    entry; `models` absent: every model (`[]`: none, a key that reads only the ops views)."""

    key: str | None
    # Absent: `key:` and a keyed hash of the key (gateway/control/key_names.py); never `admin`.
    label: Label | None = None
    models: list[Identifier] | None = None
    # The MCP servers (`mcp_servers:` names) its requests may use; absent: every one.
    mcp_servers: list[McpName] | None = None
    # Whether the gateway makes its requests' calls of `tools_from` tools itself (see
    # ModelConfig.run_tools); absent: as the model says.
    run_tools: bool | None = None
    priority: KeyPriority = KeyPriority()
    limits: KeyLimits = KeyLimits()


class LimitsConfig(Strict):
    """What one request may cost, checked before the work it would cause."""

    max_body_bytes: ByteSize = "10MiB"
    max_header_bytes: ByteSize = "32KiB"
    max_json_depth: Annotated[int, Meta(ge=2, le=1000)] = 64
    max_images: Annotated[int, Meta(ge=0)] = 8
    max_image_pixels: PositiveInt = 25_000_000
    # The longest clip the audio routes transcribe: a compressed upload within
    # max_body_bytes can hold hours; decoding stops here and the request is a 400.
    max_audio: Duration = "1h"
    # Tool declarations and output schemas of one request, as JSON: checking and compiling
    # them is CPU the whole process shares (the GIL), so their size is bounded.
    max_tool_schema_bytes: ByteSize = "512KiB"
    # Connections held at once; more get a 503 at once. None: the open-file limit, less a
    # reserve for model files and logs. Read at start.
    max_connections: PositiveInt | None = None
    # How long a request's line and headers, then each piece of its body, then its whole
    # body (from its head) may take: a body a byte at a time never misses `body_timeout`.
    header_timeout: Duration = "10s"
    body_timeout: Duration = "30s"
    body_deadline: Duration = "120s"
    # The whole fetch of one remote image (server.fetch_images), redirects included.
    fetch_timeout: Duration = "10s"


class CacheConfig(Strict):
    """The disk tier under prefix reuse: KV cache blocks that outlive eviction and restarts."""

    # Where the blocks live; None: `kv-cache` in `state_dir` (none when state_dir is null).
    dir: str | None = None
    # Past it, the least recently used blocks go first; 0 (or "0B") turns the tier off.
    max_bytes: Annotated[int, Meta(ge=0)] | ByteSize = "10GiB"


class ActivityConfig(Strict):
    """The ops page's history (`/ui/api/activity`, plots): one row per request and its
    events, in SQLite under `state_dir` (`activity.sqlite3`); past either bound the oldest go."""

    max_rows: PositiveInt = 10_000
    max_age: Duration = "168h"


class ResponsesConfig(Strict):
    """Stored Responses (`/v1/responses` with `store`): how long they stay, how much room."""

    ttl: Duration = "720h"  # 30 days, as OpenAI keeps them
    max_bytes: ByteSize = "256MiB"  # past it, the oldest responses go first


class FilesConfig(Strict):
    """Uploaded files (`/v1/files`, kept in `state_dir`): past either bound an upload is a 413."""

    max_bytes: ByteSize = "1GiB"  # all files together
    max_file_bytes: ByteSize = "200MiB"  # one file (OpenAI's bound for a batch input)


class BatchesConfig(Strict):
    """Batches (`/v1/batches`): their lines wait below interactive requests, few at a time."""

    # The priority every batch line is queued at: by default the lowest, below any request.
    priority: Priority = -100
    # Lines of all batches in flight at once per model: what an interactive request may
    # find ahead of it at most (beside other interactive ones).
    concurrency: PositiveInt = 1


class ServerConfig(Strict):
    host: str = "127.0.0.1"
    port: Port = 8000
    api_keys: list[str | ApiKey] = []
    admin_key: str | None = None
    # Binding a non-loopback address without api_keys is refused unless this says so.
    allow_unauthenticated_network: bool = False
    cors_origins: list[Origin] = []
    # The names a gateway on a network address answers to in the Host header, besides IP
    # addresses and loopback names: any other is a 403 (DNS rebinding). Read at each request.
    allowed_hosts: list[HostName] = []
    limits: LimitsConfig = LimitsConfig()
    shutdown_grace: Duration = "30s"
    memory_budget: Size = "auto"
    fallback: str | None = None
    log_file: str | None = None
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    watch_config: bool = False
    # Fetch nothing from the Hugging Face Hub (as HF_HUB_OFFLINE=1 does): hub models must
    # already be in the cache (`gateway pull`).
    offline: bool = False
    # The ops page's Activity history (`activity.sqlite3` in `state_dir`).
    activity: ActivityConfig = ActivityConfig()
    # Where state that outlives the process lives (the stored Responses' SQLite file):
    # "auto" is $GATEWAY_STATE_DIR, else the user's data directory; null keeps it in memory.
    state_dir: str | None = "auto"
    responses: ResponsesConfig = ResponsesConfig()
    files: FilesConfig = FilesConfig()
    batches: BatchesConfig = BatchesConfig()
    cache: CacheConfig = CacheConfig()
    # Remote http(s) image URLs in requests are fetched only when this is true.
    fetch_images: bool = False
    # Networks (CIDR) images may be fetched from although not public, e.g. [127.0.0.1/32]
    # for an image server on this machine; every other non-public address is refused.
    fetch_images_allow: list[Network] = []
    # When the memory budget cannot hold every model with waiting requests: how long a
    # model waiting for room lets the loaded one go on admitting from its queue before that
    # one stops, finishes what runs, and is swapped out. 0s: swap at the first chance.
    max_swap_wait: Duration = "5s"


class QueueConfig(Strict):
    max_depth: PositiveInt = 64
    max_wait: Duration = "120s"
    # Waiting this long counts as one level of priority: a request is never overtaken by
    # one that arrived more than (their priority - its priority) x aging after it.
    aging: Duration = "1s"


class GuardrailsConfig(Strict):
    tool_calls: Literal["repair", "strict", "off"] = "repair"
    max_output_tokens: PositiveInt | None = None
    max_n: PositiveInt = 8  # choices one request may ask for (`n`), generated as one batch


class OnDemand(Strict):
    on_demand: bool = True
    idle_ttl: Duration = "10m"


class ContextConfig(Strict):
    max: PositiveInt | Literal["auto"] = "auto"
    overflow: Literal["reject", "truncate"] = "reject"
    # Tool definitions that alone leave no room (Open WebUI's built-in tools are ~25k
    # tokens): `drop_unused` keeps the tools the conversation used and those that fit.
    tools_overflow: Literal["reject", "drop_unused"] = "reject"


class ExpertsConfig(Strict):
    """A mixture of experts held partly on disk (docs/experts.md): `resident` experts of each
    layer kept in memory (`auto`: as many as the memory budget leaves), the rest read from
    the safetensors files when routed; `policy` says which resident expert makes room."""

    resident: PositiveInt | Literal["auto"] = "auto"
    policy: Literal["lru", "lfu"] = "lru"


class SamplingConfig(Strict):
    temperature: Annotated[float, Meta(ge=0, le=2)] | None = None
    top_p: Annotated[float, Meta(gt=0, le=1)] | None = None
    top_k: Annotated[int, Meta(ge=0)] | None = None
    min_p: Annotated[float, Meta(ge=0, le=1)] | None = None
    max_tokens: PositiveInt | None = None
    seed: int | None = None
    repeat_penalty: Annotated[float, Meta(gt=0, le=10)] | None = None
    repeat_last_n: Annotated[int, Meta(ge=-1)] | None = None
    presence_penalty: Annotated[float, Meta(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Meta(ge=-2, le=2)] | None = None


class DraftConfig(Strict):
    model: str
    tokens: Annotated[int, Meta(ge=1, le=16)] = 3


class SpeculationConfig(Strict):
    """Drafting without a draft model: `prompt_lookup` proposes the tokens that followed the
    last `ngram` tokens where they occurred before (in the prompt or the answer so far), up
    to `tokens` at a time, all verified by one forward pass of the model."""

    kind: Literal["prompt_lookup"]
    tokens: Annotated[int, Meta(ge=1, le=16)] = 6
    ngram: Annotated[int, Meta(ge=1, le=8)] = 3


class SteeringConfig(Strict):
    """A steering (control) vector added to the residual stream: after each named decoder
    layer, `h += scale * v[layer]` for every token. `vector` is llama.cpp's control-vector
    GGUF (tensors `direction.<layer>`) or a safetensors file of the same keys, one vector
    of the model's hidden size per layer (docs/adapters.md, "Steering vectors")."""

    vector: str
    # Decoder layers (0-based, as llama.cpp's `direction.<layer>`); left out: every layer
    # the file holds a vector for.
    layers: list[Annotated[int, Meta(ge=0)]] | None = None
    scale: Annotated[float, Meta(ge=-64, le=64)] = 1.0


class AdapterConfig(Strict):
    """One fine-tune of its model served as a model of its own: a LoRA or DoRA adapter in
    mlx-lm's format (`adapter_config.json` + `adapters.safetensors`, as `mlx_lm.lora` writes
    it) or PEFT's (`adapter_config.json` + `adapter_model.safetensors`). The base's weights
    are loaded once; each adapter adds only its own (docs/adapters.md)."""

    id: Identifier
    path: str
    # A multiplier on the adapter's own scale (mlx-lm's `lora_parameters.scale`, PEFT's
    # `lora_alpha / r`): 1 answers as the adapter fused into the base would.
    scale: Annotated[float, Meta(ge=0, le=16)] = 1.0
    aliases: list[Identifier] = []
    # This adapter's own steering vector (the base's `steering` does not apply to it).
    steering: SteeringConfig | None = None


class RateConfig(Strict):
    max_tokens_per_sec: Annotated[float, Meta(gt=0)] | None = None


class ScriptConfig(Strict):
    """What the scripted engine says: deterministic, streamed word by word."""

    reply: str = "hello from echo"
    # Replies used in turn, one per request (cycling); when set, `reply` is not used.
    replies: list[str] = []
    # Under a constraint (a JSON schema, a forced tool, a grammar), when the turn's reply
    # does not fit: the first of these that fits answers (none fits: a 400); left empty, a
    # short instance the grammar allows does.
    constrained: list[str] = []
    token_delay: Annotated[float, Meta(ge=0, le=60)] = 0.0
    # Seconds a load takes, as loading weights would (swap costs measurable without them).
    load_delay: Annotated[float, Meta(ge=0, le=60)] = 0.0
    # Raise a RuntimeError after this many words: a mid-stream engine failure, for tests.
    fail_after: Annotated[int, Meta(ge=0)] | None = None
    # Fault injection for tests of the runtime: the engine's Nth batch step (counted over
    # its life, from 1) raises, as a failed forward pass would.
    fail_step: PositiveInt | None = None
    # The memory the model claims to hold, so memory-budget behaviour is testable without
    # weights.
    memory: ByteSize = "0B"


class VisionSettings(Strict):
    """A vision model's pixel budget: each image is resized to fit before encoding. Absent
    keys come from the checkpoint's preprocessor config; `max_pixels` is also clamped at load
    to what the memory budget can afford."""

    max_pixels: PositiveInt | None = None
    min_pixels: PositiveInt | None = None


HttpUrl = Annotated[
    str,
    Meta(
        pattern=r"^https?://[^\s/]+(/\S*)?$",
        description='An OpenAI-protocol base URL such as "http://10.0.0.5:8000/v1"',
    ),
]


class UpstreamConfig(Strict):
    """`engine: upstream`: OpenAI-protocol replicas of one model, served as one model."""

    urls: Annotated[list[HttpUrl], Meta(min_length=1)]
    api_key: str | None = None  # sent as `Authorization: Bearer`; never logged
    model: str | None = None  # the model's name on the replicas; absent: this model's id
    max_in_flight: PositiveInt = 4  # requests one replica serves at once
    timeout: Duration = "60s"  # connect, first byte, and each next chunk
    check_interval: Duration = "5s"  # active health checks (GET /health, else /v1/models)
    cooldown: Duration = "10s"  # a failed replica rests this long before it is probed back


class ProcessConfig(Strict):
    """`engine: process`: a server program the gateway runs for this model, then proxies."""

    command: Annotated[list[str], Meta(min_length=1)]  # "${PORT}" is the port it must serve on
    health: str = "/health"  # the path answering 200 once it serves
    env: dict[str, str] = {}  # added to the gateway's environment ("${PORT}" works here too)
    cwd: str | None = None  # relative to the config file's directory
    memory: ByteSize = "0B"  # what it takes against server.memory_budget
    model: str | None = None  # the name its requests carry; absent: this model's id
    max_in_flight: PositiveInt = 4
    timeout: Duration = "60s"
    startup_timeout: Duration = "120s"  # from start until its health check answers 200
    stop_grace: Duration = "10s"  # after SIGTERM, before SIGKILL


McpUrl = Annotated[
    str,
    Meta(
        pattern=r"^https?://[^\s/]+(/\S*)?$",
        description='An MCP server\'s http(s) endpoint such as "http://127.0.0.1:9000/mcp"',
    ),
]
McpName = Annotated[
    str,
    Meta(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$",
        max_length=64,
        description="An MCP server's name (a Responses tool's server_label): letters, digits, _ -",
    ),
]


class McpServerConfig(Strict):
    """One MCP server the gateway's tool loop may call (`mcp_servers:`, docs/mcp.md): a
    program it starts (`command`, spoken to over stdio) or a server at `url` (streamable
    HTTP, or `transport: sse` for older servers). Started at first use."""

    name: McpName
    command: str | None = None  # stdio: the program, found on PATH
    args: list[str] = []
    env: dict[str, str] = {}  # added to the minimal environment it starts with
    cwd: str | None = None  # relative to the config file's directory
    url: McpUrl | None = None
    transport: Literal["streamable_http", "sse"] = "streamable_http"  # with `url` only
    headers: dict[str, str] = {}  # sent with every request to `url` (a token, say)
    allowed_tools: list[str] | None = None  # absent: every tool the server lists
    timeout: Duration = "30s"  # one tool call (and one tools/list)
    start_timeout: Duration = "30s"  # starting it: the program up, the session initialized
    max_result_bytes: ByteSize = "1MiB"  # a longer tool result is cut, and says so


class DistributedConfig(Strict):
    """`distributed:` an MLX model sharded over `ranks` processes on MLX's own collectives
    (engines/llm/distributed). Rank 0 runs on the gateway's machine."""

    ranks: Annotated[int, Meta(ge=1, le=64)]
    # One address per rank, rank 0's first (this machine as the others reach it); remote
    # ranks are started over ssh. Empty: every rank on this machine (127.0.0.1).
    hosts: list[Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9.:_@-]*$")]] = []
    backend: Literal["ring", "nccl"] = "ring"  # passed to mx.distributed.init
    mode: Literal["pipeline", "tensor"] = "pipeline"  # layers per rank, or heads per rank
    port: Port | None = None  # the first port of the ranks' (one each); absent: free ones
    python: str | None = None  # the interpreter of ranks 1..N-1; absent: the gateway's
    timeout: Duration = "60s"  # a step, or a rank's silence, longer than this fails the model


Residency = Literal["pinned"] | OnDemand
EngineKind = Literal["mlx", "scripted", "upstream", "process"]
# YAML 1.1 reads a bare `off` as false, so false stands for "off" too.
ReasoningEffort = Literal["off", "low", "medium", "high"] | bool
# How a quantized model's weights are held: `auto` as the platform runs them fastest (float32
# on the CPU; bfloat16 on CUDA where it costs no context), `stored` as the file holds them.
WeightsHeld = Literal["auto", "stored"]
# Where an MLX text model's engine runs: `none` on a thread of the gateway's process, `process`
# in a child process with a GIL of its own (engines/llm/isolated.py).
Isolation = Literal["none", "process"]
# What an MLX model serves, when its config says (else inferred from its architecture).
Task = Literal["chat", "embed", "rerank", "transcribe", "speech"]
# Requests decoded together: `auto` sizes it at load (engines/mlx/sizing.py `streams`), a
# number fixes it, `1` is strictly serial.
Concurrency = PositiveInt | Literal["auto"]


class ModelConfig(Strict):
    """One model, after `defaults:` has been merged under it."""

    id: Identifier
    engine: EngineKind = "mlx"
    source: str | None = None
    aliases: list[Identifier] = []
    residency: Residency = "pinned"
    context: ContextConfig = ContextConfig()
    concurrency: Concurrency = "auto"
    prefix_reuse: bool = True
    session_slots: Annotated[int, Meta(ge=0)] = 4
    kv_bits: Literal[4, 8] | None = None
    # Park this model's KV cache in the disk tier (`server.cache`) too: on the continuous
    # batching path, kv_bits' single stream and vision models; not yet with both draft and
    # kv_bits (mlx-lm's speculative loop), and the `model_attached` line says so.
    disk_cache: bool = True
    weights: WeightsHeld = "auto"
    # Routed experts kept partly on disk (an MoE architecture only); absent, loaded whole.
    experts: ExpertsConfig | None = None
    isolation: Isolation = "none"
    draft: DraftConfig | None = None
    speculation: SpeculationConfig | None = None
    system: str | None = None
    guardrails: GuardrailsConfig = GuardrailsConfig()
    sampling: SamplingConfig = SamplingConfig()
    reasoning: ReasoningEffort = "off"
    tool_parser: str | None = None
    rate: RateConfig = RateConfig()
    # While the batch holds two or more streams, each stream's new tokens go out at most this
    # often, several to a frame: the event loop's work per frame, on the GIL the model's
    # step needs, is then paid once per interval, not once per token. A stream's first
    # token, its end, and anything but text are never held; "0ms" (the default, as vLLM's
    # `stream_interval` of 1) frames every token: on the H200 holding 20 ms made no
    # difference beyond the noise (bench/RESULTS.md, runs 45 and 47).
    stream_interval: Duration = "0ms"
    task: Task | None = None
    queue: QueueConfig = QueueConfig()
    # Keep each request's and answer's body (redacted as the log is, the first 64 KiB of
    # each) in the ops page's Activity history; off, no body is ever stored.
    capture: bool = False
    # Declared MCP servers (`mcp_servers:` names) whose tools chat completions, Anthropic
    # Messages and Ollama's chat offer this model beside the client's own (docs/mcp.md).
    tools_from: list[McpName] = []
    # The gateway makes the model's calls of those tools and goes on until it answers;
    # false: the calls go back to the client as ordinary tool calls. A key's `run_tools`,
    # where set, decides for its requests.
    run_tools: bool = False
    script: ScriptConfig | None = None
    # The Hugging Face token for an `hf:` source (gated or private repositories); usually
    # `${HF_TOKEN}`. Absent: huggingface_hub's own (HF_TOKEN, or `hf auth login`'s).
    hf_token: str | None = None
    vision: VisionSettings = VisionSettings()
    upstream: UpstreamConfig | None = None
    process: ProcessConfig | None = None
    distributed: DistributedConfig | None = None
    adapters: list[AdapterConfig] = []
    # A steering vector on the model's rows (its adapters carry their own, or none).
    steering: SteeringConfig | None = None

    @property
    def pinned(self) -> bool:
        return self.residency == "pinned"


_model_fields = msgspec.structs.fields(ModelConfig)

# `defaults:` carry any model key but `id`, each optional: derived, so never re-listed.
ModelSettings = msgspec.defstruct(
    "ModelSettings",
    [(f.name, f.type | None, None) for f in _model_fields if f.name != "id"],
    bases=(Strict,),
    module=__name__,
    namespace={"__doc__": "Every per-model setting that `defaults:` may also carry."},
)


class GatewayConfig(Strict, kw_only=True):
    """The whole of `models.yaml`."""

    server: ServerConfig = ServerConfig()
    defaults: ModelSettings = ModelSettings()
    models: Annotated[list[ModelConfig], Meta(min_length=1)]
    mcp_servers: list[McpServerConfig] = []
