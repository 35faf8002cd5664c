"""OpenAI legacy completions (`/v1/completions`) wire formats; unknown fields are ignored."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import UNSET, Meta, UnsetType

from schemas.openai import LoraAsk, StreamOptions, Usage
from schemas.wire import Wire

# A prompt is text, a list of texts, or token ids (one list, or a list of lists); the
# adapter refuses token ids by name rather than leaving msgspec to say "expected str".
PromptItem = str | int | list[int]


class CompletionRequest(Wire, kw_only=True):
    model: Annotated[str, Meta(min_length=1)]
    prompt: str | Annotated[list[PromptItem], Meta(min_length=1, max_length=64)]
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: Annotated[int, Meta(ge=1)] | None = None
    temperature: Annotated[float, Meta(ge=0, le=2)] | None = None
    top_p: Annotated[float, Meta(gt=0, le=1)] | None = None
    top_k: Annotated[int, Meta(ge=0)] | None = None
    min_p: Annotated[float, Meta(ge=0, le=1)] | None = None
    stop: str | Annotated[list[str], Meta(max_length=16)] | None = None
    seed: int | None = None
    echo: bool = False
    suffix: str | None = None
    logprobs: Annotated[int, Meta(ge=0, le=5)] | None = None
    n: Annotated[int, Meta(ge=1, le=128)] | None = None
    best_of: Annotated[int, Meta(ge=1)] | None = None
    presence_penalty: Annotated[float, Meta(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Meta(ge=-2, le=2)] | None = None
    logit_bias: dict[str, Annotated[float, Meta(ge=-100, le=100)]] | None = None
    user: str | None = None  # informational: identifies the caller, changes no output
    # llama.cpp's: the adapter (`adapters:`) of the model named this request runs under.
    lora: list[LoraAsk] | None = None


class CompletionLogprobs(Wire, kw_only=True):
    """The legacy shape: parallel lists, one entry per token (the prompt's first has None)."""

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class CompletionChoice(Wire, kw_only=True):
    index: int
    text: str
    finish_reason: str | None
    logprobs: CompletionLogprobs | None = None


class Completion(Wire, kw_only=True):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | UnsetType = UNSET  # a stream carries it only on its last chunk
