"""`GET /v1/mcp/servers` and `GET /v1/mcp/tools`: the declared MCP servers and their tools, as
the request's key may see them (the admin key and a gateway without keys: every one). Listing
tools starts a server not yet running; one that cannot start is listed with its error."""

from __future__ import annotations

import asyncio

from litestar import Request, get

from engines.errors import McpServerUnavailable
from gateway.control.keys import mcp_allowed
from gateway.mcp.pool import McpPool
from gateway.mcp.server import McpServer

VISIBLE = {"admin_too": True}  # the API-key guard lets the admin key through as well


def _visible(request: Request) -> list[McpServer]:
    pool: McpPool = request.app.state.mcp_pool
    return [s for s in pool.servers() if mcp_allowed(s.name)]


@get("/v1/mcp/servers", opt=VISIBLE)
async def list_servers(request: Request) -> dict:
    """Each server: how it is reached (never its command line, env or headers), its state."""
    return {"object": "list", "data": [server.describe() for server in _visible(request)]}


@get("/v1/mcp/tools", opt=VISIBLE)
async def list_tools(request: Request) -> dict:
    servers = _visible(request)
    # Started side by side: one slow server does not hold up the others' lists.
    found = await asyncio.gather(*(s.tools() for s in servers), return_exceptions=True)
    data, errors = [], []
    for server, tools in zip(servers, found, strict=True):
        if isinstance(tools, McpServerUnavailable):
            errors.append({"server": server.name, "error": str(tools)})
            continue
        if isinstance(tools, BaseException):
            raise tools
        data += [
            {
                "server": server.name,
                "name": tool.name,
                "description": tool.description,
                "input_schema": tool.input_schema,
            }
            for tool in tools
        ]
    return {"object": "list", "data": data, "errors": errors}


ROUTES = [list_servers, list_tools]
