"""`context.overflow: truncate`: drop the oldest turns until the rendered prompt fits.

The system prompt and the latest message always stay; older messages go oldest first, cut at
turn boundaries (a user message) so templates that insist on alternating roles still render
and no tool result is left without its call. Counting is the real rendered prompt (chat
template, tools, special tokens), by the engine's own `count_prompt`.
"""

from __future__ import annotations

from collections.abc import Callable

from msgspec.structs import replace

from engines.errors import ContextOverflow
from engines.policy.overflow import explain
from schemas.canonical import ChatRequest

# Room kept for the answer, when the request's max_tokens is larger than this.
RESERVE_TOKENS = 64


def fit_messages(
    model_id: str,
    request: ChatRequest,
    count: Callable[[ChatRequest], int],
    window: int,
    tokens: int | None = None,
) -> ChatRequest:
    """`request` with its oldest turns dropped until the prompt leaves room for an answer.

    Room is `min(max_tokens, RESERVE_TOKENS)` tokens; when even the shortest conversation
    (system prompt and latest message) leaves less, it is served with what is left, and when
    it does not fit at all, `ContextOverflow` names its count. `tokens` is the full prompt's
    count when the caller has it. The result carries `truncated_messages`.
    """
    room = min(request.max_tokens, RESERVE_TOKENS)
    tokens = count(request) if tokens is None else tokens
    if tokens + room <= window or request.raw_prompt is not None:
        return request  # fits, or a raw prompt with no turns to drop (the engine decides)
    messages = request.messages
    head = 0
    while head < len(messages) - 1 and messages[head].role in ("system", "developer"):
        head += 1
    older = range(head, len(messages) - 1)
    # Cut points: how many older messages to drop so the kept ones start at a user turn.
    cuts = [k - head for k in older if k > head and messages[k].role == "user"]
    cuts.append(len(older))

    def shortened(drop: int) -> ChatRequest:
        kept = [*messages[:head], *messages[head + drop :]]
        # The marked prefixes are gone with the dropped turns: nothing to keep of them.
        return replace(request, messages=kept, truncated_messages=drop, keep=())

    counts: dict[int, int] = {}

    def size(i: int) -> int:
        if i not in counts:
            counts[i] = count(shortened(cuts[i]))
        return counts[i]

    # Fewer messages never render longer, so the first cut that fits is found by bisection.
    low, high = 0, len(cuts) - 1
    if size(high) + room > window:
        if size(high) < window:
            return shortened(cuts[high])  # fits, with less room than hoped
        overflow = ContextOverflow(model_id, size(high), window, request.window_setting(window))
        error = explain(overflow, shortened(cuts[high]), count)
        if cuts[high]:
            error.message += f" (even after dropping the {cuts[high]} oldest messages)"
        raise error
    while low < high:
        middle = (low + high) // 2
        if size(middle) + room <= window:
            high = middle
        else:
            low = middle + 1
    return shortened(cuts[low])
