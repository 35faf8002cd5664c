"""Constrained decoding: what a request's output controls allow, as an llguidance grammar.

A request's `format` (JSON, maybe with a schema), a forced tool call (`tool_choice`
required or named) and `strict` tools become one grammar (`plan_for`), compiled and
checked by `grammars.py`. llguidance (`LLMatcher`) tracks each sequence through it token
by token (`ConstraintState`, constraint_state.py) and says which tokens may come next; the
engines apply that mask (the MLX engine with `engines/mlx/grammar.py`, the scripted engine
by checking its reply token by token). The grammar applies to the answer only: a
reasoning model thinks freely until its think block closes.

Calls are constrained in the format of mlx-lm's `json_tools` parser (JSON between
`<tool_call>` markers: the fallback format the gateway prompts for); a model whose tool
format is another has its forced calls refused by name rather than left unconstrained.
Under `auto`, strict tools are constrained lazily: text is free until the model writes the
call marker, then the call's JSON is held to the tool's schema.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from engines.errors import BadRequest
from engines.text.grammars import ANY_OBJECT, format_grammar, guidance_schema, lark_grammar
from schemas.canonical import ChatRequest, OutputFormat, ToolSpec

# mlx-lm tool parsers whose call is `{"name": ..., "arguments": {...}}` between the markers.
JSON_CALL_PARSERS = ("mlx_lm.tool_parsers.json_tools",)


@dataclass(frozen=True)
class Plan:
    """How one request's answer is constrained.

    `grammar` (llguidance's JSON form) applies from the answer's first token, or, with a
    `trigger`, from just after the model writes that marker (`repeat`: free text again once
    the grammar is complete, until the next marker). `after` is the reasoning end marker
    when the prompt opened a think block: everything before it is free.
    """

    grammar: str
    trigger: bytes | None = None
    repeat: bool = False
    after: bytes | None = None


def check_request(request: ChatRequest) -> None:
    """Refuse, before queueing, output controls the grammar engine cannot enforce."""
    controls = request.controls
    if controls.format is not None:
        format_grammar(controls.format)
    names = {t.name for t in request.tools}
    if controls.forced_tool is not None and controls.forced_tool not in names:
        declared = ", ".join(sorted(names)) or "none"
        raise BadRequest(
            f"tool_choice names function {controls.forced_tool!r}, which is not in tools "
            f"(declared: {declared})"
        )
    if controls.tool_choice == "required" and not request.tools:
        raise BadRequest("tool_choice 'required' needs at least one tool in tools")
    for tool in _constrained_tools(request):
        field = f"tools[{tool.name}].parameters"
        format_grammar(OutputFormat(schema=tool.parameters or ANY_OBJECT, field=field))


def plan_needed(request: ChatRequest) -> bool:
    """Whether the request asks the engine for a grammar or for logprobs."""
    controls = request.controls
    forced = controls.forced_tool is not None or controls.tool_choice == "required"
    return bool(controls.format or forced or controls.strict_tools or controls.logprobs)


def constrained_calls(request: ChatRequest) -> set[str]:
    """The tools whose calls this request decodes under their schema."""
    return {t.name for t in _constrained_tools(request)}


def _constrained_tools(request: ChatRequest) -> list[ToolSpec]:
    controls = request.controls
    if controls.forced_tool is not None:
        return [t for t in request.tools if t.name == controls.forced_tool]
    if controls.tool_choice == "required":
        return list(request.tools)
    return [t for t in request.tools if t.name in controls.strict_tools]


def _call_schema(tools: list[ToolSpec], strict: bool | set[str]) -> dict[str, Any]:
    """A call of one of `tools`: its name, and arguments under its schema where strict."""
    options = []
    for tool in tools:
        constrained = strict is True or (isinstance(strict, set) and tool.name in strict)
        arguments = (tool.parameters or ANY_OBJECT) if constrained else ANY_OBJECT
        options.append(
            {
                "type": "object",
                "properties": {"name": {"const": tool.name}, "arguments": arguments},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    return options[0] if len(options) == 1 else {"anyOf": options}


def plan_for(
    request: ChatRequest,
    tool_parser_module: str | None,
    markers: tuple[str, str] | None,
    think_end: str | None,
) -> Plan | None:
    """The request's constraint for a model whose calls `tool_parser_module` parses
    between `markers`; `think_end` when the prompt left the model inside a think block.
    None: nothing to constrain."""
    tools, controls = request.tools, request.controls
    forced = controls.forced_tool is not None or controls.tool_choice == "required"
    strict = {t.name for t in tools if t.name in controls.strict_tools}
    if not (controls.format or forced or strict):
        return None
    after = think_end.encode() if think_end else None
    if not tools:
        return Plan(grammar=format_grammar(controls.format), after=after)
    if tool_parser_module not in JSON_CALL_PARSERS or markers is None:
        asked = "tool_choice" if forced else "strict tools" if strict else "a format with tools"
        raise BadRequest(
            f"{asked}: this model's tool-call format ({tool_parser_module}) cannot be "
            "constrained; only the json_tools format can (tool_parser: json_tools)"
        )
    start, end = markers
    if forced:
        call = guidance_schema(_call_schema(_constrained_tools(request), True))
        # One forced call unless parallel calls were asked for: a grammar that allowed more
        # let a small model repeat its call until the token limit cut one in half.
        more = "" if controls.one_call else ' ("\\n"? call)*'
        grammar = lark_grammar(f"start: call{more}\n" + _call_rule(start, call, end), "tool_choice")
        return Plan(grammar=grammar, after=after)
    call = guidance_schema(_call_schema(list(tools), strict))
    if controls.format is not None:
        # A JSON answer or a call: the two start differently, so one grammar holds both.
        answer = json.dumps(guidance_schema(controls.format.schema))
        rules = f"start: %json {answer} | call\n" + _call_rule(start, call, end)
        return Plan(grammar=lark_grammar(rules, controls.format.field), after=after)
    grammar = lark_grammar(f"start: %json {json.dumps(call)} {json.dumps(end)}\n", "tools.strict")
    return Plan(grammar=grammar, trigger=start.encode(), repeat=True, after=after)


def _call_rule(start: str, call: dict[str, Any], end: str) -> str:
    return f"call: {json.dumps(start)} %json {json.dumps(call)} {json.dumps(end)}\n"
