"""The response's word on tools left out to fit the window (`context.tools_overflow:
drop_unused`, engines/policy/tools_fit.py), the same header in every chat protocol."""

from __future__ import annotations

from litestar.connection import ASGIConnection

from gateway.http.request_state import leave_header
from schemas.canonical import ChatRequest

# The tools' names, comma-separated, in the order the request declared them.
DROPPED_TOOLS_HEADER = "x-gateway-dropped-tools"


def tell_dropped_tools(connection: ASGIConnection, request: ChatRequest) -> None:
    """Name the tools `request` runs without, if any, in the response's header."""
    if request.dropped_tools:
        leave_header(connection, DROPPED_TOOLS_HEADER, ",".join(request.dropped_tools))
