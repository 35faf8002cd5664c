"""Messages and tools as chat templates take them, with a fallback for templates without tools.

A template that knows tools (it reads a `tools` variable) gets them as Hugging Face
function specs and structured `tool_calls`. One that does not (SmolLM2's, for one) gets a
system prompt describing the tools and asking for `<tool_call>` JSON — the format of
mlx-lm's `json_tools` parser — with earlier calls and results written in that same format.
"""

from __future__ import annotations

import json
from typing import Any

from schemas.canonical import Message, ToolSpec

# Chat templates know system/user/assistant/tool; OpenAI's "developer" is a system turn.
TEMPLATE_ROLES = {"developer": "system"}

FALLBACK_TOOL_PROMPT = (
    "You can call these tools. To call one, answer with only\n"
    '<tool_call>{{"name": "<tool name>", "arguments": {{<arguments as JSON>}}}}</tool_call>\n'
    "Tools:\n{tools}"
)


def template_knows_tools(chat_template: str | None) -> bool:
    return bool(chat_template) and "tools" in chat_template


def tool_specs(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    """Tools as Hugging Face chat templates expect them."""
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in tools
    ]


def template_messages(
    messages: list[Message], tools: list[ToolSpec], knows_tools: bool
) -> list[dict[str, Any]]:
    """The conversation as template dicts; tools described in a system turn if need be."""
    rendered = [_message(m, knows_tools) for m in messages]
    if tools and not knows_tools:
        listing = "\n".join(json.dumps(spec["function"]) for spec in tool_specs(tools))
        prompt = FALLBACK_TOOL_PROMPT.format(tools=listing)
        if rendered and rendered[0]["role"] == "system":
            rendered[0] = {**rendered[0], "content": rendered[0]["content"] + "\n\n" + prompt}
        else:
            rendered.insert(0, {"role": "system", "content": prompt})
    return rendered


def fold_system_turns(rendered: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """System turns after the first non-system turn folded, in order, into the leading
    system prompt; None when there are none to fold.

    For chat templates that refuse a system turn anywhere but first (Qwen's, Llama 3's
    raise): the instructions still reach the model, in the order they were given.
    """
    head = 0
    while head < len(rendered) and rendered[head]["role"] == "system":
        head += 1
    later = [m for m in rendered[head:] if m["role"] == "system"]
    if not later:
        return None
    system = "\n\n".join(str(m["content"]) for m in [*rendered[:head], *later])
    rest = [m for m in rendered[head:] if m["role"] != "system"]
    return [{"role": "system", "content": system}, *rest]


def _message(message: Message, knows_tools: bool) -> dict[str, Any]:
    role = TEMPLATE_ROLES.get(message.role, message.role)
    if knows_tools:
        out: dict[str, Any] = {"role": role, "content": message.content}
        if message.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": _arguments(c.arguments)},
                }
                for c in message.tool_calls
            ]
        if message.role == "tool":
            out |= {"tool_call_id": message.tool_call_id, "name": message.name}
        return out
    if message.tool_calls:
        calls = "".join(
            f'<tool_call>{{"name": {json.dumps(c.name)}, "arguments": {c.arguments}}}</tool_call>'
            for c in message.tool_calls
        )
        return {"role": role, "content": message.content + calls}
    if message.role == "tool":
        return {"role": "user", "content": f"<tool_response>{message.content}</tool_response>"}
    return {"role": role, "content": message.content}


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
