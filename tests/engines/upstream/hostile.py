"""A loopback OpenAI-protocol server that misbehaves on purpose, one way per model name.

`pinger` sends `: ping` comments and empty chunks forever and never a word; `chatty`
ignores `max_tokens` and streams 400 words; `objecty` sends a `content` that is an object;
`leaky` answers 500 with a bearer token in its text; `fine` answers "ok". Every request's
model name is recorded in `seen`; a `tame` one answers every model as `fine`.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
import time


class HostileReplica:
    def __init__(self, port: int, *, tame: bool = False) -> None:
        """`tame`: answers every model as `fine` does."""
        self.seen: list[str] = []
        replica = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                self._send(200, b"{}")

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length))
                model = body.get("model", "")
                replica.seen.append(model)
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    getattr(self, "_fine" if tame else f"_{model}", self._fine)()

            def _send(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _open_stream(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()

            def _chunk(self, chunk: dict | str) -> None:
                data = chunk if isinstance(chunk, str) else json.dumps(chunk)
                self.wfile.write(f"data: {data}\n\n".encode())
                self.wfile.flush()

            def _pinger(self) -> None:
                self._open_stream()
                for _ in range(600):  # two minutes of keep-alives, not one word
                    self.wfile.write(b": ping\n\n")
                    self._chunk({"choices": [{"index": 0, "delta": {}}]})
                    time.sleep(0.2)

            def _chatty(self) -> None:
                self._open_stream()
                for i in range(400):
                    self._chunk({"choices": [{"index": 0, "delta": {"content": f"w{i} "}}]})
                self._chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                self._chunk("[DONE]")

            def _objecty(self) -> None:
                self._open_stream()
                self._chunk({"choices": [{"index": 0, "delta": {"content": {"x": 1}}}]})
                self._chunk("[DONE]")

            def _leaky(self) -> None:
                text = (
                    "bad key: bearer UPKEY-SECRET-0123456789 (authorization: BEARER "
                    "tok-unknown-987654321)\n\x1b[31m" + "x" * 5000
                )
                self._send(500, json.dumps({"error": {"message": text}}).encode())

            def _fine(self) -> None:
                self._open_stream()
                self._chunk({"choices": [{"index": 0, "delta": {"content": "ok"}}]})
                self._chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                self._chunk("[DONE]")

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{port}/v1"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
