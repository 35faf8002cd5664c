"""The HTTP floor under a streamed chat's time to first token: a server that does nothing.

    python bench/http_floor.py        # prints {"ready": true, "port": N}; serves until stdin ends

A minimal HTTP/1.1 server in a process of its own (asyncio, on uvloop where installed, as
uvicorn picks it for the gateway): every POST, whatever its body, is answered at once with
the headers of an SSE stream, a role chunk, one content chunk and `[DONE]`, in chunked
encoding on a kept-alive connection. A client's time to first token against it is what the
client library, the loopback and the kernel cost before any server work: the part of a
gateway side's TTFT overhead that no server can remove (bench/gpu/bench_gateway.py reports
it as the `http-floor` side).
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading

HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"x-request-id: floor\r\ntransfer-encoding: chunked\r\n\r\n"
)
EVENTS = (
    b'data: {"id":"floor","object":"chat.completion.chunk","choices":[{"index":0,'
    b'"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n',
    b'data: {"id":"floor","object":"chat.completion.chunk","choices":[{"index":0,'
    b'"delta":{"content":"x"},"finish_reason":null}]}\n\n',
    b'data: {"id":"floor","object":"chat.completion.chunk","choices":[{"index":0,'
    b'"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n',
)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while head := await reader.readuntil(b"\r\n\r\n"):
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            # One write per event, as a server streaming tokens makes them.
            writer.write(HEAD + chunk(EVENTS[0]))
            writer.write(chunk(EVENTS[1]))
            writer.write(chunk(EVENTS[2]) + b"0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main() -> None:
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    print(json.dumps({"ready": True, "port": port}), flush=True)
    loop = asyncio.get_running_loop()
    ended = asyncio.Event()
    # Ends with its parent: stdin closes when the bench stops the worker.
    threading.Thread(
        target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(ended.set)), daemon=True
    ).start()
    await ended.wait()
    server.close()


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.run(main())
    except ImportError:
        asyncio.run(main())
