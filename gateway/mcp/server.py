"""One declared MCP server as the gateway holds it: a connection opened at first use (the
program started over stdio, or a streamable HTTP / SSE session), its tool list cached until
the server says `notifications/tools/list_changed`, calls under the server's `timeout`, and
after a failure a new start on engines/backoff.py's schedule."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import mcp_types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError
from mcp_types import CONNECTION_CLOSED, INTERNAL_ERROR, REQUEST_TIMEOUT

from engines.backoff import Backoff
from engines.child_env import inherited
from engines.errors import McpServerUnavailable
from engines.log import emit
from schemas.config import McpServerConfig, seconds, size_bytes
from schemas.events import McpServerFailed, McpServerStarted, McpServerStopped, ToolCalled


@dataclass(frozen=True)
class CallResult:
    """What a tool call gives the model: `text` (cut at the server's `max_result_bytes`), and
    `error` when the tool failed (`text` is then its message) or the call did not complete."""

    text: str
    error: str | None = None
    protocol_error: bool = False  # the call itself failed (timeout, server gone), not the tool
    code: int = INTERNAL_ERROR  # of a protocol error: JSON-RPC's, as the server or SDK said
    truncated: bool = False


class McpServer:
    def __init__(self, config: McpServerConfig, base_dir: Path) -> None:
        self.config = config
        self.name = config.name
        self._base_dir = base_dir
        self._timeout = seconds(config.timeout)
        self._start_timeout = seconds(config.start_timeout)
        self._cap = size_bytes(config.max_result_bytes) or 0
        self._client: Client | None = None
        self._holder: asyncio.Task | None = None
        self._closed = asyncio.Event()
        self._lock = asyncio.Lock()  # one start at a time
        self._tools: list[mcp_types.Tool] | None = None
        self._backoff = Backoff()
        self._started_at = 0.0
        self._retry_at = 0.0
        self.state = "idle"  # idle | running | failed | stopped
        self.last_error: str | None = None

    @property
    def transport(self) -> str:
        return "stdio" if self.config.command else self.config.transport

    def describe(self) -> dict:
        """What the ops routes and the ops page show: how it is reached (never its command
        line, env or headers), its state, last error, and its tools' count once listed."""
        return {
            "name": self.name,
            "transport": self.transport,
            "state": self.state,
            "error": self.last_error,
            "tools": None if self._tools is None else len(self._tools),
            "allowed_tools": self.config.allowed_tools,
            "timeout": self.config.timeout,
        }

    async def tools(self) -> list[mcp_types.Tool]:
        """The server's tools (as `allowed_tools` in the config leaves them), starting it first
        if it is not running; listed again after the server said its list changed."""
        client = await self._connected()
        if self._tools is None:
            try:
                listed = await asyncio.wait_for(self._list(client), self._timeout)
            except Exception as error:
                raise self._failed(f"tools/list failed: {_describe(error)}") from None
            allowed = self.config.allowed_tools
            self._tools = [t for t in listed if allowed is None or t.name in allowed]
        return self._tools

    async def call(self, tool: str, arguments: dict[str, Any]) -> CallResult:
        """`tools/call`: never raises for what the tool or server did; the model is told."""
        start = time.perf_counter()
        try:
            client = await self._connected()
            result = await client.call_tool(tool, arguments, read_timeout_seconds=self._timeout)
        except McpServerUnavailable as error:
            outcome = CallResult(text=str(error), error=str(error), protocol_error=True)
        except MCPError as error:
            reason, code = error.error.message, error.code
            if code == REQUEST_TIMEOUT:
                reason = f"no answer within {self.config.timeout} (the server's timeout)"
            elif code == CONNECTION_CLOSED:
                self._failed(f"tools/call failed: {reason}")
            # Any other code is the server's answer (an unknown tool, bad arguments): it runs on.
            outcome = CallResult(text=reason, error=reason, protocol_error=True, code=code)
        except Exception as error:  # the transport broke under the call
            reason = _describe(error)
            self._failed(f"tools/call failed: {reason}")
            outcome = CallResult(text=reason, error=reason, protocol_error=True)
        else:
            outcome = self._result(result)
        emit(
            ToolCalled(
                server=self.name,
                tool=tool,
                duration_s=round(time.perf_counter() - start, 4),
                bytes=len(outcome.text.encode()),
                error=outcome.error,
                truncated=outcome.truncated,
            )
        )
        return outcome

    async def stop(self, reason: str) -> None:
        holder, self._holder = self._holder, None
        self._client, self._tools = None, None
        self._closed.set()
        if holder is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(holder, 10)
            emit(McpServerStopped(server=self.name, reason=reason))
        self.state = "stopped"

    async def _connected(self) -> Client:
        if self._client is not None:
            return self._client
        async with self._lock:
            if self._client is not None:
                return self._client
            wait = self._retry_at - time.monotonic()
            if wait > self._start_timeout:
                raise McpServerUnavailable(
                    f"MCP server {self.name!r} is unavailable ({self.last_error}); "
                    f"next start in {wait:.1f}s"
                )
            if wait > 0:
                await asyncio.sleep(wait)
            return await self._start()

    async def _start(self) -> Client:
        began = time.perf_counter()
        self._closed = asyncio.Event()
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._holder = asyncio.create_task(self._hold(ready), name=f"mcp server {self.name}")
        try:
            client = await asyncio.wait_for(asyncio.shield(ready), self._start_timeout)
        except Exception as error:
            holder, self._holder = self._holder, None
            holder.cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(holder, 10)
            reason = _describe(error)
            if isinstance(error, TimeoutError):
                reason = f"did not start within {self.config.start_timeout} (start_timeout)"
            raise self._failed(f"start failed: {reason}") from None
        self._client, self._started_at = client, time.monotonic()
        self._backoff.reset()
        self.state, self.last_error = "running", None
        emit(
            McpServerStarted(
                server=self.name,
                transport=self.transport,
                start_s=round(time.perf_counter() - began, 4),
            )
        )
        return client

    async def _hold(self, ready: asyncio.Future[Client]) -> None:
        """The connection's own task: the SDK's client is entered and left in one task."""
        try:
            async with self._client_for() as client:
                ready.set_result(client)
                closed = self._closed
                listening = asyncio.create_task(self._listen(client))
                try:
                    await closed.wait()
                finally:
                    listening.cancel()
                    with contextlib.suppress(BaseException):
                        await listening
        except BaseException as error:
            if not ready.done():
                ready.set_exception(error if isinstance(error, Exception) else RuntimeError())
            if not isinstance(error, Exception):
                raise

    def _client_for(self) -> Client:
        config = self.config
        handler = self._on_message
        if config.command:
            cwd = config.cwd and str((self._base_dir / config.cwd).resolve())
            params = StdioServerParameters(
                command=config.command,
                args=config.args,
                env={**inherited(), **config.env},  # a minimal environment, as engine: process
                cwd=cwd,
            )
            # The server's stderr is not the gateway's event log.
            transport = stdio_client(params, errlog=_devnull())
            return Client(transport, message_handler=handler, cache=None)
        if config.transport == "sse":
            transport = sse_client(config.url, headers=config.headers, timeout=self._timeout)
        else:
            transport = _streamable_http(config.url, config.headers, self._timeout)
        return Client(transport, message_handler=handler, cache=None)

    async def _listen(self, client: Client) -> None:
        """2026-07-28 servers tell of a changed tool list on a `subscriptions/listen` stream
        (older ones by a plain notification: `_on_message`)."""
        try:
            async with client.listen(tools_list_changed=True) as changes:
                async for _ in changes:
                    self._tools = None  # listed again at next use
        except ListenNotSupportedError:
            return
        except Exception as error:  # the stream ends with the connection
            if self._client is client:
                self._failed(f"change stream lost: {_describe(error)}")

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._tools = None  # listed again at next use
        elif isinstance(message, Exception):
            self._failed(f"connection error: {_describe(message)}")

    async def _list(self, client: Client) -> list[mcp_types.Tool]:
        tools, cursor = [], None
        while True:
            page = await client.list_tools(cursor=cursor)
            tools += page.tools
            cursor = page.next_cursor
            if cursor is None:
                return tools

    def _result(self, result: mcp_types.CallToolResult) -> CallResult:
        pieces = []
        for block in result.content:
            if isinstance(block, mcp_types.TextContent):
                pieces.append(block.text)
            else:
                pieces.append(block.model_dump_json(exclude_none=True))
        if not pieces and result.structured_content is not None:
            pieces.append(json.dumps(result.structured_content))
        text = "\n".join(pieces)
        raw = text.encode()
        truncated = self._cap > 0 and len(raw) > self._cap
        if truncated:
            text = raw[: self._cap].decode(errors="ignore")
            text += f"\n[result cut at {self.config.max_result_bytes} of {len(raw)} bytes]"
        error = (text or "the tool failed") if result.is_error else None
        return CallResult(text=text, error=error, truncated=truncated)

    def _failed(self, reason: str) -> McpServerUnavailable:
        """The connection is given up; the next use starts the server again after a wait."""
        ran = time.monotonic() - self._started_at if self._client is not None else 0.0
        delay = self._backoff.next_delay(ran)
        self._retry_at = time.monotonic() + delay
        self._client, self._tools = None, None
        self._closed.set()  # ends the holder task, which closes the session / the process
        self._holder = None
        self.state, self.last_error = "failed", reason
        emit(McpServerFailed(server=self.name, error=reason, retry_in_s=delay), level="warning")
        return McpServerUnavailable(f"MCP server {self.name!r}: {reason}")


@functools.cache
def _devnull():
    """One handle on /dev/null for every stdio server's stderr, open as long as the process."""
    return open(os.devnull, "w")  # noqa: SIM115


@contextlib.asynccontextmanager
async def _streamable_http(url: str, headers: dict[str, str], timeout: float):
    # `headers` (a token, say) ride on the HTTP client; they are never logged.
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


def _describe(error: BaseException) -> str:
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in error.exceptions)
    text = str(error) or type(error).__name__
    return text.splitlines()[0][:300]
