"""Strict decoding of request bodies: wrong types are errors, never coerced."""

from __future__ import annotations

from typing import TypeVar

import msgspec
from litestar import Request

from engines.errors import BadRequest
from gateway.limits import check_images, check_json_depth

T = TypeVar("T")


async def decode_body(request: Request, schema: type[T]) -> T:
    """The body as `schema`, or `BadRequest` naming what is wrong and where (`$.path`).

    litestar's own body parameter converts loosely ("5" would pass as 5); a client that sends
    the wrong type should hear so.
    """
    body = await request.body()
    if not body.strip():
        raise BadRequest("the request body is empty; send a JSON object")
    limits = request.app.state.registry.current.config.server.limits
    check_json_depth(body, limits.max_json_depth)  # before the decoder recurses
    try:
        if b"image" in body:  # count and measure images before any adapter refuses them
            check_images(msgspec.json.decode(body), limits)
        return msgspec.json.decode(body, type=schema)
    except msgspec.ValidationError as error:
        raise BadRequest(f"invalid request: {error}") from None
    except msgspec.DecodeError as error:
        from gateway.nonfinite import nonfinite_field  # only a failed decode needs it

        nonfinite = nonfinite_field(body)
        if nonfinite:
            raise BadRequest(f"invalid request: {nonfinite}") from None
        raise BadRequest(f"the request body is not valid JSON: {error}") from None
