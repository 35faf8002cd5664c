"""OpenAI's output controls (chat and Responses) in canonical form, and logprobs in OpenAI's
shape: `response_format`/`text.format`, `tool_choice`, `parallel_tool_calls`, `strict`
tools, `logprobs`/`top_logprobs`; and `logit_bias` keyed by token id."""

from __future__ import annotations

from typing import Any

from engines.errors import BadRequest
from schemas import openai as wire
from schemas.canonical import OutputControls, OutputFormat, ToolSpec
from schemas.logprobs import LogprobsRequest, TokenLogprob


def output_format(kind: str, schema: dict[str, Any] | None, field: str) -> OutputFormat | None:
    """`text` (None), `json_object` (any object) or `json_schema` (its schema).

    `strict: false` is honoured too: the answer is still decoded under the schema, which
    gives at least what a best-effort model promises.
    """
    if kind == "text":
        return None
    if kind == "json_object":
        return OutputFormat(field=field)
    if kind == "json_schema":
        if schema is None:
            raise BadRequest(f"{field}: a json_schema format needs its schema")
        return OutputFormat(schema=schema, field=f"{field}.schema")
    raise BadRequest(f"{field}.type {kind!r} is not one of text, json_object, json_schema")


def tool_choice(choice: Any, tools: list[ToolSpec], field: str = "$.tool_choice"):
    """(tools the model hears of, `tool_choice`, forced tool name) for OpenAI's choice:
    "none" offers no tools at all (nor parses calls), "required" or a named function forces
    a call. A name not in `tools` is a 400 naming it."""
    if choice in (None, "auto"):
        return tools, "auto", None
    if choice == "none":
        return [], "auto", None
    if choice == "required":
        return tools, "required", None
    name = choice.function.name if hasattr(choice, "function") else choice.name
    if name not in {t.name for t in tools}:
        declared = ", ".join(sorted(t.name for t in tools)) or "none"
        raise BadRequest(
            f"{field} names function {name!r}, which is not in tools (declared: {declared})"
        )
    return tools, "required", name


def controls(
    *,
    format: OutputFormat | None,
    choice: str,
    forced: str | None,
    tools: list[ToolSpec],
    strict: list[str],
    parallel: bool | None,
    logprobs: LogprobsRequest | None,
) -> OutputControls:
    return OutputControls(
        format=format,
        tool_choice=choice,
        forced_tool=forced,
        strict_tools=[name for name in strict if name in {t.name for t in tools}],
        parallel_tool_calls=parallel,  # None (unset) is not true: see OutputControls
        logprobs=logprobs,
    )


def logprobs_request(asked: bool | None, top: int | None, field: str) -> LogprobsRequest | None:
    if top and not asked:
        raise BadRequest(f"{field} needs logprobs: true")
    return LogprobsRequest(top=top or 0) if asked else None


def wire_logprobs(tokens: list[TokenLogprob]) -> list[wire.TokenLogprob]:
    """Chat completions' `logprobs.content` entries."""
    return [
        wire.TokenLogprob(
            token=t.token,
            logprob=t.logprob if t.logprob is not None else 0.0,
            bytes=t.bytes,
            top_logprobs=[
                wire.TopLogprob(token=a.token, logprob=a.logprob, bytes=a.bytes) for a in t.top
            ],
        )
        for t in tokens
    ]


def logit_bias(bias: dict[str, float] | None) -> dict[int, float] | None:
    """OpenAI's `logit_bias` (token ids as JSON keys) keyed by int; a key that is not a
    token id is a 400 naming it (an id past the vocabulary: the engine's 400)."""
    if not bias:
        return None
    bad = [k for k in bias if not k.isdigit()]
    if bad:
        raise BadRequest(f"$.logit_bias: key {bad[0]!r} is not a token id")
    return {int(k): v for k, v in bias.items()}


def sampling_asked(data: Any) -> dict[str, Any]:
    """The sampling fields chat completions and completions share, as `ChatAsk` keywords."""
    return {
        "temperature": data.temperature,
        "top_p": data.top_p,
        "top_k": data.top_k,
        "min_p": data.min_p,
        "seed": data.seed,
        "presence_penalty": data.presence_penalty,
        "frequency_penalty": data.frequency_penalty,
        "logit_bias": logit_bias(data.logit_bias),
    }
