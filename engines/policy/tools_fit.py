"""`context.tools_overflow: drop_unused`: tool definitions that alone overflow the window.

Open WebUI sends its 36 built-in tools (~25k tokens) with every chat, whatever the model's
window; a model of 8k tokens could answer none of them. Under `drop_unused` the tools the
conversation has used (an assistant turn called them, or the request forces one) always
stay; of the others, the first ones in the order the request declared them stay, as many as
leave the prompt room for an answer; the rest are left out, named in a `tools_dropped`
event and the response's `x-gateway-dropped-tools` header. What still does not fit then
meets `context.overflow` as any long prompt does. Counting is the real rendered prompt (chat
template, tools, special tokens), by the engine's own `count_prompt`.
"""

from __future__ import annotations

from collections.abc import Callable

from msgspec.structs import replace

from engines.log import emit
from engines.policy.truncation import RESERVE_TOKENS
from schemas.canonical import ChatRequest
from schemas.events import ToolsDropped


def used_tools(request: ChatRequest) -> set[str]:
    """The tools the conversation has used: called in an assistant turn, or forced now."""
    used = {call.name for m in request.messages for call in m.tool_calls or ()}
    if request.controls.forced_tool is not None:
        used.add(request.controls.forced_tool)
    return used


def drop_unused_tools(
    model_id: str,
    request: ChatRequest,
    count: Callable[[ChatRequest], int],
    window: int,
    tokens: int | None = None,
) -> ChatRequest:
    """`request` with the tools it has not used left out, last declared first, until the
    prompt leaves room for `min(max_tokens, 64)` new tokens; unchanged when it fits already.
    `tokens` is the full prompt's count when the caller has it."""
    if not request.tools or request.raw_prompt is not None:
        return request
    room = min(request.max_tokens, RESERVE_TOKENS)
    tokens = count(request) if tokens is None else tokens
    if tokens + room <= window:
        return request
    used = used_tools(request)
    unused = [t.name for t in request.tools if t.name not in used]
    if not unused:
        return request  # every tool is in use: `context.overflow` decides

    def keeping(k: int) -> ChatRequest:
        kept = used | set(unused[:k])
        return replace(request, tools=[t for t in request.tools if t.name in kept])

    # More tools never render shorter: the most unused ones that fit, found by bisection.
    low, high = 0, len(unused) - 1  # all of them: the prompt counted above
    while low < high:
        middle = (low + high + 1) // 2
        if count(keeping(middle)) + room <= window:
            low = middle
        else:
            high = middle - 1
    fitted = keeping(low)
    dropped = tuple(unused[low:])
    emit(
        ToolsDropped(
            model=model_id,
            dropped=list(dropped),
            kept=len(fitted.tools),
            prompt_tokens=tokens,
            window=window,
        )
    )
    return replace(fitted, dropped_tools=dropped)
