"""What one request may cost: body and header bytes, JSON nesting, images and their pixels.

Each check runs before the work it guards: the body size before the body is read (and
while it streams in), the header size before routing, the nesting depth before the JSON
parser recurses, the image count and pixel size before any image would be decoded.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import re
import warnings
from typing import Any

import msgspec
import numpy as np
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from PIL import Image
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from engines.errors import BadRequest, BodyTimeout, PayloadTooLarge
from gateway.http.errors import raw_error
from gateway.http.middleware import send_error
from gateway.http.protocols import Envelope
from schemas.canonical import IMAGE_FORMATS
from schemas.config import LimitsConfig, seconds, size_bytes

# A string in JSON: quote, then runs of plain characters or escapes, then quote (unrolled,
# so the match is linear in its length).
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
UPLOAD_PATH = "/v1/files"  # OpenAI's uploads: files far larger than a request's body
MULTIPART_ROOM = 64 * 1024  # bytes of multipart framing (boundaries, part headers, purpose)
_IMAGE_HEAD_CHARS = 64 * 1024  # base64 characters decoded to find an image's dimensions


def limits_of(scope: Scope) -> LimitsConfig:
    return scope["app"].state.registry.current.config.server.limits


def request_limits(app: ASGIApp) -> ASGIApp:
    """ASGI middleware: 431 for oversized headers, 413 for a body over `max_body_bytes`,
    408 for a body that stops coming (`body_timeout`) or is not whole by `body_deadline`.

    A declared Content-Length over the limit is refused before one byte of the body is read;
    a chunked body is counted as it streams and stops at the limit (the handler reading it
    gets `PayloadTooLarge` or `BodyTimeout`, rendered in its protocol's envelope).
    """

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        limits = limits_of(scope)
        max_headers = size_bytes(limits.max_header_bytes)
        if sum(len(k) + len(v) + 4 for k, v in scope["headers"]) > max_headers:
            message = f"request headers exceed {limits.max_header_bytes} (limits.max_header_bytes)"
            close = [(b"connection", b"close")]
            await send_error(scope, send, 431, message, close, kind="invalid_request_error")
            return
        max_body = size_bytes(limits.max_body_bytes)
        too_large = f"request body exceeds {limits.max_body_bytes} (limits.max_body_bytes)"
        if scope["path"] == UPLOAD_PATH and scope["method"] == "POST":
            # An upload is bounded by the files' own bound (its route checks the file
            # itself), with room for the multipart framing around it.
            files = scope["app"].state.registry.current.config.server.files
            max_body = max(max_body, size_bytes(files.max_file_bytes) + MULTIPART_ROOM)
            too_large = f"the upload exceeds {files.max_file_bytes} (server.files.max_file_bytes)"
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > max_body):
            await send_error(scope, send, 413, too_large, [(b"connection", b"close")])
            return
        received = 0
        body_done = scope["method"] in ("GET", "HEAD")
        patience = seconds(limits.body_timeout)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds(limits.body_deadline)  # the head is in: from now

        async def counted_receive() -> Message:
            nonlocal received, body_done
            if body_done:  # later receives wait for the client to leave: no limit on that
                return await receive()
            whole = deadline - loop.time() < patience  # the deadline comes first
            try:
                # timeout_at, not wait_for: wait_for made a task of each receive (3.11).
                async with asyncio.timeout_at(min(deadline, loop.time() + patience)):
                    message = await receive()
            except TimeoutError:
                if whole:
                    raise BodyTimeout(
                        f"the request body did not arrive whole within {limits.body_deadline} "
                        "of its head (limits.body_deadline)"
                    ) from None
                raise BodyTimeout(
                    f"no part of the request body came for {limits.body_timeout} "
                    "(limits.body_timeout)"
                ) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                body_done = not message.get("more_body", False)
                if received > max_body:
                    raise PayloadTooLarge(too_large)
            return message

        await app(scope, counted_receive, send)

    return middleware


def check_json_depth(body: bytes, max_depth: int) -> None:
    """`BadRequest` when arrays and objects nest deeper than `max_depth`.

    Strings are cut out first (brackets inside them do not nest), then the depth is a
    running sum over the brackets left: linear, and in numpy rather than a Python loop.
    """
    if body.count(b"[") + body.count(b"{") <= max_depth:
        return
    structure = np.frombuffer(_JSON_STRING.sub(b"", body), dtype=np.uint8)
    steps = np.zeros(structure.shape, dtype=np.int32)
    steps[(structure == ord("[")) | (structure == ord("{"))] = 1
    steps[(structure == ord("]")) | (structure == ord("}"))] = -1
    if structure.size and int(np.cumsum(steps).max()) > max_depth:
        raise BadRequest(f"the JSON body nests deeper than {max_depth} (limits.max_json_depth)")


def image_payloads(node: Any) -> list[str]:
    """Every image a request carries, in any of the protocols' shapes: a data URL, bare
    base64, or a URL (which only counts: nothing is fetched)."""
    found: list[str] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
            continue
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "image_url":  # OpenAI chat: {"image_url": {"url": ...}}
            url = item.get("image_url")
            found.append(str(url.get("url", "")) if isinstance(url, dict) else str(url or ""))
        elif kind == "input_image":  # Responses: {"image_url": "..."} or a file id
            found.append(str(item.get("image_url") or ""))
        elif kind == "image" and isinstance(item.get("source"), dict):  # Anthropic
            source = item["source"]
            found.append(str(source.get("data") or source.get("url") or ""))
        if isinstance(item.get("images"), list):  # Ollama: a list of base64 strings
            found.extend(str(image) for image in item["images"])
        stack.extend(v for k, v in item.items() if k != "images" and isinstance(v, dict | list))
    return found


def check_images(document: Any, limits: LimitsConfig) -> None:
    """`BadRequest` for more than `max_images` images, or one over `max_image_pixels`.

    Only each image's header is read (the first 64 KiB of its base64, then the whole when
    the header lies further in); pixels are never decoded. A URL or an unreadable payload
    counts as an image and has no pixels to measure.
    """
    images = image_payloads(document)
    if len(images) > limits.max_images:
        raise BadRequest(
            f"the request carries {len(images)} images; at most {limits.max_images} are "
            "allowed (limits.max_images)"
        )
    for index, image in enumerate(images):
        width, height = _dimensions(image, index)
        if width * height > limits.max_image_pixels:
            raise BadRequest(
                f"image {index} is {width}x{height} pixels, more than {limits.max_image_pixels} "
                "(limits.max_image_pixels)"
            )


def _dimensions(image: str, index: int) -> tuple[int, int]:
    if image.startswith(("http://", "https://")) or not image:
        return 0, 0  # a reference, not pixels: nothing here to decode
    payload = image.partition(",")[2] if image.startswith("data:") else image
    attempts = [payload[:_IMAGE_HEAD_CHARS]]
    if len(payload) > _IMAGE_HEAD_CHARS:
        attempts.append(payload)  # the header lies past the first 64 KiB (a large EXIF block)
    for chars in attempts:
        try:
            head = base64.b64decode(chars[: len(chars) // 4 * 4])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                with Image.open(io.BytesIO(head), formats=IMAGE_FORMATS) as opened:
                    return opened.size
        except Image.DecompressionBombError as bomb:
            # Pillow's own process-wide guard (left at its default: one app must not change
            # it for another) refuses before it tells the size: far past any sane limit.
            raise BadRequest(f"image {index}: {bomb} (limits.max_image_pixels)") from None
        except (OSError, ValueError, binascii.Error):
            continue
    # Not an image Pillow can read: it has no pixels to limit, and no model could decode it
    # either; the adapter refuses it by name (gateway/canonical/images.py).
    return 0, 0


class HeadTooLarge(Exception):
    """Raised from the parser's callbacks: the request head passed `max_header_bytes`."""


class HeaderLimitProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, answering 431 once a request head passes `max_head`
    bytes, so a hostile head is cut off at the limit rather than buffered.

    Counted twice over: the parts the parser hands out (URL, each header) as it finishes
    them, and the raw bytes of a head still incomplete after a read, which bounds what the
    parser holds of a header it has not finished (one read past the limit at most).
    """

    max_head = 64 * 1024  # set by `make_protocol` from `limits.max_header_bytes`
    refusal: Envelope  # its refusals' error body: set by `make_protocol` (the default's)
    _head_size = 0  # the head's parts handed out so far
    _head_pending: int | None = 0  # raw bytes of an incomplete head; None once it is whole

    def data_received(self, data: bytes) -> None:
        if self._head_pending is not None:
            self._head_pending += len(data)
        super().data_received(data)
        if (
            self._head_pending is not None
            and self._head_pending > self.max_head
            and not self.transport.is_closing()
        ):
            self._refuse_head()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_size = 0

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)  # ": " and the line's end
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._head_pending = None
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._head_pending = 0  # what follows on this connection is the next head

    def send_400_response(self, msg: str) -> None:
        """The parser refused the request: in the error envelope, as every other refusal."""
        if self._head_size > self.max_head:  # the parser stopped at our callback's raise
            self._refuse_head()
        else:
            self._refuse(
                "400 Bad Request",
                "malformed HTTP request: its request line or headers are not HTTP/1.1 "
                "(a path must start with '/')",
            )

    def _count(self, size: int) -> None:
        self._head_size += size
        if self._head_size > self.max_head:
            raise HeadTooLarge

    def _refuse_head(self) -> None:
        self._refuse("431 Request Header Fields Too Large", "request headers too large")

    def _refuse(self, status: str, message: str) -> None:
        self.transport.write(raw_error(status, message, self.refusal))
        self.transport.close()


# Request fields that carry client schemas (tool declarations, JSON output formats), in
# every protocol's request struct that has them.
SCHEMA_FIELDS = ("tools", "response_format", "format", "text", "output_format", "output_config")


def check_schema_bytes(data: object, limit: str | int) -> None:
    """`BadRequest` when the request's tool and output schemas, as JSON, pass `limit` bytes.

    They are checked (jsonschema) and compiled (llguidance) before the request queues, on a
    worker thread that still holds the GIL for much of it: 1.4 MiB of them stalled every
    other request by a second. Measured on the decoded request, so it costs one encode.
    """
    sizes = {}
    for name in SCHEMA_FIELDS:
        value = getattr(data, name, None)
        if value is not None and not isinstance(value, str):
            sizes[name] = len(msgspec.json.encode(value))
    if sum(sizes.values()) > size_bytes(limit):
        found = ", ".join(f"$.{name} {size} bytes" for name, size in sizes.items() if size)
        raise BadRequest(
            f"{found}: tool and output schemas may take at most {limit} per request "
            "(server.limits.max_tool_schema_bytes); declare fewer or smaller tools"
        )
