"""Tool-call guardrails: each call a model makes, checked against the tools the request declared.

`check_tools` refuses a request whose tool schemas are not JSON Schema (a 400 naming the
tool). `CallChecker` judges each call the model emits — its name against the declared
tools, its arguments against that tool's schema — under the model's `guardrails.tool_calls`
policy: `repair` fixes what `engines/policy/repair.py` can, `strict` repairs nothing, `off` only
reports. Pure functions and plain values: the re-ask lives in `engines/policy/answer.py`.

JSON Schema validation is `jsonschema`'s (the reference implementation: every draft,
`$ref`, formats), not a hand-written subset. A tool schema is the client's, so it may refer
only to itself: a `$ref` (or `$dynamicRef`, `$recursiveRef`) that points anywhere else is a
400 naming it, and every validator resolves against an empty registry that refuses to
retrieve anything (jsonschema's default would fetch `http://` and `file://` references with
`urlopen`, from the gateway, with no timeout). Its `pattern` and `patternProperties` match
with the `regex` module under a deadline and without the GIL (`re` backtracks holding the
GIL, so one client's pattern could freeze every thread of the gateway).
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, NamedTuple

import jsonschema
import referencing.jsonschema
import regex
from jsonschema.exceptions import SchemaError, ValidationError
from referencing import Registry, Specification
from referencing.exceptions import NoSuchResource, Unresolvable

from engines.errors import BadRequest
from engines.policy.repair import Repaired, decode_arguments, repair_json
from schemas.canonical import MalformedToolCall, ToolCall, ToolPolicy, ToolSpec


class Verdict(NamedTuple):
    """What a check found: `call` to pass on, or None when it must be re-asked or refused."""

    call: ToolCall | None
    tool: str | None
    problem: str | None  # None: nothing wrong
    repaired: bool = False


def check_tools(tools: list[ToolSpec]) -> None:
    """Refuse tool declarations that are duplicated or whose parameters are not JSON Schema."""
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        if tool.name in seen:
            raise BadRequest(f"tools[{i}]: tool {tool.name!r} is declared twice")
        seen.add(tool.name)
        schema = tool.parameters
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except SchemaError as error:
            where = _path(error.absolute_path)
            raise BadRequest(
                f"tools[{i}]: tool {tool.name!r} has parameters that are not a valid JSON "
                f"Schema: {error.message} (at {where})"
            ) from None
        _check_references(i, tool)


REFERENCE_KEYS = ("$ref", "$dynamicRef", "$recursiveRef")
# Keywords whose values are instances, not schemas: a "$ref" key inside them is data.
_DATA_KEYS = frozenset({"const", "enum", "default", "examples"})


def _refuse_retrieval(uri: str):
    """The registry's retriever: a tool schema's references are never fetched."""
    raise NoSuchResource(ref=uri)


PATTERN_TIMEOUT_S = 2.0  # one `pattern` match; past it the arguments fail the schema


def _validator(schema: dict) -> Any:
    """A validator for `schema` that resolves references within it alone."""
    cls = _bounded(jsonschema.validators.validator_for(schema))
    return cls(schema, registry=Registry(retrieve=_refuse_retrieval))


_BOUNDED: dict[type, type] = {}


def _bounded(cls: type) -> type:
    """`cls` with its pattern keywords matched under a deadline, off the GIL."""
    if cls not in _BOUNDED:
        keywords = {"pattern": _pattern, "patternProperties": _pattern_properties}
        _BOUNDED[cls] = jsonschema.validators.extend(cls, keywords)
    return _BOUNDED[cls]


class _PatternFailed(Exception):
    """A pattern that did not compile or did not finish matching in time."""


def _search(pattern: str, text: str) -> bool:
    try:
        found = regex.search(pattern, text, timeout=PATTERN_TIMEOUT_S, concurrent=True)
    except TimeoutError:
        raise _PatternFailed(
            f"matching {_excerpt(text, 40)!r} against {pattern!r} took longer than "
            f"{PATTERN_TIMEOUT_S:g} s"
        ) from None
    except regex.error as error:
        raise _PatternFailed(f"{pattern!r} is not a regular expression: {error}") from None
    return found is not None


def _pattern(validator, pattern, instance, schema):
    if not validator.is_type(instance, "string"):
        return
    try:
        if not _search(pattern, instance):
            yield ValidationError(f"{instance!r} does not match {pattern!r}")
    except _PatternFailed as failed:
        yield ValidationError(str(failed))


def _pattern_properties(validator, properties, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in properties.items():
        for key, value in instance.items():
            try:
                matched = _search(pattern, key)
            except _PatternFailed as failed:
                yield ValidationError(str(failed))
                return
            if matched:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _resolver(schema: dict) -> referencing.Resolver:
    """Resolves references as the schema's validator does, with nothing to retrieve."""
    meta = jsonschema.validators.validator_for(schema).META_SCHEMA
    specification = referencing.jsonschema.specification_with(
        meta.get("$id") or meta.get("id") or "urn:unknown-dialect", default=Specification.OPAQUE
    )
    registry = Registry(retrieve=_refuse_retrieval)
    return registry.resolver_with_root(specification.create_resource(schema))


