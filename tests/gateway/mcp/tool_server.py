"""A real MCP server for the tests, on the official SDK's MCPServer (FastMCP in mcp 1.x):
`python tool_server.py` speaks stdio, `python tool_server.py --http PORT` streamable HTTP.

Its tools: `add` (the loop's happy path), `shout` (a tool the allow-lists leave out),
`boom` (a tool error), `hang` (never answers: the per-call timeout), `die` (the process
exits mid-call: a server that dies), `grow` (adds the tool `extra` and says
notifications/tools/list_changed)."""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("test-tools")


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool()
def shout(text: str) -> str:
    """The text in capitals."""
    return text.upper()


@server.tool()
def boom(reason: str) -> str:
    """Always fails (a ToolError's message reaches the client; other errors are masked)."""
    raise ToolError(f"boom: {reason}")


@server.tool()
def hang(seconds: float) -> str:
    """Sleeps (longer than any timeout the tests set)."""
    time.sleep(seconds)
    return "woke"


@server.tool()
def die() -> str:
    """Ends the server's process in the middle of the call."""
    os._exit(3)


def extra() -> str:
    """A tool that exists once `grow` ran."""
    return "extra"


@server.tool()
async def grow(ctx: Context) -> str:
    """Adds the tool `extra`, and tells the client its tool list changed."""
    server.add_tool(extra)
    await ctx.notify_tools_changed()
    return "grown"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
