"""OpenAI Responses API: the `mcp` tool and what the gateway's tool loop adds to a response
(gateway/openai/mcp_loop.py): the tools a server listed (`mcp_list_tools`), each call made
(`mcp_call`), each call waiting for the client's approval (`mcp_approval_request`), the
client's answer (`mcp_approval_response`), and their stream events."""

from __future__ import annotations

from typing import Any, Literal

from schemas.openai_responses.request import (
    INPUT_ITEM_TYPES,
    InputFunctionCall,
    InputFunctionCallOutput,
    InputItem,
    InputMessage,
    InputReasoning,
)
from schemas.wire import Wire


class ApprovalFilter(Wire, kw_only=True):
    tool_names: list[str] | None = None
    read_only: bool | None = None


class ApprovalFilters(Wire, kw_only=True):
    always: ApprovalFilter | None = None
    never: ApprovalFilter | None = None


class McpToolRequest(Wire, kw_only=True):
    """The `mcp` tool as a request carries it (converted from the request's `tools[i]`).
    `server_label` names a server declared in `mcp_servers:`; what the gateway cannot honour
    (headers, authorization, connectors, a server_url of its own) is refused by name."""

    type: Literal["mcp"] = "mcp"
    server_label: str
    server_url: str | None = None
    allowed_tools: list[str] | ApprovalFilter | None = None
    require_approval: Literal["always", "never"] | ApprovalFilters | None = None
    server_description: str | None = None
    headers: dict[str, str] | None = None
    authorization: str | None = None
    connector_id: str | None = None
    tunnel_id: str | None = None
    defer_loading: bool | None = None
    allowed_callers: list[str] | None = None


class McpToolEcho(Wire, kw_only=True):
    """The `mcp` tool as the response echoes it."""

    type: Literal["mcp"] = "mcp"
    server_label: str
    server_url: str | None = None
    allowed_tools: list[str] | ApprovalFilter | None = None
    require_approval: Literal["always", "never"] | ApprovalFilters | None = None
    server_description: str | None = None


class ListedTool(Wire, kw_only=True):
    name: str
    input_schema: dict[str, Any]
    description: str | None = None
    annotations: dict[str, Any] | None = None


class OutputMcpListTools(Wire, kw_only=True):
    type: Literal["mcp_list_tools"] = "mcp_list_tools"
    id: str
    server_label: str
    tools: list[ListedTool]
    error: str | None = None


class OutputMcpCall(Wire, kw_only=True):
    """`error` is one of OpenAI's shapes: {type: mcp_tool_execution_error, content} when the
    tool failed, {type: mcp_protocol_error, code, message} when the call did not complete."""

    type: Literal["mcp_call"] = "mcp_call"
    id: str
    server_label: str
    name: str
    arguments: str
    output: str | None = None
    error: dict[str, Any] | None = None
    status: Literal["in_progress", "completed", "incomplete", "calling", "failed"] = "completed"
    approval_request_id: str | None = None


class OutputMcpApprovalRequest(Wire, kw_only=True):
    type: Literal["mcp_approval_request"] = "mcp_approval_request"
    id: str
    server_label: str
    name: str
    arguments: str


# The same items as a follow-up's input carries them (stored context, or sent back).
class InputMcpListTools(InputItem, kw_only=True, tag="mcp_list_tools"):
    """Nothing the model reads: the tools it is offered come from this request's tools."""

    server_label: str = ""


class InputMcpCall(InputItem, kw_only=True, tag="mcp_call"):
    id: str
    server_label: str
    name: str
    arguments: str
    output: str | None = None
    error: Any = None


class InputMcpApprovalRequest(InputItem, kw_only=True, tag="mcp_approval_request"):
    id: str
    server_label: str
    name: str
    arguments: str


class InputMcpApprovalResponse(InputItem, kw_only=True, tag="mcp_approval_response"):
    approval_request_id: str
    approve: bool
    reason: str | None = None


# Every input item, the MCP loop's included: what a request (or a stored context) may hold.
InputItems = list[
    InputMessage
    | InputFunctionCall
    | InputFunctionCallOutput
    | InputReasoning
    | InputMcpListTools
    | InputMcpCall
    | InputMcpApprovalRequest
    | InputMcpApprovalResponse
]
MCP_ITEM_TYPES = ("mcp_list_tools", "mcp_call", "mcp_approval_request", "mcp_approval_response")
ALL_INPUT_ITEM_TYPES = (*INPUT_ITEM_TYPES, *MCP_ITEM_TYPES)
