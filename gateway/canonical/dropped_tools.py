"""The response's word on tools left out to fit the window (`context.tools_overflow:
drop_unused`, engines/policy/tools_fit.py), the same header in every chat protocol."""

from __future__ import annotations

from urllib.parse import quote

from litestar.connection import ASGIConnection

from gateway.http.request_state import leave_header
from schemas.canonical import ChatRequest

# The tools' names, comma-separated, in the order the request declared them; a name is the
# client's own text, so anything but a header-safe character (a comma, a line break, a
# non-ASCII letter) is percent-encoded: it can neither split the list nor the header.
DROPPED_TOOLS_HEADER = "x-gateway-dropped-tools"


def tell_dropped_tools(connection: ASGIConnection, request: ChatRequest) -> None:
    """Name the tools `request` runs without, if any, in the response's header."""
    if request.dropped_tools:
        names = ",".join(quote(name, safe="-_.:") for name in request.dropped_tools)
        leave_header(connection, DROPPED_TOOLS_HEADER, names)
