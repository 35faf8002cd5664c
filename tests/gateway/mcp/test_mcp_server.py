"""`gateway/mcp/server.py` on its own, against the real test server (stdio): what a call the
server refuses does (the server runs on), and a command that does not exist (a clear error,
then the back-off's wait before the next start)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from engines.errors import McpServerUnavailable
from gateway.mcp.server import McpServer
from schemas.config import McpServerConfig

SERVER = Path(__file__).with_name("tool_server.py")


async def test_a_call_the_server_refuses_fails_and_the_server_runs_on():
    config = McpServerConfig(name="t", command=sys.executable, args=[str(SERVER)], timeout="10s")
    server = McpServer(config, Path.cwd())
    try:
        result = await server.call("no_such_tool", {})
        assert (result.error, result.protocol_error) == ("Unknown tool: no_such_tool", False)
        assert server.state == "running"
        assert (await server.call("add", {"a": 1, "b": 2})).text == "3"
    finally:
        await server.stop("shutdown")
    assert server.state == "stopped"


async def test_a_command_that_does_not_exist_is_a_clear_error_then_a_wait():
    config = McpServerConfig(name="gone", command="/nonexistent/mcp-server", start_timeout="5s")
    server = McpServer(config, Path.cwd())
    with pytest.raises(McpServerUnavailable) as info:
        await server.tools()
    assert "MCP server 'gone': start failed" in str(info.value)
    assert server.state == "failed" and "nonexistent" in (server.last_error or "")
    await server.stop("shutdown")
