"""A vision request's prompt: template messages with image parts, decoded pictures, cache keys.

Images reach the chat template as `{"type": "image"}` parts in their place among the text
(the Hugging Face convention every VLM template reads), and reach the processor as decoded
pictures in the same order. Prefix reuse keys a prompt by its token ids with every image
token replaced by a hash of the request's images, so a follow-up about the same pictures
reuses the cache and a different picture never does.
"""

from __future__ import annotations

import hashlib
import io
import warnings
from typing import Any

from engines.errors import BadRequest
from engines.text.tools import template_messages
from schemas.canonical import IMAGE_FORMATS, ImagePart, Message, TextPart, ToolSpec


def vision_messages(
    messages: list[Message], tools: list[ToolSpec], knows_tools: bool
) -> list[dict[str, Any]]:
    """`template_messages`, with the parts of image-bearing messages as content lists."""
    rendered = template_messages(messages, tools, knows_tools)
    # template_messages keeps one dict per message, after any tool prompt it put first.
    offset = len(rendered) - len(messages)
    for i, message in enumerate(messages):
        if any(isinstance(p, ImagePart) for p in message.parts):
            rendered[offset + i] = {**rendered[offset + i], "content": _parts(message)}
    return rendered


def _parts(message: Message) -> list[dict[str, Any]]:
    return [
        {"type": "text", "text": p.text} if isinstance(p, TextPart) else {"type": "image"}
        for p in message.parts
    ]


def decode_image(part: ImagePart):
    """The picture as RGB, EXIF orientation applied; a 400 naming the part if unreadable.

    Pillow's own decompression-bomb guard (its process-wide default) refuses an image that
    claims more pixels than that before decoding it; the gateway has already measured each
    image against `limits.max_image_pixels`.
    """
    from PIL import Image, ImageOps

    where = part.where or "an image"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(part.data), formats=IMAGE_FORMATS)
            image.load()
        return ImageOps.exif_transpose(image).convert("RGB")
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as bomb:
        raise BadRequest(f"{where}: {bomb} (limits.max_image_pixels)") from None
    except (OSError, ValueError, SyntaxError) as error:
        raise BadRequest(f"{where}: not an image Pillow can read ({error})") from None


def cache_keys(ids: list[int], image_token: int, images: list[ImagePart]) -> list[int]:
    """Token ids with each image token replaced by a (negative) hash of all the images."""
    if not images:
        return list(ids)
    digest = hashlib.blake2b(digest_size=8)
    for part in images:
        digest.update(len(part.data).to_bytes(8, "little"))
        digest.update(part.data)
    key = -1 - int.from_bytes(digest.digest(), "little") // 2
    return [key if t == image_token else t for t in ids]
