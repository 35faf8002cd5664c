"""OpenAI wire formats. Lenient: clients send fields we do not use, and that is fine."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, UnsetType, field

from schemas.wire import Wire

NonNegativeFloat = Annotated[float, Meta(ge=0)]
# Every effort OpenAI's API names; the gateway serves off/low/medium/high (see EFFORTS).
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
EFFORTS = {"none": "off", "minimal": "low", "xhigh": "high", "max": "high"}


class ImageURL(Wire, kw_only=True):
    url: str
    detail: Literal["auto", "low", "high"] = "auto"


class ContentPart(Wire, kw_only=True):
    type: str
    text: str | None = None
    image_url: ImageURL | str | None = None  # `image_url` parts: a data URL or http(s) URL


class FunctionCall(Wire, kw_only=True):
    name: str
    arguments: str


class ToolCall(Wire, kw_only=True):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(Wire, kw_only=True):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[ToolCall] | None = None


class FunctionSpec(Wire, kw_only=True):
    name: Annotated[str, Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")]
    description: str = ""
    parameters: dict[str, Any] = {}
    strict: bool | None = None  # true: the call's arguments are decoded under `parameters`


class JsonSchemaFormat(Wire, kw_only=True):
    name: Annotated[str, Meta(min_length=1, max_length=64)]
    description: str | None = None
    schema: dict[str, Any] | None = None
    strict: bool | None = None


class ResponseFormat(Wire, kw_only=True):
    """`text`, `json_object` (any JSON object) or `json_schema` (`json_schema.schema`)."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class NamedFunction(Wire, kw_only=True):
    name: Annotated[str, Meta(min_length=1)]


class NamedToolChoice(Wire, kw_only=True):
    type: Literal["function"]
    function: NamedFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class Tool(Wire, kw_only=True):
    type: Literal["function"]
    function: FunctionSpec


class StreamOptions(Wire, kw_only=True):
    include_usage: bool = False


class LoraAsk(Wire, kw_only=True, forbid_unknown_fields=True):
    """One entry of llama.cpp's per-request `lora`: a declared adapter of the model named,
    by id, and its scale (a multiplier on the adapter's own, as the config's `scale`; left
    out: the config's)."""

    id: Annotated[str, Meta(min_length=1)]
    scale: Annotated[float, Meta(ge=0, le=16)] | None = None


class ChatCompletionRequest(Wire, kw_only=True):
    model: Annotated[str, Meta(min_length=1)]
    messages: Annotated[list[ChatMessage], Meta(min_length=1)]
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: Annotated[int, Meta(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Meta(ge=1)] | None = None
    temperature: Annotated[float, Meta(ge=0, le=2)] | None = None
    top_p: Annotated[float, Meta(gt=0, le=1)] | None = None
    top_k: Annotated[int, Meta(ge=0)] | None = None
    min_p: Annotated[float, Meta(ge=0, le=1)] | None = None
    stop: str | Annotated[list[str], Meta(max_length=16)] | None = None
    seed: int | None = None
    n: Annotated[int, Meta(ge=1, le=128)] | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Meta(ge=0, le=20)] | None = None
    reasoning_effort: ReasoningEffort | None = None
    tools: Annotated[list[Tool], Meta(max_length=128)] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    presence_penalty: Annotated[float, Meta(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Meta(ge=-2, le=2)] | None = None
    logit_bias: dict[str, Annotated[float, Meta(ge=-100, le=100)]] | None = None
    # llama.cpp's: the adapter (`adapters:`) of the model named this request runs under.
    lora: list[LoraAsk] | None = None
    # Defined by OpenAI and refused by name when set (see gateway/openai/chat.py: REFUSED).
    prediction: Any = None
    modalities: list[str] | None = None
    audio: Any = None
    web_search_options: Any = None
    functions: Any = None
    function_call: Any = None
    store: bool | None = None
    service_tier: str | None = None
    verbosity: str | None = None
    # Informational: they identify the caller or label the request, and change no output.
    user: str | None = None
    metadata: dict[str, str] | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None


class PromptTokensDetails(Wire, kw_only=True):
    cached_tokens: int = 0  # of prompt_tokens, those read from a cache tier (RAM or disk)


class Usage(Wire, kw_only=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails = field(default_factory=PromptTokensDetails)


class AssistantMessage(Wire, kw_only=True):
    role: Literal["assistant"] = "assistant"
    content: str | None
    refusal: str | None = None  # OpenAI's schema requires the key, null when none
    # OpenAI's schema allows an array here, not null: without calls the key is left out.
    tool_calls: list[ToolCall] | UnsetType = UNSET
    # The model's thinking, as DeepSeek's API and llama.cpp's server name it.
    reasoning_content: str | UnsetType = UNSET


class TopLogprob(Wire, kw_only=True):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprob(Wire, kw_only=True):
    token: str
    logprob: float
    bytes: list[int] | None
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(Wire, kw_only=True):
    content: list[TokenLogprob] | None
    refusal: None = None


class Choice(Wire, kw_only=True):
    index: int = 0
    message: AssistantMessage
    finish_reason: str | None
    logprobs: ChoiceLogprobs | None = None


class ChatCompletion(Wire, kw_only=True):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage


class FunctionCallDelta(Wire, kw_only=True):
    name: str
    arguments: str


class ToolCallDelta(Wire, kw_only=True):
    index: int
    id: str
    type: Literal["function"] = "function"
    function: FunctionCallDelta


class Delta(Wire, kw_only=True, omit_defaults=True):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChunkChoice(Wire, kw_only=True):
    index: int = 0
    delta: Delta
    finish_reason: str | None = None
    logprobs: ChoiceLogprobs | None = None


class ChatCompletionChunk(Wire, kw_only=True):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | UnsetType = UNSET  # only on the last chunk, when include_usage asks


class ModelCard(Wire, kw_only=True):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "mlx-gateway"
    # Ours, beside OpenAI's fields: which id an alias routes to, and a model's aliases.
    alias_of: str | None = None
    aliases: list[str] = []


class ModelList(Wire, kw_only=True):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorBody(Wire, kw_only=True):
    message: str
    type: str
    param: str | None = None
    code: Any = None


class ErrorResponse(Wire, kw_only=True):
    error: ErrorBody
