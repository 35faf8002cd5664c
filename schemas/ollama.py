"""Ollama wire formats (`/api/*`). Lenient: clients send fields we do not use, and that is fine.

Replies omit what Ollama omits (`done_reason` and the counts appear on the final object only),
so every reply struct sets `omit_defaults` and keeps the always-present fields required.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from schemas.wire import Wire

ModelName = Annotated[str, Meta(min_length=1)]


class Reply(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Base of reply structs: fields left at their default are not written."""


class Options(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The `options` Ollama clients send. Each is honoured, refused by name, or (what changes
    no output: hardware hints, a sampler set to off) accepted and said ignored: the ones the
    gateway applies and the hints are typed; those typed `Any` are Ollama's others, which a
    request may send as null (clients send every field they know) or as off; any other name
    is refused by the decoder."""

    # -1 (no limit) and -2 (fill the context) mean "the model's default" here; so does 0.
    num_predict: Annotated[int, Meta(ge=-2)] | None = None
    temperature: Annotated[float, Meta(ge=0, le=2)] | None = None
    top_p: Annotated[float, Meta(gt=0, le=1)] | None = None
    top_k: Annotated[int, Meta(ge=0)] | None = None
    min_p: Annotated[float, Meta(ge=0, le=1)] | None = None
    stop: str | Annotated[list[str], Meta(max_length=16)] | None = None
    seed: int | None = None
    num_ctx: Annotated[int, Meta(ge=1)] | None = None
    repeat_penalty: Annotated[float, Meta(gt=0, le=10)] | None = None
    repeat_last_n: Annotated[int, Meta(ge=-1)] | None = None  # -1: the window; 0: off
    presence_penalty: Annotated[float, Meta(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Meta(ge=-2, le=2)] | None = None
    # Ollama's options the gateway does not apply (other samplers, the context shift's
    # kept tokens): refused when set, but for the samplers' own "off" values
    # (gateway/ollama/options.py).
    num_keep: Any = None
    typical_p: Any = None
    penalize_newline: Any = None
    mirostat: Any = None
    mirostat_tau: Any = None
    mirostat_eta: Any = None
    tfs_z: Any = None
    # Hardware hints for Ollama's runner: they change no output, so they are accepted and
    # not applied (an `options_ignored` event says so).
    num_batch: int | None = None
    num_gpu: int | None = None
    main_gpu: int | None = None
    low_vram: bool | None = None
    use_mmap: bool | None = None
    use_mlock: bool | None = None
    num_thread: int | None = None
    numa: bool | None = None


class ToolCallFunction(Wire, kw_only=True):
    name: ModelName
    arguments: dict[str, Any] = {}


class ToolCall(Wire, kw_only=True):
    function: ToolCallFunction


class Message(Wire, kw_only=True):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    images: list[str] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_name: str | None = None  # on a `tool` message: the tool that answered


class ToolFunction(Wire, kw_only=True):
    name: ModelName
    description: str = ""
    parameters: dict[str, Any] = {}


class Tool(Wire, kw_only=True):
    type: Literal["function"] = "function"
    function: ToolFunction


KeepAlive = str | float | None
Think = bool | Literal["low", "medium", "high"] | None


class ChatRequest(Wire, kw_only=True):
    model: ModelName
    messages: list[Message] = []
    tools: list[Tool] | None = None
    stream: bool = True
    format: Any = None
    options: Options | None = None
    keep_alive: KeepAlive = None
    think: Think = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Meta(ge=0, le=20)] | None = None


class GenerateRequest(Wire, kw_only=True):
    model: ModelName
    prompt: str = ""
    suffix: str | None = None
    system: str | None = None
    template: str | None = None
    context: list[int] | None = None
    raw: bool = False
    images: list[str] | None = None
    stream: bool = True
    format: Any = None
    options: Options | None = None
    keep_alive: KeepAlive = None
    think: Think = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Meta(ge=0, le=20)] | None = None


class ShowRequest(Wire, kw_only=True):
    model: str = ""
    name: str = ""  # older clients send the model as `name`
    verbose: bool = False


class PullRequest(Wire, kw_only=True):
    model: str = ""
    name: str = ""  # older clients send the model as `name`
    insecure: bool = False
    stream: bool = True


class PullProgress(Reply, kw_only=True):
    """One line of `/api/pull`: a status, and while a file arrives its bytes."""

    status: str
    digest: str | None = None
    total: int | None = None
    completed: int | None = None


class ReplyFunction(Reply, kw_only=True):
    name: str
    arguments: dict[str, Any]


class ReplyToolCall(Reply, kw_only=True):
    function: ReplyFunction


class ReplyMessage(Reply, kw_only=True):
    role: Literal["assistant"]
    content: str
    thinking: str | None = None  # only when the request asked to think, as Ollama's
    tool_calls: list[ReplyToolCall] | None = None


class TopLogprob(Reply, kw_only=True):
    token: str
    logprob: float
    bytes: list[int] | None = None


class Logprob(Reply, kw_only=True):
    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list[TopLogprob] | None = None


class Answer(Reply, kw_only=True):
    """What every `/api/chat` and `/api/generate` object carries; counts on the final one."""

    model: str
    created_at: str  # RFC 3339
    done: bool
    logprobs: list[Logprob] | None = None  # of this object's tokens, when asked for
    done_reason: str | None = None
    # Durations are nanoseconds, as in Ollama.
    total_duration: int | None = None
    load_duration: int | None = None
    prompt_eval_count: int | None = None
    prompt_eval_duration: int | None = None
    eval_count: int | None = None
    eval_duration: int | None = None


class ChatAnswer(Answer, kw_only=True):
    message: ReplyMessage


class GenerateAnswer(Answer, kw_only=True):
    response: str
    thinking: str | None = None


class ModelDetails(Reply, kw_only=True):
    parent_model: str = ""
    format: str
    family: str
    families: list[str] | None = None
    parameter_size: str
    quantization_level: str


class TagModel(Reply, kw_only=True):
    name: str
    model: str
    modified_at: str
    size: int
    digest: str
    details: ModelDetails
    revision: str | None = None  # an hf: model's cached commit (not in Ollama's own replies)


class Tags(Reply, kw_only=True):
    models: list[TagModel]


class RunningModel(Reply, kw_only=True):
    name: str
    model: str
    size: int
    digest: str
    details: ModelDetails
    expires_at: str
    size_vram: int
    context_length: int | None = None
    # Ours, beside Ollama's fields: a pinned model stays loaded whatever `keep_alive` says.
    pinned: bool = False


class Running(Reply, kw_only=True):
    models: list[RunningModel]


class ShowAnswer(Reply, kw_only=True):
    modelfile: str
    parameters: str
    template: str
    details: ModelDetails
    model_info: dict[str, Any]
    capabilities: list[str]
    modified_at: str


class Version(Reply, kw_only=True):
    version: str
