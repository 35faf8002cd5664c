"""The one canonical request from what a client asked, under its model's policy.

The one door (`engines/chat.py`) calls `build_chat_request` for every protocol, so the
model's defaults and limits are
applied in one place: request > model `sampling` > file `defaults` > built-in; the model's
`system` prompt when the request has none; `guardrails.max_output_tokens` as a silent cap
(clients such as Claude Code ask for large budgets as a matter of course; the answer's
`length` stop tells them it was reached); the reasoning effort (request > model
`reasoning`); and the policies the engines and `engines/policy/answer.py` enforce
(`guardrails.tool_calls`, `context.overflow`). `check_chat` checks tool schemas and
compiles output controls once, on a worker thread (a client's schema can take time).
"""

from __future__ import annotations

from msgspec.structs import replace

from engines.errors import BadRequest
from engines.policy.guardrails import check_tools
from engines.text.constrain import check_request
from engines.text.reasoning import effort_of
from schemas.canonical import ChatAsk, ChatRequest, Message, Sampling
from schemas.config import ModelConfig

DEFAULT_MAX_TOKENS = 512
BUILTIN_SAMPLING = Sampling()


def build_chat_request(model: ModelConfig, ask: ChatAsk) -> ChatRequest:
    """The canonical request for `model`: request > model `sampling` > file `defaults` >
    built-in, the model's `system` prompt, the output cap and the model's policies."""
    messages, raw_prompt, controls = ask.messages, ask.raw_prompt, ask.controls
    keep = ask.keep
    if not messages and raw_prompt is None:
        raise BadRequest("messages must hold at least one message")
    if (
        model.system
        and raw_prompt is None
        and not any(m.role in ("system", "developer") for m in messages)
    ):
        messages = [Message(role="system", content=model.system), *messages]
        keep = tuple(replace(k, messages=k.messages + 1) for k in keep)
    defaults = model.sampling
    wanted = ask.max_tokens or defaults.max_tokens or DEFAULT_MAX_TOKENS
    cap = model.guardrails.max_output_tokens
    sampling = Sampling(
        temperature=_first(ask.temperature, defaults.temperature, BUILTIN_SAMPLING.temperature),
        top_p=_first(ask.top_p, defaults.top_p, BUILTIN_SAMPLING.top_p),
        top_k=_first(ask.top_k, defaults.top_k, BUILTIN_SAMPLING.top_k),
        min_p=_first(ask.min_p, defaults.min_p, BUILTIN_SAMPLING.min_p),
        seed=_first(ask.seed, defaults.seed, None),
        repeat_penalty=_first(
            ask.repeat_penalty, defaults.repeat_penalty, BUILTIN_SAMPLING.repeat_penalty
        ),
        repeat_last_n=_first(
            ask.repeat_last_n, defaults.repeat_last_n, BUILTIN_SAMPLING.repeat_last_n
        ),
        presence_penalty=_first(
            ask.presence_penalty, defaults.presence_penalty, BUILTIN_SAMPLING.presence_penalty
        ),
        frequency_penalty=_first(
            ask.frequency_penalty, defaults.frequency_penalty, BUILTIN_SAMPLING.frequency_penalty
        ),
        logit_bias=ask.logit_bias or {},
    )
    request = ChatRequest(
        messages=messages,
        max_tokens=min(wanted, cap) if cap else wanted,
        sampling=sampling,
        stop=ask.stop or [],
        tools=ask.tools or [],
        raw_prompt=raw_prompt,
        prompt_ids=ask.prompt_ids,
        reasoning=ask.reasoning or effort_of(model.reasoning),
        tool_policy=model.guardrails.tool_calls,
        overflow=model.context.overflow,
        tools_overflow=model.context.tools_overflow,
        window=ask.window,
        controls=controls,
        client=ask.client,
        keep=keep,
    )
    return request


def check_chat(request: ChatRequest) -> None:
    """Refuse tool schemas that are not JSON Schema and output controls the grammar engine
    cannot enforce, before the request queues. Blocking where `compiles_schemas`: call it off
    the event loop then."""
    check_tools(request.tools)
    check_request(request)


def compiles_schemas(request: ChatRequest) -> bool:
    """Whether `check_chat` compiles client-written schemas (tools, a response format);
    without any, its checks are a few comparisons."""
    return bool(request.tools) or request.controls.format is not None


def _first(*values):
    return next((v for v in values if v is not None), None)
