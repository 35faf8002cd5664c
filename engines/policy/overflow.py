"""What a prompt that does not fit is made of: the tools' definitions, the system prompt, the
messages. A client that declares 24 tools (Claude Code's are ~25k tokens) should not be told
to shorten a conversation of two lines."""

from __future__ import annotations

from collections.abc import Callable

from msgspec.structs import replace

from engines.errors import ContextOverflow
from schemas.canonical import ChatRequest

SYSTEM_ROLES = ("system", "developer")


def explain(
    error: ContextOverflow, request: ChatRequest, count: Callable[[ChatRequest], int]
) -> ContextOverflow:
    """`error` with its message saying how many tokens the tools and the system prompt take.

    Each part is measured by rendering the prompt without it (the engine's own count, chat
    template included), so the parts are what leaving them out would save.
    """
    if request.raw_prompt is not None or error.parts is not None:
        return error
    chat = [m for m in request.messages if m.role not in SYSTEM_ROLES]
    has_system = len(chat) < len(request.messages)
    if not request.tools and not has_system:
        return error  # the conversation is all there is: the plain message says so
    bare = replace(request, tools=[])
    without_tools = count(bare) if request.tools else error.prompt_tokens
    without_system = count(replace(bare, messages=chat)) if has_system and chat else without_tools
    tools = max(0, error.prompt_tokens - without_tools) if request.tools else 0
    system = max(0, without_tools - without_system)
    error.explain(len(request.tools), tools, system)
    return error
