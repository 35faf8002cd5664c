"""`mcp_servers:` beyond each entry's own fields: names unique, each server either a program
(`command`) or a URL (`url`) and only that kind's keys, and every API key's `mcp_servers`
naming a declared server."""

from __future__ import annotations

from typing import Any

from gateway.control.yaml_source import Source

STDIO_ONLY = ("args", "env", "cwd")
URL_ONLY = ("headers", "transport")


def check_mcp_servers(servers: Any, server: Any, src: Source) -> None:
    declared: dict[str, int] = {}
    for i, entry in enumerate(servers if isinstance(servers, list) else []):
        if not isinstance(entry, dict):
            continue
        name = entry.get("name")
        if isinstance(name, str):
            if name in declared:
                where = ("mcp_servers", i, "name")
                src.at(
                    where,
                    f"duplicate MCP server name {name!r} (also mcp_servers[{declared[name]}])",
                )
            declared.setdefault(name, i)
        has_command, has_url = "command" in entry, "url" in entry
        if has_command == has_url:
            src.at(
                ("mcp_servers", i),
                f"MCP server {name!r}: give exactly one of `command` (stdio) or `url` (HTTP)",
            )
            continue
        wrong = URL_ONLY if has_command else STDIO_ONLY
        kind = "a `command` server" if has_command else "a `url` server"
        for key in wrong:
            if key in entry:
                src.at(("mcp_servers", i, key), f"`{key}` does not apply to {kind}", key=True)
    keys = server.get("api_keys") if isinstance(server, dict) else None
    for i, entry in enumerate(keys if isinstance(keys, list) else []):
        names = entry.get("mcp_servers") if isinstance(entry, dict) else None
        for j, name in enumerate(names if isinstance(names, list) else []):
            if isinstance(name, str) and name not in declared:
                known = ", ".join(sorted(declared)) or "none"
                where = ("server", "api_keys", i, "mcp_servers", j)
                src.at(where, f"{name!r} names no MCP server (declared: {known})")
