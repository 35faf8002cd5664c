"""A config value checked against its declared type, key by key, so that every problem is
reported at its own YAML position (`file:line:col: key.path: message`): unknown keys with
the closest known one, missing required keys, and msgspec's own errors moved from the
struct's path to the key's, with the choices or the expected form spelled out."""

from __future__ import annotations

import difflib
import re
import types
import typing
from typing import Any

import msgspec

from gateway.control.yaml_source import KeyPath, Source


def check_value(value: Any, tp: Any, path: KeyPath, src: Source) -> None:
    """Report every problem in `value` as a `tp`, going into Structs so each bad key is named."""
    if isinstance(value, list) and typing.get_origin(tp) is list:
        (item,) = typing.get_args(tp)
        if _struct_in(item) is not None:  # a list of Structs (api_keys): each entry's keys
            for i, entry in enumerate(value):
                check_value(entry, item, (*path, i), src)
            return
    struct = _struct_in(tp) if isinstance(value, dict) else None
    if struct is None:
        try:
            msgspec.convert(value, tp, strict=not src.from_env(path))
        except msgspec.ValidationError as exc:
            report_error(exc, path, tp, src)
        return
    fields = {f.encode_name: f for f in msgspec.structs.fields(struct)}
    for key in value:
        if key not in fields:
            src.at((*path, key), unknown_key(key, fields), key=True)
    for name, info in fields.items():
        if name in value:
            check_value(value[name], info.type, (*path, name), src)
        elif info.required:
            src.at(path, f"missing required key {name!r}")


def _struct_in(tp: Any) -> type[msgspec.Struct] | None:
    """The one Struct type that a mapping given for `tp` must be, if any."""
    if typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return tp
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        structs = [s for s in map(_struct_in, typing.get_args(tp)) if s is not None]
        return structs[0] if len(structs) == 1 else None
    return None


def report_error(exc: msgspec.ValidationError, path: KeyPath, tp: Any, src: Source) -> None:
    """Turn msgspec's "message - at `$.a[0]`" into an error at the exact key path."""
    message, _, where = str(exc).partition(" - at `")
    for name, index in re.findall(r"\.([^.\[`]+)|\[(\d+)\]", where):
        path = (*path, name or int(index))
    if message.startswith("Invalid enum value") and (choices := _literals(tp)):
        message += f" (expected one of: {', '.join(map(repr, choices))})"
    elif message.startswith("Expected `str`") and (hint := _description(tp)):
        got = re.search(r", got `\w+`", message)
        hint = hint[0].lower() + hint[1:].rstrip(".")
        message = f"expected {hint}" + (got.group(0) if got else "")
    src.at(path, message)


def _literals(tp: Any) -> list[Any]:
    if typing.get_origin(tp) is typing.Literal:
        return list(typing.get_args(tp))
    return [v for arg in typing.get_args(tp) for v in _literals(arg)]


def _description(tp: Any) -> str | None:
    for arg in typing.get_args(tp):
        if isinstance(arg, msgspec.Meta) and arg.pattern and arg.description:
            return arg.description
        if hint := _description(arg):
            return hint
    return None


def unknown_key(key: str, known: typing.Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(known), n=1)
    return f"unknown key {key!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