def _check_references(i: int, tool: ToolSpec) -> None:
    """Refuse a reference that points outside the tool's own schema, or to nothing in it."""
    resolver = _resolver(tool.parameters)
    for where, ref in _references(tool.parameters, ()):
        problem = None
        if not ref.startswith("#"):
            problem = "refers outside the schema (references are never fetched)"
        else:
            try:
                resolver.lookup(ref)
            except Unresolvable:
                problem = "refers to nothing in the schema"
        if problem:
            raise BadRequest(
                f"tools[{i}]: tool {tool.name!r} has a reference {ref!r} at {_path(where)} "
                f"that {problem}; a tool's schema may only refer within itself ('#/...')"
            )


def _references(node: Any, where: tuple) -> list[tuple[tuple, str]]:
    """Every reference keyword in a schema, with its path."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in REFERENCE_KEYS and isinstance(value, str):
                found.append(((*where, key), value))
            elif key not in _DATA_KEYS:
                found += _references(value, (*where, key))
    elif isinstance(node, list):
        for n, value in enumerate(node):
            found += _references(value, (*where, n))
    return found


class CallChecker:
    """Judges the tool calls of one request under one policy."""

    def __init__(self, tools: list[ToolSpec], policy: ToolPolicy) -> None:
        self.policy = policy
        self._tools = {t.name: t for t in tools}
        self._validators: dict[str, Any] = {}

    def check(self, call: ToolCall | MalformedToolCall) -> Verdict:
        """The verdict on one call; under `off` a problem is reported and the call kept."""
        if isinstance(call, MalformedToolCall):
            return self._malformed(call)
        return self._check(call.name, call.arguments, call.id, fixes=[])

    def _malformed(self, call: MalformedToolCall) -> Verdict:
        problem = "the tool call did not parse"
        repaired = None if self.policy == "strict" else repair_json(call.body)
        body = repaired.value if repaired else None
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            return Verdict(None, _guess_name(call.body), f"{problem}: {_excerpt(call.raw)}")
        arguments = body.get("arguments", body.get("parameters", {}))
        fixes = [f"call: {fix}" for fix in repaired.fixes]
        return self._check(body["name"], arguments, _call_id(), fixes)

    def _check(self, name: str, arguments: Any, call_id: str, fixes: list[str]) -> Verdict:
        repair = self.policy == "repair"
        tool = self._tools.get(name)
        if tool is None:
            match = _similar(name, self._tools) if repair else None
            if match is None:
                declared = ", ".join(sorted(self._tools)) or "none"
                return Verdict(None, name, f"tool {name!r} was not declared (declared: {declared})")
            fixes = [*fixes, f"tool name {name!r} is {match!r}"]
            tool = self._tools[match]
        decoded = decode_arguments(arguments) if repair else _strict_arguments(arguments)
        if decoded is None:
            return Verdict(None, tool.name, f"arguments are not JSON: {_excerpt(str(arguments))}")
        fixes = [*fixes, *(f"arguments: {fix}" for fix in decoded.fixes)]
        value = decoded.value
        if not isinstance(value, dict):
            return Verdict(None, tool.name, "arguments are not a JSON object")
        invalid = self._invalid(tool, value)
        if invalid:
            return Verdict(None, tool.name, f"arguments fail the tool's schema: {invalid}")
        if fixes and self.policy == "strict":
            return Verdict(None, tool.name, "; ".join(fixes))
        text = arguments if not fixes and isinstance(arguments, str) else json.dumps(value)
        call = ToolCall(id=call_id, name=tool.name, arguments=text)
        return Verdict(call, tool.name, "; ".join(fixes) or None, repaired=bool(fixes))

    def _invalid(self, tool: ToolSpec, value: dict) -> str | None:
        validator = self._validators.get(tool.name)
        if validator is None:
            validator = self._validators[tool.name] = _validator(tool.parameters)
        try:
            error = jsonschema.exceptions.best_match(validator.iter_errors(value))
        except Unresolvable as unresolved:  # check_tools refuses these; never fetch one
            return f"the tool's schema has a reference that cannot be resolved: {unresolved}"
        return None if error is None else f"{error.message} (at {_path(error.absolute_path)})"


def reask_message(problems: list[str]) -> str:
    """What the model is told when its call is sent back to it."""
    listed = "\n".join(f"- {p}" for p in problems)
    return (
        f"Your tool call was invalid:\n{listed}\n"
        "Call the tool again, with arguments that are a JSON object matching its schema."
    )


def _strict_arguments(arguments: Any) -> Repaired | None:
    if not isinstance(arguments, str):
        return Repaired(arguments, [])
    try:
        return Repaired(json.loads(arguments) if arguments.strip() else {}, [])
    except json.JSONDecodeError:
        return None


def _similar(name: str, tools: dict[str, ToolSpec]) -> str | None:
    """A declared tool that differs from `name` only in case, `-`, `_`, spaces or dots."""
    key = _squash(name)
    matches = [t for t in tools if _squash(t) == key]
    return matches[0] if len(matches) == 1 else None


def _squash(name: str) -> str:
    return re.sub(r"[\s_\-.]", "", name).lower()


def _guess_name(body: str) -> str | None:
    found = re.search(r"""["']?name["']?\s*[:=]\s*["']([^"']+)["']""", body)
    return found.group(1) if found else None


def _path(parts) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def _excerpt(text: str, limit: int = 120) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"
