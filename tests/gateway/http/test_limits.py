"""Hostile requests against `server.limits`, byte for byte over raw sockets: each is refused
with its status in its protocol's envelope, before the work it would cause, and the gateway
goes on serving."""

from __future__ import annotations

import base64
import io
import json

import httpx
import pytest
from conftest import raw_http
from PIL import Image

from engines.errors import BadRequest
from gateway.http.limits import check_json_depth, image_payloads

SMALL_LIMITS = """
server:
  limits: {max_body_bytes: 64KiB, max_header_bytes: 8KiB, max_json_depth: 16, max_images: 2,
           max_image_pixels: 1000000}
models:
  - id: echo
    engine: scripted
"""
HI = [{"role": "user", "content": "hi"}]
JSON = "Host: 127.0.0.1\r\ncontent-type: application/json\r\nConnection: close\r\n"


def png(width: int, height: int) -> str:
    """A real PNG, base64: a blank image compresses to almost nothing at any size."""
    out = io.BytesIO()
    Image.new("L", (width, height)).save(out, "PNG", optimize=True)
    return base64.b64encode(out.getvalue()).decode()


def post(port: int, path: str, body: bytes) -> tuple[int, dict, dict | bytes]:
    head = f"POST {path} HTTP/1.1\r\n{JSON}Content-Length: {len(body)}\r\n\r\n".encode()
    status, headers, answer = raw_http(port, head + body)
    try:
        return status, headers, json.loads(answer)
    except ValueError:
        return status, headers, answer


@pytest.fixture
def gateway(start_gateway):
    return start_gateway(SMALL_LIMITS)


def test_a_body_over_the_limit_is_refused_before_it_is_read(gateway):
    # Content-Length says 1 GiB and not one byte of the body follows: the answer comes anyway.
    head = f"POST /v1/chat/completions HTTP/1.1\r\n{JSON}Content-Length: {2**30}\r\n\r\n"
    status, headers, body = raw_http(gateway.port, head.encode())
    assert status == 413, body
    assert headers["connection"] == "close"
    assert json.loads(body)["error"]["message"].startswith("request body exceeds 64KiB")
    # Chunked: no length declared, counted as it streams, stopped at the limit; Anthropic's
    # envelope on its route.
    chunk = b"x" * 16384
    chunks = tuple(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(64))  # 1 MiB offered
    head = f"POST /v1/messages HTTP/1.1\r\n{JSON}Transfer-Encoding: chunked\r\n\r\n"
    status, _, body = raw_http(gateway.port, head.encode(), chunks)
    assert status == 413
    assert json.loads(body)["error"]["type"] == "request_too_large"
    # Just under the limit is an ordinary request.
    padding = "x" * (60 * 1024)  # in a field the wire format ignores
    doc = {"model": "echo", "stream": False, "messages": HI, "padding": padding}
    assert post(gateway.port, "/api/chat", json.dumps(doc).encode())[0] == 200
    head = f"POST /api/chat HTTP/1.1\r\n{JSON}Content-Length: 12abc\r\n\r\n"
    status, _, body = raw_http(gateway.port, head.encode())  # the HTTP parser's own refusal
    assert status == 400 and "malformed HTTP request" in json.loads(body)["error"]["message"]


def test_headers_over_the_limit_get_431(gateway):
    for size in (10_000, 60_000, 2_000_000):  # over the limit; past one read; far past
        head = f"GET /v1/models HTTP/1.1\r\n{JSON}x-padding: {'a' * size}\r\n\r\n"
        status, _, body = raw_http(gateway.port, head.encode())
        assert status == 431, (size, body[:200])
        assert b"request headers" in body
    many = "".join(f"x-h{i}: {'b' * 90}\r\n" for i in range(120))  # many small ones add up
    status, _, body = raw_http(gateway.port, f"GET /api/tags HTTP/1.1\r\n{JSON}{many}\r\n".encode())
    assert status == 431 and set(json.loads(body)) == {"error"}  # Ollama's envelope


def test_json_nesting_deeper_than_the_limit_is_refused_before_decoding(gateway):
    for depth in (17, 30_000):  # 30k deep would exhaust a recursive parser
        nested = b"[" * depth + b"]" * depth
        body = b'{"model": "echo", "x": ' + nested + b', "messages": []}'
        status, _, answer = post(gateway.port, "/v1/chat/completions", body)
        assert status == 400 and "max_json_depth" in answer["error"]["message"]
    # Brackets inside strings do not nest.
    text = "[{" * 500 + '\\"' + "}]" * 10
    doc = f'{{"model": "echo", "stream": false, "messages": [{{"role": "user", "content": "{text}"}}]}}'
    status, _, answer = post(gateway.port, "/api/chat", doc.encode())
    assert status == 200, answer
    with pytest.raises(BadRequest):
        check_json_depth(b'{"a": [[[["]]]]"]]]]}', 4)
    check_json_depth(b'{"a": [[["]]]]]]]"]]]}', 4)


