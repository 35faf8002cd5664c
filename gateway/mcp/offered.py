"""The MCP tools a chat completions, Anthropic Messages or Ollama chat request offers its
model: those of the servers its `tools_from` names, less the servers the request's key may
not use (a key not allowed a server never hears of its tools), after the client's own.

Name clashes: a client's tool keeps its name and the MCP tool of that name is not offered
(the client declared what it means); between two servers, the one named first in
`tools_from` keeps it. A server that cannot be started or listed is left out of this
request (the response's `x-gateway-mcp-unavailable` header names it) instead of failing a
request that never asked for it; it is started again after its back-off."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import mcp_types
from litestar.connection import ASGIConnection

from engines.errors import McpServerUnavailable
from gateway.control.keys import KEY_RUN_TOOLS, mcp_allowed
from gateway.http.request_state import leave_header
from gateway.mcp.pool import McpPool
from gateway.mcp.server import McpServer
from schemas.canonical import ToolSpec
from schemas.config import ModelConfig

UNAVAILABLE_HEADER = "x-gateway-mcp-unavailable"


@dataclass
class ServerTool:
    server: McpServer
    tool: mcp_types.Tool


@dataclass
class OfferedTools:
    """The MCP tools offered (by the name the model calls), and whether the gateway makes
    the model's calls of them (`run_tools`) or returns them to the client."""

    tools: dict[str, ServerTool] = field(default_factory=dict)
    run: bool = False

    @property
    def specs(self) -> list[ToolSpec]:
        return [
            ToolSpec(
                name=name, description=t.tool.description or "", parameters=t.tool.input_schema
            )
            for name, t in self.tools.items()
        ]


async def offered_tools(
    connection: ASGIConnection, model: ModelConfig, client_tools: set[str]
) -> OfferedTools:
    """The request's MCP tools for `model`, as its key may use them; `client_tools` are the
    names the client declared (they win a clash)."""
    found = OfferedTools()
    if not model.tools_from:
        return found
    keyed = KEY_RUN_TOOLS.get()
    found.run = model.run_tools if keyed is None else keyed
    pool: McpPool = connection.app.state.mcp_pool
    servers = [s for s in pool.servers() if s.name in model.tools_from and mcp_allowed(s.name)]
    servers.sort(key=lambda s: model.tools_from.index(s.name))
    # Started side by side: one slow server does not hold up the others.
    listed = await asyncio.gather(*(s.tools() for s in servers), return_exceptions=True)
    unavailable = []
    for server, tools in zip(servers, listed, strict=True):
        if isinstance(tools, McpServerUnavailable):
            unavailable.append(server.name)
            continue
        if isinstance(tools, BaseException):
            raise tools
        for tool in tools:
            if tool.name not in client_tools and tool.name not in found.tools:
                found.tools[tool.name] = ServerTool(server, tool)
    if unavailable:
        leave_header(connection, UNAVAILABLE_HEADER, ",".join(unavailable))
    return found
