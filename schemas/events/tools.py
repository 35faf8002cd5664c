"""Events of the MCP servers the gateway calls tools on (gateway/mcp): each call, and each
server's start, stop and failure. A tool's arguments and result are never in them."""

from __future__ import annotations

from schemas.events.base import Event


class ToolCalled(Event, tag="tool_called"):
    """One MCP `tools/call` the gateway made for a request; `bytes` is the result's size as
    the model got it (after the cap), `error` what went wrong, if anything."""

    server: str
    tool: str
    duration_s: float
    bytes: int
    error: str | None = None
    truncated: bool = False


class McpServerStarted(Event, tag="mcp_server_started"):
    server: str
    transport: str  # stdio | streamable_http | sse
    start_s: float


class McpServerFailed(Event, tag="mcp_server_failed"):
    """A start that failed, or a connection that broke; the next use starts it again after
    `retry_in_s` (engines/backoff.py's schedule)."""

    server: str
    error: str
    retry_in_s: float


class McpServerStopped(Event, tag="mcp_server_stopped"):
    server: str
    reason: str  # removed | changed | shutdown
