"""A chat request through the checkpoint's chat template: messages, tool specs where the
template reads them, the reasoning switches, and the generation prompt opened."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engines.text.reasoning import template_kwargs
from engines.text.tools import template_knows_tools, tool_specs
from schemas.canonical import ChatRequest, Message, ToolSpec

# The request's messages as the template reads them (text's `template_messages`, or the
# vision engine's, with image parts), given whether the template renders tools itself.
ToMessages = Callable[[list[Message], list[ToolSpec], bool], list[dict[str, Any]]]
# Another try at messages the template refused (None: nothing else to try).
Refold = Callable[[list[dict[str, Any]]], list[dict[str, Any]] | None]


def render_chat(
    tokenizer, request: ChatRequest, to_messages: ToMessages, refold: Refold | None = None
) -> str:
    """The prompt text for `request`; where the template raises and `refold` gives other
    messages (`fold_system_turns`: system turns moved first), those are rendered instead."""
    knows_tools = template_knows_tools(getattr(tokenizer, "chat_template", None))
    messages = to_messages(request.messages, request.tools, knows_tools)
    extra = {"tools": tool_specs(request.tools)} if request.tools and knows_tools else {}
    extra |= template_kwargs(request.reasoning)
    try:
        return tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, **extra
        )
    except Exception:
        # Templates that allow a system turn only first: fold later ones into it.
        again = refold(messages) if refold is not None else None
        if again is None:
            raise
        return tokenizer.apply_chat_template(
            again, add_generation_prompt=True, tokenize=False, **extra
        )
