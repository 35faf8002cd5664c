"""Images in requests: from each protocol's shape to canonical `ImagePart`s with their bytes.

A data URL or bare base64 (Ollama, Anthropic `base64` sources) is decoded here; an http(s)
URL is fetched only when `server.fetch_images` is true — with a timeout, a byte cap
(`limits.max_body_bytes`), redirects followed only to public addresses — and is a 400
naming the part otherwise. The picture is checked to be one Pillow can read here, before
the request queues; the model's thread decodes it (under Pillow's bomb guard).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import ipaddress
import socket
from urllib.parse import urljoin, urlsplit

from msgspec.structs import replace

from engines.errors import BadRequest
from schemas.canonical import IMAGE_FORMATS, ImagePart, Message, Part, TextPart
from schemas.config import ServerConfig, size_bytes

FETCH_TIMEOUT_S = 10.0
MAX_REDIRECTS = 3


def image_part(source: str, where: str, detail: str = "auto") -> ImagePart:
    """An image given as a data URL, bare base64, or an http(s) URL (fetched later)."""
    if source.startswith(("http://", "https://")):
        return ImagePart(data=b"", where=where, detail=detail, url=source)
    payload = source
    if source.startswith("data:"):
        header, comma, payload = source.partition(",")
        if not comma or not header.startswith("data:image/") or ";base64" not in header:
            raise BadRequest(f"{where}: an image data URL must be data:image/...;base64,<data>")
    elif ":" in source[:12]:
        scheme = source.split(":", 1)[0]
        raise BadRequest(f"{where}: images by {scheme!r} URL are not supported (data: or http(s))")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(f"{where}: the image is not valid base64") from None
    return ImagePart(data=data, where=where, detail=detail)


def message_with_parts(role: str, parts: list[Part], **fields) -> Message:
    """A message whose content is `parts` in order: `parts` set only when there are images."""
    text = "".join(p.text for p in parts if isinstance(p, TextPart))
    has_images = any(isinstance(p, ImagePart) for p in parts)
    return Message(role=role, content=text, parts=parts if has_images else [], **fields)


async def resolve_images(messages: list[Message], server: ServerConfig) -> list[Message]:
    """Every image fetched (when allowed) and checked readable; a 400 naming the part if not."""
    out = []
    for message in messages:
        if not message.parts:
            out.append(message)
            continue
        parts = []
        for part in message.parts:
            if isinstance(part, ImagePart):
                if part.url:
                    part = replace(part, data=await _fetch(part, server), url="")
                _check_readable(part, server.limits.max_image_pixels)
            parts.append(part)
        out.append(replace(message, parts=parts))
    return out


def _check_readable(part: ImagePart, max_pixels: int) -> None:
    """Only the header is read here (a fetched image was not measured with the body's);
    pixels are decoded on the model's thread."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(part.data), formats=IMAGE_FORMATS) as opened:
            width, height = opened.size
    except Image.DecompressionBombError as bomb:
        raise BadRequest(f"{part.where}: {bomb} (limits.max_image_pixels)") from None
    except (OSError, ValueError, SyntaxError):
        raise BadRequest(f"{part.where}: not an image (PNG, JPEG, GIF or WebP)") from None
    if width * height > max_pixels:
        raise BadRequest(
            f"{part.where}: {width}x{height} pixels, more than {max_pixels} "
            "(limits.max_image_pixels)"
        )


async def _fetch(part: ImagePart, server: ServerConfig) -> bytes:
    import httpx

    if not server.fetch_images:
        raise BadRequest(
            f"{part.where}: remote image URLs are not fetched (server.fetch_images is off); "
            "send the image as a data URL or base64"
        )
    cap = size_bytes(server.limits.max_body_bytes)
    url = part.url
    async with httpx.AsyncClient(follow_redirects=False, timeout=FETCH_TIMEOUT_S) as client:
        for hop in range(MAX_REDIRECTS + 1):
            if hop:  # the client named the first address; where it redirects must be public
                await _refuse_private(url, part.where)
            try:
                async with client.stream("GET", url) as response:
                    if response.is_redirect:
                        url = urljoin(url, response.headers.get("location", ""))
                        continue
                    if response.status_code != 200:
                        raise BadRequest(
                            f"{part.where}: fetching it gave HTTP {response.status_code}"
                        )
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > cap:
                            raise BadRequest(
                                f"{part.where}: the image is larger than "
                                f"{server.limits.max_body_bytes} (limits.max_body_bytes)"
                            )
                    return bytes(body)
            except httpx.HTTPError as error:
                raise BadRequest(f"{part.where}: fetching it failed ({error!r})") from None
    raise BadRequest(f"{part.where}: more than {MAX_REDIRECTS} redirects")


async def _refuse_private(url: str, where: str) -> None:
    """A 400 when `url` is not http(s) or its host resolves to a non-public address."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadRequest(f"{where}: redirected to {parts.scheme or 'a relative'} URL; refused")
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(parts.hostname, parts.port or 80, type=socket.SOCK_STREAM)
    except OSError:
        message = f"{where}: redirected to {parts.hostname!r}, which does not resolve"
        raise BadRequest(message) from None
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if not address.is_global:
            raise BadRequest(
                f"{where}: redirected to {parts.hostname!r} ({address}), a private or loopback "
                "address; refused"
            )
