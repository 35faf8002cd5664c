"""Images in each protocol's shape against a text-only (scripted) model: every hostile or
unservable image is a 400 in the protocol's own envelope, naming the part, and the gateway
goes on serving. (What a vision model does with images: tests/e2e/test_vision_e2e.py.)"""

from __future__ import annotations

import base64
import io

import httpx
import pytest
from conftest import serving
from PIL import Image

CONFIG = """
server:
  limits: {max_image_pixels: 1000000}
models:
  - id: echo
    engine: scripted
"""


def png(width: int = 8, height: int = 8, kind: str = "PNG") -> str:
    out = io.BytesIO()
    Image.new("L", (width, height)).save(out, kind, optimize=True)
    return base64.b64encode(out.getvalue()).decode()


def openai(url: str) -> dict:
    part = {"type": "image_url", "image_url": {"url": url}}
    return {"model": "echo", "messages": [{"role": "user", "content": [part]}]}


def responses(url: str) -> dict:
    part = {"type": "input_image", "image_url": url}
    return {"model": "echo", "input": [{"role": "user", "content": [part]}]}


def anthropic(source: dict) -> dict:
    block = {"type": "image", "source": source}
    return {"model": "echo", "max_tokens": 8, "messages": [{"role": "user", "content": [block]}]}


def b64_source(data: str) -> dict:
    return {"type": "base64", "media_type": "image/png", "data": data}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("images"), CONFIG) as process:
        yield process


def message(response: httpx.Response) -> str:
    body = response.json()
    if "type" in body:  # Anthropic
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        return body["error"]["message"]
    error = body["error"]
    return error if isinstance(error, str) else error["message"]


GOOD = png()
CASES = [
    # A text-only model refuses a good image in every protocol, naming the part.
    ("/v1/chat/completions", openai(f"data:image/png;base64,{GOOD}"),
     "reads text only; send images to a vision model ($.messages[0].content[0].image_url)"),
    ("/v1/responses", responses(f"data:image/png;base64,{GOOD}"),
     "reads text only; send images to a vision model ($.input[0].content[0].image_url)"),
    ("/v1/messages", anthropic(b64_source(GOOD)),
     "reads text only; send images to a vision model ($.messages[0].content[0].source.data)"),
    ("/v1/messages/count_tokens", {**anthropic(b64_source(GOOD)), "max_tokens": None},
     "Could not process image: model 'echo' reads text only"),
    ("/api/chat", {"model": "echo", "messages": [{"role": "user", "content": "x", "images": [GOOD]}]},
     "reads text only; send images to a vision model ($.messages[0].images[0])"),
    ("/api/generate", {"model": "echo", "prompt": "x", "images": [GOOD]},
     "reads text only; send images to a vision model ($.images[0])"),
    # Remote images are not fetched unless server.fetch_images says so.
    ("/v1/chat/completions", openai("https://example.com/a.png"), "server.fetch_images is off"),
    ("/v1/responses", responses("http://example.com/a.png"), "server.fetch_images is off"),
    ("/v1/messages", anthropic({"type": "url", "url": "https://example.com/a.png"}),
     "server.fetch_images is off"),
    # Not images, or not in a shape anyone sends them.
    ("/v1/chat/completions", openai("data:image/png;base64,!!!"), "not valid base64"),
    ("/v1/chat/completions", openai("data:text/plain;base64,aGk="), "data:image/...;base64"),
    ("/v1/chat/completions", openai("data:image/png;base64," + base64.b64encode(b"GIF89a").decode()),
     "not an image"),
    # Formats Pillow reads but the gateway does not open (only PNG, JPEG, WebP and GIF).
    ("/v1/chat/completions", openai(f"data:image/bmp;base64,{png(kind='BMP')}"), "not an image"),
    ("/api/generate", {"model": "echo", "prompt": "x", "images": [png(kind="TIFF")]},
     "not an image (PNG, JPEG, GIF or WebP)"),
    ("/v1/chat/completions", openai("file:///etc/passwd"), "images by 'file' URL are not supported"),
    ("/v1/messages", anthropic({"type": "url", "url": "file:///etc/passwd"}), "must be http(s)"),
    ("/v1/messages", anthropic({"type": "file", "file_id": "f"}), "must be base64"),
    ("/v1/responses", {"model": "echo", "input": [{"role": "user", "content": [
        {"type": "input_image", "file_id": "file-1"}]}]}, "by file_id are not supported"),
    ("/api/generate", {"model": "echo", "prompt": "x", "raw": True, "images": [GOOD]},
     "a raw prompt has no template"),
    # Past the pixel limit: refused from the header alone, before any decode.
    ("/api/chat", {"model": "echo", "messages": [{"role": "user", "content": "x",
                                                  "images": [png(2000, 2000)]}]},
     "limits.max_image_pixels"),
]  # fmt: skip


@pytest.mark.parametrize("path, body, fragment", CASES)
def test_unservable_images_are_400s_naming_the_part(gateway, path, body, fragment):
    body = {k: v for k, v in body.items() if v is not None}
    response = httpx.post(f"{gateway.url}{path}", json=body, timeout=30)
    assert response.status_code == 400, response.text
    assert fragment in message(response)


def test_the_gateway_still_serves_after_them(gateway):
    reply = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "echo", "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )
    assert reply.status_code == 200
