"""Whole-number floats for integer fields: `"seed": 5.0` is the integer 5.

JSON Schema and the OpenAI spec count a number with no fractional part as an integer, and
clients written in JavaScript (or that round-trip through a float) send `5.0`. msgspec's
strict decoding refuses it, and its lax mode would also take the string `"5"`; so the body
is decoded as plain JSON, each integer field the wire struct declares that holds a whole
float gets the int, and the struct is built from that, strictly. A float with a fractional
part stays in place, so the strict conversion refuses it and names the field.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import msgspec
import msgspec.inspect as mi

# msgspec's words when an integer field (`int`, `int | null`, ...) holds a float: only then
# is the body looked through a second time.
INT_GOT_FLOAT = re.compile(r"Expected `[^`]*\bint\b[^`]*`, got `float`")


def decode_whole(body: bytes, schema: type[Any]) -> Any:
    """`body` as `schema`, with whole floats in its integer fields read as ints."""
    return msgspec.convert(wholes(msgspec.json.decode(body), _info(schema)), schema)


@cache
def _info(schema: type[Any]) -> mi.Type:
    return mi.type_info(schema)


def wholes(value: Any, kind: mi.Type) -> Any:
    """`value` with each whole float that `kind` says is an integer made an int."""
    if isinstance(kind, mi.IntType):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value
    if isinstance(kind, mi.UnionType):
        return wholes(value, _branch(value, kind.types))
    if isinstance(kind, mi.Metadata):
        return wholes(value, kind.type)
    if isinstance(kind, mi.StructType) and isinstance(value, dict):
        for field in kind.fields:
            if field.encode_name in value:
                value[field.encode_name] = wholes(value[field.encode_name], field.type)
        return value
    if isinstance(kind, mi.DictType) and isinstance(value, dict):
        return {k: wholes(v, kind.value_type) for k, v in value.items()}
    lists = (mi.ListType, mi.VarTupleType, mi.SetType, mi.FrozenSetType)
    if isinstance(kind, lists) and isinstance(value, list):
        return [wholes(v, kind.item_type) for v in value]
    if isinstance(kind, mi.TupleType) and isinstance(value, list):
        return [wholes(v, k) for v, k in zip(value, kind.item_types, strict=False)] + value[
            len(kind.item_types) :
        ]
    return value


def _branch(value: Any, kinds: tuple[mi.Type, ...]) -> mi.Type:
    """The member of a union that `value` would be decoded as (an `Any` where none fits)."""
    kinds = tuple(k.type if isinstance(k, mi.Metadata) else k for k in kinds)
    if isinstance(value, float):
        # A float where the union also takes floats is a float, whole or not.
        if any(isinstance(k, mi.FloatType) for k in kinds):
            return mi.AnyType()
        return next((k for k in kinds if isinstance(k, mi.IntType)), mi.AnyType())
    if isinstance(value, dict):
        for kind in kinds:
            tagged = isinstance(kind, mi.StructType) and kind.tag_field is not None
            if tagged and value.get(kind.tag_field) == kind.tag:
                return kind
        return next((k for k in kinds if isinstance(k, (mi.StructType, mi.DictType))), mi.AnyType())
    if isinstance(value, list):
        lists = [k for k in kinds if isinstance(k, _LISTS)]
        if len(lists) > 1 and value:  # `list[int] | list[list[int]]`: the first item decides
            first = [k for k in lists if _holds(value[0], getattr(k, "item_type", None))]
            lists = first or lists
        return lists[0] if lists else mi.AnyType()
    return mi.AnyType()


_LISTS = (mi.ListType, mi.VarTupleType, mi.TupleType, mi.SetType, mi.FrozenSetType)


def _holds(value: Any, kind: mi.Type | None) -> bool:
    """Whether `kind` could take `value`'s JSON kind (a loose test, to pick a union member)."""
    if kind is None or isinstance(kind, mi.AnyType):
        return True
    if isinstance(kind, mi.Metadata):
        return _holds(value, kind.type)
    if isinstance(kind, mi.UnionType):
        return any(_holds(value, k) for k in kind.types)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return isinstance(kind, (mi.IntType, mi.FloatType))
    if isinstance(value, list):
        return isinstance(kind, _LISTS)
    if isinstance(value, dict):
        return isinstance(kind, (mi.StructType, mi.DictType))
    return not isinstance(kind, (mi.IntType, mi.FloatType, *_LISTS, mi.StructType, mi.DictType))
