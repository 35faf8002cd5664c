"""The declared MCP servers, one `McpServer` each, following the config in force: a server
whose entry is removed or changed is stopped (the changed one starts anew at next use)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from engines.errors import BadRequest
from gateway.mcp.server import McpServer
from schemas.config import McpServerConfig


class McpPool:
    def __init__(self, base_dir: Path) -> None:
        self._base_dir = base_dir
        self._servers: dict[str, McpServer] = {}
        self._stopping: set[asyncio.Task] = set()

    def follow(self, configs: list[McpServerConfig]) -> None:
        """Match the servers to `configs`: the config at start, then each reload's (never a
        request's generation: one that began before a reload would undo it)."""
        wanted = {c.name: c for c in configs}
        for name, server in list(self._servers.items()):
            if wanted.get(name) != server.config:
                del self._servers[name]
                reason = "changed" if name in wanted else "removed"
                task = asyncio.get_running_loop().create_task(server.stop(reason))
                self._stopping.add(task)
                task.add_done_callback(self._stopping.discard)
        for name, config in wanted.items():
            if name not in self._servers:
                self._servers[name] = McpServer(config, self._base_dir)

    def get(self, name: str, where: str) -> McpServer:
        server = self._servers.get(name)
        if server is None:
            known = ", ".join(sorted(self._servers)) or "none"
            raise BadRequest(f"{where}: {name!r} names no declared MCP server (declared: {known})")
        return server

    def servers(self) -> list[McpServer]:
        return list(self._servers.values())

    async def close(self) -> None:
        for server in self._servers.values():
            await server.stop("shutdown")
        self._servers.clear()
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)
