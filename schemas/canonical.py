"""The one request and the one stream of output that every protocol adapter maps to and from.

Protocol adapters in `gateway/` build a `ChatRequest` (or an `EmbedRequest`); engines in
`engines/` consume it and yield `TextDelta`s and `ToolCallOutput`s followed by exactly one
`Finished` (or one `Embedded`).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from schemas.logprobs import Logprobs, LogprobsRequest

Role = Literal["system", "developer", "user", "assistant", "tool"]


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    arguments: str  # JSON text, as every protocol carries it or parses it from


class TextPart(msgspec.Struct, frozen=True, kw_only=True, tag="text"):
    text: str


# The only formats an ImagePart's bytes may be: Pillow is asked to open these and no other
# (each of its plugins is parser code a hostile file could reach).
IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "GIF")


class ImagePart(msgspec.Struct, frozen=True, kw_only=True, tag="image"):
    """One image as its encoded file (one of IMAGE_FORMATS), already fetched or decoded from
    base64 by the adapter; `where` names the request part it came from, for error messages."""

    data: bytes
    where: str = ""
    # `low` fits the picture to the model's min_pixels (OpenAI's `detail`); else max_pixels.
    detail: Literal["auto", "low", "high"] = "auto"
    # A remote http(s) image the gateway has yet to fetch; never set when it reaches an engine.
    url: str = ""


Part = TextPart | ImagePart


class Message(msgspec.Struct, frozen=True, kw_only=True):
    role: Role
    content: str = ""
    # Set when the message carries images: its text and images in order (`content` then
    # holds the text alone). Engines that read no images refuse a request that has any.
    parts: list[Part] = []
    tool_calls: list[ToolCall] = []
    tool_call_id: str | None = None  # on a `tool` message: the call it answers
    name: str | None = None  # on a `tool` message: the tool's name


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    description: str = ""
    parameters: dict[str, Any] = {}  # JSON Schema of the arguments


class Sampling(msgspec.Struct, frozen=True, kw_only=True):
    """Sampling settings after request > model > file defaults have been merged."""

    temperature: float = 0.7
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    # Penalties on tokens the answer has already used, counted over its last
    # `repeat_last_n` tokens (0: none; -1: the whole window): `repeat_penalty` divides a
    # positive logit (multiplies a negative one), `presence_penalty` is subtracted once,
    # `frequency_penalty` once per use. `logit_bias` adds to token ids' logits every step.
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[int, float] = {}

    @property
    def penalised(self) -> bool:
        """Whether any penalty or bias changes the logits (engines that cannot apply them
        refuse the request)."""
        return bool(self.logit_bias) or (
            self.repeat_last_n != 0
            and (self.repeat_penalty != 1.0 or self.presence_penalty or self.frequency_penalty)
        )


class OutputFormat(msgspec.Struct, frozen=True, kw_only=True):
    """The answer must be JSON: any object (`schema` None) or a value valid against `schema`.

    `field` is the request field that asked (`$.response_format`, `$.format`, ...), so a
    schema the grammar engine cannot enforce is refused naming it.
    """

    schema: dict[str, Any] | None = None
    field: str = "$.response_format"


Effort = Literal["off", "low", "medium", "high"]
ToolChoice = Literal["auto", "required"]
ToolPolicy = Literal["repair", "strict", "off"]
OverflowPolicy = Literal["reject", "truncate"]
ToolsOverflowPolicy = Literal["reject", "drop_unused"]


class OutputControls(msgspec.Struct, frozen=True, kw_only=True):
    """A request's output controls, as each adapter reads them from its protocol's fields."""

    format: OutputFormat | None = None
    tool_choice: ToolChoice = "auto"
    forced_tool: str | None = None
    strict_tools: list[str] = []
    # None: the client did not say. Calls may then come in any number under `auto`, but a
    # forced call (`required`) is one call: parallel forced calls only when asked for.
    parallel_tool_calls: bool | None = None
    logprobs: LogprobsRequest | None = None

    @property
    def one_call(self) -> bool:
        """Whether the answer holds at most one tool call: a named tool is forced, a call is
        required and parallel calls were not asked for, or parallel calls are off."""
        if self.forced_tool is not None:
            return True
        if self.tool_choice == "required":
            return self.parallel_tool_calls is not True
        return self.parallel_tool_calls is False


class Client(msgspec.Struct, frozen=True, kw_only=True):
    """Who a request is from, as the gateway's key guard resolved it: the key's label (None:
    no key, so nothing is counted) and the priority it was given in the model's line. It
    rides on the request, as vLLM's `priority` does, so the runner reads it from the job."""

    key: str | None = None
    priority: int = 0


NO_CLIENT = Client()  # a request from no client in particular: priority 0, nothing counted


class KeepMark(msgspec.Struct, frozen=True, kw_only=True):
    """A prefix the client asked to keep cached (Anthropic's `cache_control`): the prompt
    as far as its first `messages` messages go, kept `ttl_s` seconds past its last read."""

    messages: int
    ttl_s: float


