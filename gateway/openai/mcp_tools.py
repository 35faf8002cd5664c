"""A Responses request's `mcp` tools, checked against the declared servers (`mcp_servers:`):
each names a declared server by `server_label` (a `server_url` of its own is refused: no
request makes the gateway call a host the admin did not declare), the key must be allowed
that server, and what the gateway cannot honour (headers, authorization, connectors) is
refused by name. The servers' tools become function tools the model is offered."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import mcp_types
import msgspec
from litestar import Request

from engines.errors import BadRequest
from gateway.control.keys import check_mcp_allowed
from gateway.mcp.pool import McpPool
from gateway.mcp.server import McpServer
from schemas import openai_responses as wire
from schemas.canonical import ToolSpec

# Fields of OpenAI's `mcp` tool this gateway does not honour: the server's own credentials
# belong in `mcp_servers:` (`headers`, `env`), not in requests.
NOT_HONOURED = ("headers", "authorization", "connector_id", "tunnel_id")


@dataclass
class McpTool:
    """One tool offered to the model, and where it runs."""

    server: McpServer
    label: str
    tool: mcp_types.Tool
    approval: bool  # the client approves each call first (`require_approval`)


@dataclass
class McpTools:
    asked: list[wire.McpToolRequest] = field(default_factory=list)
    tools: dict[str, McpTool] = field(default_factory=dict)  # by the name the model calls
    listed: list[wire.OutputMcpListTools] = field(default_factory=list)

    @property
    def specs(self) -> list[ToolSpec]:
        return [
            ToolSpec(
                name=name,
                description=t.tool.description or "",
                parameters=t.tool.input_schema,
            )
            for name, t in self.tools.items()
        ]


def pool_of(request: Request) -> McpPool:
    return request.app.state.mcp_pool


def asked_mcp(data: wire.ResponseRequest) -> list[tuple[int, wire.McpToolRequest]]:
    """The request's `mcp` tools, each checked for what this gateway honours."""
    asked = []
    for i, tool in enumerate(data.tools):
        if tool.type != "mcp":
            continue
        where = f"$.tools[{i}]"
        try:
            raw = {k: v for k, v in msgspec.structs.asdict(tool).items() if v is not None}
            for name in ("name", "description", "parameters", "strict"):
                if name in raw:
                    raise BadRequest(f"{where}.{name} does not apply to an mcp tool")
            spec = msgspec.convert(raw, wire.McpToolRequest)
        except msgspec.ValidationError as error:
            path = str(error).replace("`$.", f"`{where}.").replace("`$`", f"`{where}`")
            raise BadRequest(f"invalid mcp tool: {path}") from None
        for name in NOT_HONOURED:
            if getattr(spec, name) is not None:
                raise BadRequest(
                    f"{where}.{name} is not supported: the gateway calls only servers declared "
                    "in mcp_servers:, with the credentials declared there"
                )
        # Deferred loading (tool search) and programmatic callers: no such machinery here.
        if spec.defer_loading:
            raise BadRequest(f"{where}.defer_loading is not supported: tools load at once")
        if spec.allowed_callers not in (None, ["direct"]):
            raise BadRequest(f"{where}.allowed_callers is not supported (only ['direct'])")
        asked.append((i, spec))
    return asked


async def prepare(request: Request, data: wire.ResponseRequest) -> McpTools:
    """The request's MCP tools, each server's tools listed (started at first use)."""
    found = McpTools()
    asked = asked_mcp(data)
    if not asked:
        return found
    pool = pool_of(request)  # follows the config in force (set at start and by reloads)
    seen: set[str] = set()
    functions = {t.name for t in data.tools if t.type == "function"}
    for i, spec in asked:
        where = f"$.tools[{i}]"
        if spec.server_label in seen:
            raise BadRequest(f"{where}.server_label {spec.server_label!r} is given twice")
        seen.add(spec.server_label)
        server = pool.get(spec.server_label, f"{where}.server_label")
        declared_url = server.config.url
        if spec.server_url is not None and spec.server_url != declared_url:
            raise BadRequest(
                f"{where}.server_url {spec.server_url!r} is not the declared URL of MCP server "
                f"{spec.server_label!r}: the gateway calls only servers declared in "
                "mcp_servers: (send server_label alone)"
            )
        check_mcp_allowed(spec.server_label, f"{where}.server_label")
        tools = _allowed(await server.tools(), spec.allowed_tools)
        found.asked.append(spec)
        found.listed.append(
            wire.OutputMcpListTools(
                id=f"mcpl_{_new_id()}",
                server_label=spec.server_label,
                tools=[_listed(t) for t in tools],
            )
        )
        for tool in tools:
            if tool.name in found.tools or tool.name in functions:
                raise BadRequest(
                    f"{where}: tool {tool.name!r} of MCP server {spec.server_label!r} has the "
                    "name of another tool in this request; narrow allowed_tools"
                )
            found.tools[tool.name] = McpTool(
                server, spec.server_label, tool, _needs_approval(spec.require_approval, tool)
            )
    return found


def echo(spec: wire.McpToolRequest) -> wire.McpToolEcho:
    return wire.McpToolEcho(
        server_label=spec.server_label,
        server_url=spec.server_url,
        allowed_tools=spec.allowed_tools,
        require_approval=spec.require_approval,
        server_description=spec.server_description,
    )


def _allowed(
    tools: list[mcp_types.Tool], allowed: list[str] | wire.ApprovalFilter | None
) -> list[mcp_types.Tool]:
    """`allowed_tools`: names, or a filter by names and the tools' read-only hint."""
    if allowed is None:
        return tools
    if isinstance(allowed, list):
        return [t for t in tools if t.name in allowed]
    return [t for t in tools if _matches(allowed, t)]


def _matches(filter: wire.ApprovalFilter, tool: mcp_types.Tool) -> bool:
    if filter.tool_names is not None and tool.name not in filter.tool_names:
        return False
    if filter.read_only is not None:
        read_only = bool(tool.annotations and tool.annotations.read_only_hint)
        return read_only == filter.read_only
    return True


def _needs_approval(require: str | wire.ApprovalFilters | None, tool: mcp_types.Tool) -> bool:
    """OpenAI's rule: every call is approved first unless `never`, or a `never` filter
    matches the tool (an `always` filter then only says what the default says)."""
    if require == "never":
        return False
    if require is None or require == "always":
        return True
    return not (require.never is not None and _matches(require.never, tool))


def _listed(tool: mcp_types.Tool) -> wire.ListedTool:
    annotations = tool.annotations.model_dump(exclude_none=True) if tool.annotations else None
    return wire.ListedTool(
        name=tool.name,
        input_schema=tool.input_schema,
        description=tool.description,
        annotations=annotations,
    )


def _new_id() -> str:
    return uuid.uuid4().hex
