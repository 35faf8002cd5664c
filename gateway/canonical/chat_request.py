"""Build the one canonical request from any protocol's fields, applying the model's policy.

Every protocol adapter calls `build_chat_request`, so the model's defaults and limits are
applied in one place: request > model `sampling` > file `defaults` > built-in; the model's
`system` prompt when the request has none; `guardrails.max_output_tokens` as a silent cap
(clients such as Claude Code ask for large budgets as a matter of course; the answer's
`length` stop tells them it was reached); the reasoning effort (request > model
`reasoning`); and the policies the engines and `engines/policy/answer.py` enforce
(`guardrails.tool_calls`, `context.overflow`). Tool schemas are checked here, once.
"""

from __future__ import annotations

import msgspec

from engines.errors import BadRequest
from engines.policy.guardrails import check_tools
from engines.text.constrain import check_request
from engines.text.reasoning import effort_of
from schemas.canonical import (
    ChatRequest,
    Effort,
    LogprobsRequest,
    Message,
    OutputFormat,
    Sampling,
    ToolChoice,
    ToolSpec,
)
from schemas.config import ModelConfig

DEFAULT_MAX_TOKENS = 512
BUILTIN_SAMPLING = Sampling()


def build_chat_request(
    model: ModelConfig,
    messages: list[Message],
    *,
    max_tokens: int | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    min_p: float | None = None,
    seed: int | None = None,
    stop: list[str] | None = None,
    tools: list[ToolSpec] | None = None,
    raw_prompt: str | None = None,
    prompt_ids: list[int] | None = None,
    reasoning: Effort | None = None,
    window: int | None = None,
    controls: OutputControls | None = None,
) -> ChatRequest:
    """The canonical request for `model`; `raw_prompt` (plain completions) skips the template.

    `reasoning` is the effort the request asked for in its protocol's own field, already
    read as off/low/medium/high by the adapter; None leaves the model's default.
    `controls` are the output controls in canonical form; what the grammar engine cannot
    enforce is refused here, before the request queues.
    """
    if not messages and raw_prompt is None:
        raise BadRequest("messages must hold at least one message")
    check_tools(tools or [])
    if (
        model.system
        and raw_prompt is None
        and not any(m.role in ("system", "developer") for m in messages)
    ):
        messages = [Message(role="system", content=model.system), *messages]
    defaults = model.sampling
    wanted = max_tokens or defaults.max_tokens or DEFAULT_MAX_TOKENS
    cap = model.guardrails.max_output_tokens
    sampling = Sampling(
        temperature=_first(temperature, defaults.temperature, BUILTIN_SAMPLING.temperature),
        top_p=_first(top_p, defaults.top_p, BUILTIN_SAMPLING.top_p),
        top_k=_first(top_k, defaults.top_k, BUILTIN_SAMPLING.top_k),
        min_p=_first(min_p, defaults.min_p, BUILTIN_SAMPLING.min_p),
        seed=_first(seed, defaults.seed, None),
    )
    controls = controls or OutputControls()
    request = ChatRequest(
        messages=messages,
        max_tokens=min(wanted, cap) if cap else wanted,
        sampling=sampling,
        stop=stop or [],
        tools=tools or [],
        raw_prompt=raw_prompt,
        prompt_ids=prompt_ids,
        reasoning=reasoning or effort_of(model.reasoning),
        tool_policy=model.guardrails.tool_calls,
        overflow=model.context.overflow,
        window=window,
        format=controls.format,
        tool_choice=controls.tool_choice,
        forced_tool=controls.forced_tool,
        strict_tools=controls.strict_tools,
        parallel_tool_calls=controls.parallel_tool_calls,
        logprobs=controls.logprobs,
    )
    check_request(request)
    return request


class OutputControls(msgspec.Struct, frozen=True, kw_only=True):
    """A request's output controls, as each adapter reads them from its protocol's fields."""

    format: OutputFormat | None = None
    tool_choice: ToolChoice = "auto"
    forced_tool: str | None = None
    strict_tools: list[str] = []
    parallel_tool_calls: bool = True
    logprobs: LogprobsRequest | None = None


def _first(*values):
    return next((v for v in values if v is not None), None)
