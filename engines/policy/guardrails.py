"""Tool-call guardrails: each call a model makes, checked against the tools the request declared.

`check_tools` refuses a request whose tool schemas are not JSON Schema (a 400 naming the
tool). `CallChecker` judges each call the model emits — its name against the declared
tools, its arguments against that tool's schema — under the model's `guardrails.tool_calls`
policy: `repair` fixes what `engines/policy/repair.py` can, `strict` repairs nothing, `off` only
reports. Pure functions and plain values: the re-ask lives in `engines/policy/answer.py`.

JSON Schema validation is `jsonschema`'s (the reference implementation: every draft,
`$ref`, formats), not a hand-written subset.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, NamedTuple

import jsonschema
from jsonschema.exceptions import SchemaError

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
            cls = jsonschema.validators.validator_for(tool.parameters)
            validator = self._validators[tool.name] = cls(tool.parameters)
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
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
