"""Images in requests: from each protocol's shape to canonical `ImagePart`s with their bytes.

A data URL or bare base64 (Ollama, Anthropic `base64` sources) is decoded here; an http(s)
URL is fetched only when `server.fetch_images` is true, from public addresses only
(gateway/canonical/fetch.py), and is a 400 naming the part otherwise. The picture is
checked to be one Pillow can read here, before the request queues; the model's thread
decodes it (under Pillow's bomb guard).
"""

from __future__ import annotations

import base64
import binascii
import io
from ipaddress import ip_network

from litestar import Request
from msgspec.structs import replace

from engines.errors import BadRequest
from engines.log import emit
from gateway.canonical.fetch import FetchFailed, fetch_image
from gateway.http.streaming import unless_client_leaves
from schemas.canonical import IMAGE_FORMATS, ImagePart, Message, Part, TextPart
from schemas.config import ServerConfig, seconds, size_bytes
from schemas.events import ImageFetchFailed


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


async def fetch_images(
    request: Request, messages: list[Message], server: ServerConfig
) -> list[Message]:
    """`resolve_images`, where a fetch over the network stops with its client. A request
    with no image URL fetches nothing: it is resolved without the watcher's two tasks (every
    chat request passes here, on the event loop)."""
    work = resolve_images(messages, server)
    if not any(isinstance(p, ImagePart) and p.url for m in messages for p in m.parts or ()):
        return await work
    return await unless_client_leaves(request, work)


async def resolve_images(messages: list[Message], server: ServerConfig) -> list[Message]:
    """Every image fetched (when allowed) and checked readable; a 400 naming the part if not."""
    out = []
    number = 0  # the image's place in the request, from 1, for the one fetch error
    for message in messages:
        if not message.parts:
            out.append(message)
            continue
        parts = []
        for part in message.parts:
            if isinstance(part, ImagePart):
                number += 1
                if part.url:
                    part = replace(part, data=await _fetch(part, number, server), url="")
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


async def _fetch(part: ImagePart, number: int, server: ServerConfig) -> bytes:
    if not server.fetch_images:
        raise BadRequest(
            f"{part.where}: remote image URLs are not fetched (server.fetch_images is off); "
            "send the image as a data URL or base64"
        )
    allow = [ip_network(network, strict=False) for network in server.fetch_images_allow]
    try:
        return await fetch_image(
            part.url,
            max_bytes=size_bytes(server.limits.max_body_bytes),
            deadline=seconds(server.limits.fetch_timeout),
            allow=allow,
        )
    except FetchFailed as failed:
        emit(ImageFetchFailed(where=part.where, reason=str(failed)))
        raise BadRequest(f"{part.where}: could not fetch image {number}") from None
