"""JSON Schemas and lark rules compiled into checked llguidance grammars.

A schema becomes llguidance's JSON form with the separators models write
(`guidance_schema`); a grammar llguidance cannot enforce is a 400 that names the field.
An object schema that lists `properties` and leaves `additionalProperties` unset is
closed (`_closed`), as vLLM does. Compiled schemas are cached by their text, so a client
resending the same tools pays for the compile once.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from engines.errors import BadRequest
from schemas.canonical import OutputFormat

# Plain JSON with the separators models write (and Python's json.dumps): no free runs of
# whitespace, which a small model can fill until its token budget is gone.
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
ANY_OBJECT: dict[str, Any] = {"type": "object"}
# Compiled grammars kept, by schema text (bounded: each is at most the request's schema cap).
GRAMMAR_CACHE = 256


def load_llguidance():
    """llguidance, imported when first needed."""
    import llguidance

    return llguidance


def guidance_schema(schema: dict[str, Any] | None) -> dict[str, Any]:
    """`schema` (any object when None) closed and with llguidance's JSON options."""
    return {**_closed(schema if schema is not None else ANY_OBJECT), "x-guidance": JSON_OPTIONS}


# Where a schema holds schemas: one (`items`), a list (`anyOf`) or a map of them (`properties`).
_ONE = ("additionalProperties", "items", "contains", "not", "if", "then", "else")
_ONE += ("unevaluatedItems", "propertyNames")
_LIST = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
# An object that composes or refers: its keys may come from elsewhere, so it stays open.
_COMPOSED = ("allOf", "anyOf", "oneOf", "$ref", "if", "dependentSchemas")


def _closed(schema: Any, merged: bool = False) -> Any:
    """`schema` with every object that lists `properties` and leaves `additionalProperties`
    unset closed to further keys, as vLLM decodes: left open, a small model adds keys until
    its token budget is gone. An explicit `additionalProperties` (true, or a schema) keeps
    extra keys; `merged` (an `allOf` member) and composed objects are left as they are."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _ONE:
        if isinstance(out.get(key), dict):
            out[key] = _closed(out[key])
    for key in _LIST:
        if isinstance(out.get(key), list):
            out[key] = [_closed(s, merged=key == "allOf") for s in out[key]]
    for key in _MAP:
        if isinstance(out.get(key), dict):
            out[key] = {name: _closed(s) for name, s in out[key].items()}
    open_ = merged or any(k in out for k in ("additionalProperties", "unevaluatedProperties"))
    if "properties" in out and not open_ and not any(k in out for k in _COMPOSED):
        out["additionalProperties"] = False
    return out


def _check(grammar: str, field: str, tokenizer=None) -> str:
    error, messages = load_llguidance().LLMatcher.validate_grammar_with_warnings(grammar, tokenizer)
    if error:
        raise BadRequest(
            f"{field}: the schema uses what constrained decoding cannot enforce: {messages[0]}"
        )
    return grammar


def format_grammar(output: OutputFormat) -> str:
    """The grammar of a JSON answer; a schema llguidance cannot enforce is a 400 naming it."""
    if output.schema is not None and not isinstance(output.schema, dict):
        raise BadRequest(f"{output.field}: a JSON Schema must be an object")
    return _compiled(json.dumps(guidance_schema(output.schema)), output.field)


@lru_cache(maxsize=GRAMMAR_CACHE)
def _compiled(schema: str, field: str) -> str:
    """The checked grammar of a schema (its JSON text): a client resending the same tools
    pays for the compile once. A refusal raises, so it is never cached."""
    try:
        grammar = load_llguidance().LLMatcher.grammar_from_json_schema(schema)
    except ValueError as error:
        raise BadRequest(f"{field}: not a JSON Schema: {error}") from None
    return _check(grammar, field)


def lark_grammar(rules: str, field: str) -> str:
    """The checked grammar of lark `rules`; one llguidance cannot enforce is a 400."""
    return _check(load_llguidance().LLMatcher.grammar_from_lark(rules), field)
