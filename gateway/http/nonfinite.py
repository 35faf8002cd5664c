"""NaN and Infinity in a request body: not JSON, but what Python's `json.dumps` writes.

The strict decoder stops at such a literal with only a byte offset; clients deserve the
field's name, as they get for any other bad number.
"""

from __future__ import annotations

import json
from typing import Any


class _Constant(str):
    """A `NaN`, `Infinity` or `-Infinity` literal, found where a value should be."""


def nonfinite_field(body: bytes) -> str | None:
    """`$.path: NaN is not a number ...` for the first non-finite literal in `body`, if any."""
    try:
        value = json.loads(body, parse_constant=_Constant)
    except ValueError:
        return None
    found = _find(value, "$")
    if found is None:
        return None
    path, literal = found
    return f"{path}: {literal} is not a number (JSON has no NaN or Infinity)"


def _find(value: Any, path: str) -> tuple[str, str] | None:
    if isinstance(value, _Constant):
        return path, str(value)
    children = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, child in children:
        where = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}"
        found = _find(child, where)
        if found:
            return found
    return None
