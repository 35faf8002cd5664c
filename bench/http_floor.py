"""The HTTP floor under a streamed chat's time to first token: a server that does nothing.

    python bench/http_floor.py [--litestar]   # prints {"ready": true, "port": N}, serves
                                              # until stdin ends

A minimal HTTP/1.1 server in a process of its own (asyncio, on uvloop where installed, as
uvicorn picks it for the gateway): every POST, whatever its body, is answered at once with
the headers of an SSE stream, a role chunk, one content chunk and `[DONE]`, in chunked
encoding on a kept-alive connection. A client's time to first token against it is what the
client library, the loopback and the kernel cost before any server work: the part of a
gateway side's TTFT overhead that no server can remove (bench/gpu/bench_gateway.py reports
it as the `http-floor` side).

With `--litestar` the same answer comes from one litestar route under uvicorn's httptools
protocol, the gateway's own HTTP stack with none of its middlewares, checks or models: what
the chosen framework costs a request (bench/ttft_floor.py sets the three side by side).
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


def end_with_stdin(loop: asyncio.AbstractEventLoop, stop) -> None:
    """Call `stop` on `loop` once stdin closes: when the bench stops this worker."""
    threading.Thread(
        target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(stop)), daemon=True
    ).start()


def ready(port: int) -> None:
    print(json.dumps({"ready": True, "port": port}), flush=True)


async def main() -> None:
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    ready(server.sockets[0].getsockname()[1])
    ended = asyncio.Event()
    end_with_stdin(asyncio.get_running_loop(), ended.set)
    await ended.wait()
    server.close()


def litestar_floor() -> None:
    import socket

    import uvicorn
    from litestar import Litestar, Request, post
    from litestar.response import Stream

    @post("/v1/chat/completions")
    async def chat(request: Request) -> Stream:
        await request.body()
        return Stream(iter(EVENTS), media_type="text/event-stream")

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    app = Litestar([chat], signature_namespace={"Request": Request, "Stream": Stream})
    # The loop uvicorn picks for the gateway too (uvloop where installed).
    server = uvicorn.Server(
        uvicorn.Config(
            app, http="httptools", log_config=None, access_log=False, log_level="warning"
        )
    )
    threading.Thread(
        target=lambda: (sys.stdin.read(), setattr(server, "should_exit", True)), daemon=True
    ).start()
    ready(sock.getsockname()[1])
    server.run(sockets=[sock])


if __name__ == "__main__":
    if "--litestar" in sys.argv:
        litestar_floor()
    else:
        try:
            import uvloop

            uvloop.run(main())
        except ImportError:
            asyncio.run(main())
