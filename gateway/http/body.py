"""Strict decoding of request bodies: wrong types are errors, never coerced."""

from __future__ import annotations

import asyncio
import re
from typing import TypeVar

import msgspec
from litestar import Request

from engines.errors import BadRequest, UnsupportedMediaType
from gateway.http.limits import check_images, check_json_depth, check_schema_bytes
from gateway.http.whole import INT_GOT_FLOAT, decode_whole
from schemas.config import LimitsConfig

T = TypeVar("T")
# Bodies up to this size are scanned and decoded on the event loop (well under a millisecond);
# a larger one (a tool schema of half a MiB took 0.2-0.4 s) on a worker thread.
ON_LOOP_BYTES = 64 * 1024
# A key or type that carries an image in some protocol (`image_url`, `input_image`, an
# Anthropic `"type": "image"`, Ollama's `images`), outside any string (inside one, its
# quotes would be escaped): only then is the body decoded a second time to find them. A
# `\u` escape could spell any of them, so a body holding one is always looked through.
IMAGE_PART = re.compile(
    rb'"(?:image_url|input_image|images)"\s*:|"type"\s*:\s*"(?:image|image_url|input_image)"|\\u'
)
# application/json, the JSON-based types such as application/vnd.api+json, and
# application/octet-stream: LiteLLM's async Ollama client declares its JSON body so, and a
# browser cannot send that type to another site without a CORS preflight (it is not one of
# the "simple" types), so reading it as JSON opens nothing to web pages.
_JSON_MEDIA = re.compile(r"application/(([\w.-]+\+)?json|octet-stream)")


def require_json(request: Request) -> None:
    """`UnsupportedMediaType` when the body is declared as something other than JSON.

    A browser sends `text/plain`, a form or multipart to any site without asking first (a
    "simple" request); none of them is JSON, so no web page can post a body here unasked.
    A body with no content-type at all, or `application/octet-stream`, is read as JSON, as
    Ollama reads it: a browser always declares the type of a body it sends and needs a
    preflight for octet-stream, and clients such as LiteLLM's Ollama provider send one of
    these.
    """
    declared = request.headers.get("content-type")
    if declared is None:
        return
    media = declared.partition(";")[0].strip().lower()
    if not _JSON_MEDIA.fullmatch(media):
        raise UnsupportedMediaType(
            f"the request body must be JSON sent as 'content-type: application/json' (got "
            f"content-type {declared!r}; with curl, add -H 'content-type: application/json')"
        )


async def decode_body(request: Request, schema: type[T]) -> T:
    """The body as `schema`, or `BadRequest` naming what is wrong and where (`$.path`).

    litestar's own body parameter converts loosely ("5" would pass as 5); a client that sends
    the wrong type should hear so. A whole float in an integer field is that integer, as
    JSON Schema counts it (`gateway/http/whole.py`).
    """
    require_json(request)  # before the body is read
    body = await request.body()
    if not body.strip():
        raise BadRequest("the request body is empty; send a JSON object")
    limits = request.app.state.registry.current.config.server.limits
    if len(body) > ON_LOOP_BYTES:  # a large body's scan and decode: not on the event loop
        return await asyncio.to_thread(decoded, body, schema, limits)
    return decoded(body, schema, limits)


def decoded(body: bytes, schema: type[T], limits: LimitsConfig) -> T:
    """`body` checked (nesting, images, schema sizes) and decoded as `schema`. Blocking for
    a large body: `decode_body` runs it on a thread then."""
    check_json_depth(body, limits.max_json_depth)  # before the decoder recurses
    try:
        if IMAGE_PART.search(body):  # count and measure images before any adapter refuses them
            check_images(msgspec.json.decode(body), limits)
        try:
            data = msgspec.json.decode(body, type=schema)
        except msgspec.ValidationError as error:
            if not INT_GOT_FLOAT.match(str(error)):
                raise
        else:
            check_schema_bytes(data, limits.max_tool_schema_bytes)
            return data
        data = decode_whole(body, schema)  # `"seed": 5.0` is 5; 5.5 is refused by name
        check_schema_bytes(data, limits.max_tool_schema_bytes)
        return data
    except msgspec.ValidationError as error:
        raise BadRequest(f"invalid request: {error}") from None
    except msgspec.DecodeError as error:
        from gateway.http.nonfinite import nonfinite_field  # only a failed decode needs it

        nonfinite = nonfinite_field(body)
        if nonfinite:
            raise BadRequest(f"invalid request: {nonfinite}") from None
        raise BadRequest(f"the request body is not valid JSON: {error}") from None
