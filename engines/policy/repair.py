"""Repairing the JSON small models write: pure functions, each fix named.

Models that call tools often write almost-JSON: Python's quotes and literals, keys without
quotes, a brace short at the end, chatter after the object. `repair_json` rewrites such text
into the JSON it meant, token by token (never inside a string), and says which fixes it
made, so the `guardrail` event can report them. What cannot be read even so is `None`.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

TRAILING_TEXT = "trailing text after the JSON"
LEADING_TEXT = "text before the JSON"
SINGLE_QUOTES = "single-quoted strings"
UNQUOTED_KEYS = "unquoted keys"
PYTHON_LITERALS = "Python literals (True/False/None)"
MISSING_CLOSERS = "missing closing brace or bracket"
UNTERMINATED_STRING = "unterminated string"
TRAILING_COMMA = "trailing comma"
STRING_ENCODED = "arguments as a JSON string inside a string"

PYTHON_WORDS = {"True": "true", "False": "false", "None": "null"}
JSON_WORDS = {"true", "false", "null"}
CLOSERS = {"{": "}", "[": "]"}
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")
_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


class Repaired(NamedTuple):
    value: Any
    fixes: list[str]  # empty when the text was valid JSON already


def repair_json(text: str) -> Repaired | None:
    """The JSON object or array `text` meant, with the fixes it took; None if unreadable."""
    try:
        return Repaired(json.loads(text), [])
    except (json.JSONDecodeError, TypeError):
        pass
    fixes: list[str] = []
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start < 0:
        return None
    if text[:start].strip():
        fixes.append(LEADING_TEXT)
    normalized = _normalize(text[start:], fixes)
    if normalized is None:
        return None
    try:
        return Repaired(json.loads(normalized), fixes)
    except json.JSONDecodeError:
        return None


def decode_arguments(value: Any) -> Repaired | None:
    """Tool-call arguments as an object: JSON text (repaired if need be), or an object already.

    Arguments that are a string holding JSON (`"{\\"city\\": \\"Paris\\"}"`) are unwrapped.
    """
    fixes: list[str] = []
    if isinstance(value, str):
        if not value.strip():
            return Repaired({}, [])
        repaired = repair_json(value)
        if repaired is None:
            return None
        value, fixes = repaired.value, list(repaired.fixes)
    if isinstance(value, str):  # the object was written as a JSON string
        inner = repair_json(value)
        if inner is None:
            return None
        value, fixes = inner.value, [*fixes, STRING_ENCODED, *inner.fixes]
    return Repaired(value, fixes)


def _normalize(text: str, fixes: list[str]) -> str | None:
    """`text` (starting at `{` or `[`) as JSON text; records each kind of fix once."""
    out: list[str] = []
    stack: list[str] = []
    i, n = 0, len(text)

    def fix(name: str) -> None:
        if name not in fixes:
            fixes.append(name)

    while i < n:
        char = text[i]
        if char in "{[":
            stack.append(char)
            out.append(char)
            i += 1
        elif char in "}]":
            if not stack or CLOSERS[stack[-1]] != char:
                return None
            _drop_trailing_comma(out, fix)
            stack.pop()
            out.append(char)
            i += 1
            if not stack:  # the value is complete: whatever follows is not part of it
                if text[i:].strip():
                    fix(TRAILING_TEXT)
                return "".join(out)
        elif char in "\"'":
            end, value, closed = _read_string(text, i)
            if char == "'":
                fix(SINGLE_QUOTES)
            if not closed:
                fix(UNTERMINATED_STRING)
            out.append(json.dumps(value, ensure_ascii=False))
            i = end
        elif char.isspace() or char in ",:":
            out.append(char)
            i += 1
        elif number := _NUMBER.match(text, i):
            out.append(number.group())
            i = number.end()
        elif word := _WORD.match(text, i):
            token = word.group()
            i = word.end()
            if _next_char(text, i) == ":" and stack and stack[-1] == "{":
                fix(UNQUOTED_KEYS)
                out.append(json.dumps(token))
            elif token in PYTHON_WORDS:
                fix(PYTHON_LITERALS)
                out.append(PYTHON_WORDS[token])
            elif token in JSON_WORDS:
                out.append(token)
            else:
                return None  # a bare word that is no literal: no safe reading
        else:
            return None
    if not stack:
        return "".join(out)
    _drop_trailing_comma(out, fix)
    if [t for t in out if not t.isspace()][-1:] == [":"]:
        return None  # a key with no value: nothing to guess
    fix(MISSING_CLOSERS)
    return "".join(out) + "".join(CLOSERS[c] for c in reversed(stack))


def _read_string(text: str, start: int) -> tuple[int, str, bool]:
    """A quoted string at `start`: (index after it, its value, whether it was closed)."""
    quote = text[start]
    chars: list[str] = []
    i = start + 1
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            escaped = text[i : i + 2]
            if escaped == "\\u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6]):
                chars.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            simple = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "/": "/"}
            chars.append(simple.get(escaped[1], escaped[1]))
            i += 2
            continue
        if char == quote:
            return i + 1, "".join(chars), True
        chars.append(char)
        i += 1
    return i, "".join(chars), False


def _next_char(text: str, i: int) -> str:
    rest = text[i:].lstrip()
    return rest[:1]


def _drop_trailing_comma(out: list[str], fix) -> None:
    """Remove a comma right before a closer (`[1, 2,]`), ignoring whitespace."""
    j = len(out) - 1
    while j >= 0 and out[j].isspace():
        j -= 1
    if j >= 0 and out[j] == ",":
        del out[j]
        fix(TRAILING_COMMA)
