"""One call of an MCP tool as the model made it (arguments as the model wrote them), what the
model is told of its result, and the request's transcript of calls: kept in memory for the
Activity capture (`capture: true` models, gateway/ops/activity/capture.py), which alone
stores it, redacted; nothing here logs an argument or a result."""

from __future__ import annotations

import json
from contextvars import ContextVar

from gateway.mcp.server import CallResult, McpServer
from schemas.canonical import ToolCall

# The request's calls, when its capture middleware holds a list for them (every protocol
# request; the list is stored only when the request routed to a model that captures).
TRANSCRIPT: ContextVar[list[dict] | None] = ContextVar("mcp_transcript", default=None)


async def call_tool(server: McpServer, call: ToolCall) -> CallResult:
    """`tools/call` with the model's arguments; arguments that are no JSON object are an
    error the model hears, as a failed tool's is."""
    try:
        arguments = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as error:
        result = CallResult(text="", error=f"arguments are not JSON: {error}", protocol_error=True)
    else:
        if isinstance(arguments, dict):
            result = await server.call(call.name, arguments)
        else:
            result = CallResult(
                text="", error="arguments are not a JSON object", protocol_error=True
            )
    transcript = TRANSCRIPT.get()
    if transcript is not None:
        transcript.append(
            {
                "server": server.name,
                "tool": call.name,
                "arguments": call.arguments,
                "result": result.text,
                "error": result.error,
            }
        )
    return result


def for_model(result: CallResult) -> str:
    """A failed call reaches the model as an error it can read, never as the gateway's 500."""
    if result.error is None:
        return result.text
    return f"error: {result.error}"