class ChatRequest(msgspec.Struct, frozen=True, kw_only=True):
    messages: list[Message]
    max_tokens: int
    sampling: Sampling = Sampling()
    stop: list[str] = []
    tools: list[ToolSpec] = []
    # Set for plain completions: the text is the prompt as is, no chat template.
    raw_prompt: str | None = None
    # A plain completion's prompt as token ids (evaluation harnesses send these); with it,
    # `raw_prompt` is "" and the ids are the prompt.
    prompt_ids: list[int] | None = None
    # The model's policies, resolved once by engines/policy/request.py for every protocol.
    reasoning: Effort = "off"
    tool_policy: ToolPolicy = "off"
    overflow: OverflowPolicy = "reject"
    tools_overflow: ToolsOverflowPolicy = "reject"
    # Tools left out to fit the window (context.tools_overflow: drop_unused), by name.
    dropped_tools: tuple[str, ...] = ()
    # Oldest turns dropped to fit the window (context.overflow: truncate); reported as is.
    truncated_messages: int = 0
    # A window narrower than the model's for this request alone (Ollama's `num_ctx`): the
    # prompt and its answer fit in it, and `context.overflow` applies against it.
    window: int | None = None

    def window_of(self, model_window: int) -> int:
        """The window this request runs in: its own, never wider than the model's."""
        return min(self.window, model_window) if self.window else model_window

    def window_setting(self, window: int) -> str:
        """What set `window` (this request's, from `window_of`), as a client names it."""
        return "options.num_ctx" if self.window == window else "context.max"

    # Output controls (engines/text/constrain.py): the answer's JSON format; a tool call
    # forced (`required`, or the one `forced_tool`); tools whose arguments are constrained
    # to their schema even under `auto`; at most one call when forced or when
    # `parallel_tool_calls` is off (`OutputControls.one_call`);
    # logprobs.
    controls: OutputControls = OutputControls()
    client: Client = NO_CLIENT
    keep: tuple[KeepMark, ...] = ()  # prefixes to keep cached (engines/mlx/cache/marked.py)
    # The adapter (`adapters:`) this request runs under, by id; None: the base model.
    adapter: str | None = None
    # Its scale when the request chose it (OpenAI's `lora`), times the adapter's own; None:
    # the adapter's declared `scale`.
    adapter_scale: float | None = None


class ChatAsk(msgspec.Struct, frozen=True, kw_only=True):
    """What a client asked for, in canonical terms, before its model's policy is applied.

    Each protocol adapter fills one from its wire request and hands it through the one door
    (`engines/chat.py`); None leaves a value to the model's settings. `reasoning` is the
    effort asked in the protocol's own field, already read as off/low/medium/high.
    `raw_prompt` (plain completions) skips the chat template. `client` is who sent it, as
    the key guard resolved (gateway/http/request_state.py): it rides on to the request.
    """

    messages: list[Message]
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    repeat_penalty: float | None = None
    repeat_last_n: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[int, float] | None = None
    stop: list[str] | None = None
    tools: list[ToolSpec] | None = None
    raw_prompt: str | None = None
    prompt_ids: list[int] | None = None
    reasoning: Effort | None = None
    window: int | None = None
    controls: OutputControls = OutputControls()
    client: Client = NO_CLIENT
    keep: tuple[KeepMark, ...] = ()


def request_images(request: ChatRequest) -> list[ImagePart]:
    """Every image of a request, in order."""
    return [p for m in request.messages for p in m.parts if isinstance(p, ImagePart)]


class EmbedRequest(msgspec.Struct, frozen=True, kw_only=True):
    inputs: list[str]
    # Cut inputs longer than the model's window (sentence-transformers does); False: refuse.
    truncate: bool = True
    # The vector size the client asked for: an engine refuses another before any work.
    dimensions: int | None = None
    client: Client = NO_CLIENT


class RerankRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Score each document's relevance to the query (the rerank routes)."""

    query: str
    documents: list[str]
    # Each document cut to this many of its own tokens first (Cohere v2's
    # `max_tokens_per_doc`); then query and document are cut to the model's window.
    max_tokens_per_doc: int | None = None
    client: Client = NO_CLIENT


class TranscribeRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Speech to text (the audio routes): the uploaded file as sent, bounded by
    `limits.max_body_bytes` before it is read, decoded on the model's thread."""

    audio: bytes
    task: Literal["transcribe", "translate"] = "transcribe"  # translate: into English
    language: str | None = None  # ISO-639-1; None: detected from the first window
    prompt: str | None = None  # text the first window continues (names, spelling, style)
    temperature: float | None = None  # None: Whisper's fallback ladder 0.0, 0.2 … 1.0
    words: bool = False  # word timestamps too (timestamp_granularities: word)
    max_seconds: float | None = None  # limits.max_audio: longer clips are refused
    stream: bool = False  # each segment's text as a TextDelta as it is decoded, then the whole
    client: Client = NO_CLIENT


SpeechFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]


class SpeechRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Text to speech (`POST /v1/audio/speech`): the text, the voice it is read in, how fast,
    and the encoding of the audio that comes back (chunk by chunk, as it is generated)."""

    text: str
    voice: str
    speed: float = 1.0  # 0.25 to 4: durations divided by it
    response_format: SpeechFormat = "mp3"
    client: Client = NO_CLIENT


StopReason = Literal["stop", "length", "stop_string", "tool_calls", "cancelled"]


class TextDelta(msgspec.Struct, frozen=True, tag="text"):
    text: str


class ReasoningDelta(msgspec.Struct, frozen=True, tag="reasoning"):
    """The model's thinking (between its think markers), kept apart from the answer."""

    text: str


class ToolCallOutput(msgspec.Struct, frozen=True, tag="tool_call"):
    call: ToolCall


class MalformedToolCall(msgspec.Struct, frozen=True, kw_only=True, tag="malformed_tool_call"):
    """Tool-call markers around text the tool parser could not read (guardrails decide)."""

    body: str  # between the markers
    raw: str  # as the model wrote it, markers included


class Finished(msgspec.Struct, frozen=True, kw_only=True, tag="finished"):
    """The engine's own accounting of one generation."""

    stop_reason: StopReason
    prompt_tokens: int
    new_tokens: int
    prefill_s: float
    decode_s: float
    reused_prefix_tokens: int = 0  # prompt tokens served from a parked KV cache
    reused_disk_tokens: int = 0  # of those, read from the disk tier
    # Prompt tokens past those reused that this request left in a tier (parked in RAM or
    # saved to disk), where a later request sharing the prefix can read them.
    cache_written_tokens: int = 0
    disk_load_s: float = 0.0
    session_evicted: bool = False  # parking this conversation evicted another one
    images: int = 0  # images the prompt carried (vision models)
    image_tokens: int = 0  # prompt tokens that stand for those images (in prompt_tokens)
    replica: str | None = None  # the upstream replica that served it (engine upstream/process)
    drafted_tokens: int = 0  # tokens speculation proposed (engines/llm/speculate.py)
    accepted_tokens: int = 0  # of those, the ones the model's own decoding kept
    # Seconds it waited in the batch for room in the KV pool (engines/llm/pool.py).
    kv_wait_s: float = 0.0


class PromptRead(msgspec.Struct, frozen=True, kw_only=True, tag="prompt_read"):
    """How the engine reads the prompt, told once it has looked in its cache tiers (before
    the first token): `cached_tokens` of `prompt_tokens` come from a tier, and it means to
    leave `writing_tokens` more in one when it ends (`Finished.cache_written_tokens` says
    what it did). The runner keeps it on the job (`Job.read`) for the adapters that report
    it before `Finished`; it is not passed on as an output."""

    prompt_tokens: int
    cached_tokens: int
    writing_tokens: int = 0


class Embedded(msgspec.Struct, frozen=True, kw_only=True, tag="embedded"):
    vectors: list[list[float]]
    prompt_tokens: int
    seconds: float


class Reranked(msgspec.Struct, frozen=True, kw_only=True, tag="reranked"):
    scores: list[float]  # one per document, in the request's order (higher: more relevant)
    prompt_tokens: int  # every token the model read: query and documents, as scored
    seconds: float


class TranscriptWord(msgspec.Struct, frozen=True):
    word: str
    start: float
    end: float


class TranscriptSegment(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    seek: int = 0  # the window's start, in 10 ms frames
    start: float  # seconds from the clip's start, continuous across Whisper's 30 s windows
    end: float
    text: str
    tokens: list[int] = []
    temperature: float = 0.0
    avg_logprob: float = 0.0
    compression_ratio: float = 0.0
    no_speech_prob: float = 0.0
    words: list[TranscriptWord] = []


class Transcribed(msgspec.Struct, frozen=True, kw_only=True, tag="transcribed"):
    text: str
    language: str
    segments: list[TranscriptSegment]
    audio_seconds: float  # the decoded clip's length
    new_tokens: int  # text tokens the decoder produced
    seconds: float  # decoding the file and transcribing it
    prompt_tokens: int = 0  # Whisper reads audio, not tokens: usage counts its seconds


class Voice(msgspec.Struct, frozen=True):
    """A voice a speech model reads in, and the language its text is phonemized in."""

    name: str
    language: str


class AudioChunk(msgspec.Struct, frozen=True, tag="audio"):
    """The next bytes of a speech answer's encoded audio (a sentence's, as it is made)."""

    data: bytes


class Spoken(msgspec.Struct, frozen=True, kw_only=True, tag="spoken"):
    """A speech answer's end: what it made and what it cost."""

    audio_seconds: float  # the audio generated
    sample_rate: int
    seconds: float  # phonemizing, generating and encoding it
    input_tokens: int  # phoneme ids the model read
    output_tokens: int  # duration frames it predicted (Kokoro: 40 a second of audio)
    segments: int  # the pieces it was made in (a sentence, or part of a long one)
    prompt_tokens: int = 0  # per-key limits count tokens; speech spends none of a chat's
    new_tokens: int = 0


Output = (
    TextDelta
    | ReasoningDelta
    | ToolCallOutput
    | MalformedToolCall
    | Logprobs
    | PromptRead
    | Finished
    | Embedded
    | Reranked
    | Transcribed
    | AudioChunk
    | Spoken
)
