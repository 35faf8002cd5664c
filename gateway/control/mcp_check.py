"""`mcp_servers:` beyond each entry's own fields: names unique, each server either a program
(`command`) or a URL (`url`) and only that kind's keys, and every API key's `mcp_servers`
naming a declared server, as every model's `tools_from` must."""

from __future__ import annotations

from typing import Any

from gateway.control.yaml_source import Source

STDIO_ONLY = ("args", "env", "cwd")
URL_ONLY = ("headers", "transport")


def check_mcp_servers(servers: Any, server: Any, src: Source) -> None:
    declared = _declared(servers)
    for i, entry in enumerate(servers if isinstance(servers, list) else []):
        if not isinstance(entry, dict):
            continue
        name = entry.get("name")
        if isinstance(name, str) and declared[name] != i:
            where = ("mcp_servers", i, "name")
            src.at(
                where,
                f"duplicate MCP server name {name!r} (also mcp_servers[{declared[name]}])",
            )
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


def check_tools_from(servers: Any, models: list[Any], src: Source) -> None:
    """Each model's `tools_from` names declared servers (after `defaults:` are merged)."""
    declared = _declared(servers)
    for i, model in enumerate(models):
        names = model.get("tools_from") if isinstance(model, dict) else None
        for j, name in enumerate(names if isinstance(names, list) else []):
            if isinstance(name, str) and name not in declared:
                known = ", ".join(sorted(declared)) or "none"
                src.at(
                    ("models", i, "tools_from", j),
                    f"{name!r} names no MCP server (declared: {known})",
                )


def _declared(servers: Any) -> dict[str, int]:
    """Each declared server's name, and where it is first declared."""
    declared: dict[str, int] = {}
    for i, entry in enumerate(servers if isinstance(servers, list) else []):
        name = entry.get("name") if isinstance(entry, dict) else None
        if isinstance(name, str):
            declared.setdefault(name, i)
    return declared