def test_images_are_counted_and_measured_before_any_adapter_refuses_them(gateway):
    small, huge = png(16, 16), png(2000, 2000)  # 4 megapixels against a 1-megapixel limit
    url = "data:image/png;base64,"
    cases = {  # each protocol's way to carry images
        "/v1/chat/completions": lambda images: {"model": "echo", "messages": [{"role": "user",
            "content": [{"type": "image_url", "image_url": {"url": url + i}} for i in images]}]},
        "/v1/responses": lambda images: {"model": "echo", "input": [{"role": "user",
            "content": [{"type": "input_image", "image_url": url + i} for i in images]}]},
        "/v1/messages": lambda images: {"model": "echo", "max_tokens": 8, "messages": [{
            "role": "user", "content": [{"type": "image", "source": {"type": "base64",
            "media_type": "image/png", "data": i}} for i in images]}]},
        "/api/chat": lambda images: {"model": "echo", "messages": [{"role": "user",
            "content": "x", "images": images}]},
        "/api/generate": lambda images: {"model": "echo", "prompt": "x", "images": images},
    }  # fmt: skip

    def refusal(path: str, images: list[str]) -> str:
        status, _, answer = post(gateway.port, path, json.dumps(cases[path](images)).encode())
        assert status == 400, (path, answer)
        return answer["error"] if path.startswith("/api/") else answer["error"]["message"]

    for path in cases:
        message = refusal(path, [huge])
        assert "max_image_pixels" in message and "2000x2000 pixels" in message, message
        message = refusal(path, [png(1200, 1000)])  # over the limit, under Pillow's guard
        assert "1200x1000 pixels, more than 1000000" in message, message
        assert "max_images" in refusal(path, [small] * 3)
        # Within the limits, the model's own refusal (echo reads text only) follows.
        message = refusal(path, [small, small])
        assert "limits." not in message and "reads text only" in message, message
    # Not an image at all: nothing to measure; the adapter refuses it, naming the part.
    bad = {"model": "echo", "prompt": "x", "images": ["bm90IGFuIGltYWdl"]}
    status, _, answer = post(gateway.port, "/api/generate", json.dumps(bad).encode())
    assert status == 400 and "$.images[0]: not an image" in answer["error"]
    assert httpx.get(f"{gateway.url}/health").json()["status"] == "ok"


def test_image_payloads_are_found_in_every_protocols_shape():
    doc = {
        "messages": [
            {"content": [{"type": "image_url", "image_url": {"url": "data:a"}}], "images": ["b"]},
            {"content": [{"type": "image", "source": {"type": "url", "url": "https://c"}}]},
            {"content": [{"type": "tool_result", "content": [
                {"type": "image", "source": {"type": "base64", "data": "d"}}]}]},
        ],
        "input": [{"content": [{"type": "input_image", "image_url": "data:e"}]}],
    }  # fmt: skip
    assert sorted(image_payloads(doc)) == ["b", "d", "data:a", "data:e", "https://c"]


def test_default_limits_hold(start_gateway):
    gateway = start_gateway("models:\n  - id: echo\n    engine: scripted\n")
    head = f"POST /v1/completions HTTP/1.1\r\n{JSON}Content-Length: {10 * 2**20 + 1}\r\n\r\n"
    status, _, body = raw_http(gateway.port, head.encode())
    assert status == 413 and b"10MiB" in body
    for depth in (65, 1_000_000):
        nested = b"[" * depth + b"]" * depth
        status, _, answer = post(gateway.port, "/v1/completions", b'{"prompt": ' + nested + b"}")
        assert status == 400 and "deeper than 64" in answer["error"]["message"]
    nine = [{"type": "image_url", "image_url": {"url": "https://example.invalid/i.png"}}] * 9
    doc = {"model": "echo", "messages": [{"role": "user", "content": nine}]}
    status, _, answer = post(gateway.port, "/v1/chat/completions", json.dumps(doc).encode())
    assert status == 400 and "at most 8" in answer["error"]["message"]
    head = f"GET /v1/models HTTP/1.1\r\n{JSON}x-padding: {'a' * 40_000}\r\n\r\n"
    assert raw_http(gateway.port, head.encode())[0] == 431
