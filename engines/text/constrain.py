"""Constrained decoding: what a request's output controls allow, as an llguidance grammar.

A request's `format` (JSON, maybe with a schema), a forced tool call (`tool_choice`
required or named) and `strict` tools become one grammar (`plan_for`). llguidance
(`LLMatcher`) tracks each sequence through it token by token and says which tokens may come
next; the engines apply that mask (the MLX engine with `engines/mlx/grammar.py`, the
scripted engine by checking its reply token by token). The grammar applies to the answer
only: a reasoning model thinks freely until its think block closes.

Calls are constrained in the format of mlx-lm's `json_tools` parser (JSON between
`<tool_call>` markers: the fallback format the gateway prompts for); a model whose tool
format is another has its forced calls refused by name rather than left unconstrained.
Under `auto`, strict tools are constrained lazily: text is free until the model writes the
call marker, then the call's JSON is held to the tool's schema. An object schema that lists
`properties` and leaves `additionalProperties` unset is closed (`_closed`), as vLLM does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from engines.errors import BadRequest
from schemas.canonical import ChatRequest, OutputFormat, ToolSpec

# Plain JSON with the separators models write (and Python's json.dumps): no free runs of
# whitespace, which a small model can fill until its token budget is gone.
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
ANY_OBJECT: dict[str, Any] = {"type": "object"}
# mlx-lm tool parsers whose call is `{"name": ..., "arguments": {...}}` between the markers.
JSON_CALL_PARSERS = ("mlx_lm.tool_parsers.json_tools",)
# Bytes of free text kept to spot a marker that arrives split over several tokens.
MARKER_WINDOW = 64


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


# Compiled grammars kept, by schema text (bounded: each is at most the request's schema cap).
GRAMMAR_CACHE = 256


def _llguidance():
    import llguidance

    return llguidance


def make_tokenizer(tokenizer_json: str, vocab_size: int, eos: list[int]):
    """llguidance's tokenizer from a `tokenizers` JSON, sized to the model's logits."""
    llg = _llguidance()
    return llg.LLTokenizer(tokenizer_json, n_vocab=vocab_size, eos_token=eos)


def _schema(schema: dict[str, Any] | None) -> dict[str, Any]:
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
    error, messages = _llguidance().LLMatcher.validate_grammar_with_warnings(grammar, tokenizer)
    if error:
        raise BadRequest(
            f"{field}: the schema uses what constrained decoding cannot enforce: {messages[0]}"
        )
    return grammar


def format_grammar(output: OutputFormat) -> str:
    """The grammar of a JSON answer; a schema llguidance cannot enforce is a 400 naming it."""
    if output.schema is not None and not isinstance(output.schema, dict):
        raise BadRequest(f"{output.field}: a JSON Schema must be an object")
    return _compiled(json.dumps(_schema(output.schema)), output.field)


@lru_cache(maxsize=GRAMMAR_CACHE)
def _compiled(schema: str, field: str) -> str:
    """The checked grammar of a schema (its JSON text): a client resending the same tools
    pays for the compile once. A refusal raises, so it is never cached."""
    try:
        grammar = _llguidance().LLMatcher.grammar_from_json_schema(schema)
    except ValueError as error:
        raise BadRequest(f"{field}: not a JSON Schema: {error}") from None
    return _check(grammar, field)


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
        call = _schema(_call_schema(_constrained_tools(request), True))
        # One forced call unless parallel calls were asked for: a grammar that allowed more
        # let a small model repeat its call until the token limit cut one in half.
        more = "" if controls.one_call else ' ("\\n"? call)*'
        grammar = _lark(f"start: call{more}\n" + _call_rule(start, call, end), "tool_choice")
        return Plan(grammar=grammar, after=after)
    call = _schema(_call_schema(list(tools), strict))
    if controls.format is not None:
        # A JSON answer or a call: the two start differently, so one grammar holds both.
        answer = json.dumps(_schema(controls.format.schema))
        rules = f"start: %json {answer} | call\n" + _call_rule(start, call, end)
        return Plan(grammar=_lark(rules, controls.format.field), after=after)
    grammar = _lark(f"start: %json {json.dumps(call)} {json.dumps(end)}\n", "tools.strict")
    return Plan(grammar=grammar, trigger=start.encode(), repeat=True, after=after)


def _call_rule(start: str, call: dict[str, Any], end: str) -> str:
    return f"call: {json.dumps(start)} %json {json.dumps(call)} {json.dumps(end)}\n"


def _lark(rules: str, field: str) -> str:
    return _check(_llguidance().LLMatcher.grammar_from_lark(rules), field)


class ConstraintState:
    """One sequence's way through its plan, token by token; both engines drive it.

    `may_think` is (the think-start token, the think-end marker) of a model that may open
    its own think block (reasoning asked, the template did not open one): its first token
    may be that one instead of the grammar's, and then the grammar waits for the end.
    """

    def __init__(self, plan: Plan, tokenizer, may_think: tuple[int, bytes] | None = None):
        self._plan = plan
        self._tokenizer = tokenizer
        self._matcher = None
        self._tail = b""
        self._after = plan.after
        self._waiting = plan.after  # the marker that ends the free stretch, if any
        if self._waiting is None:
            self._waiting = plan.trigger
            if self._waiting is None:
                self._start()
        self._may_think = may_think if self._matcher is not None else None

    @property
    def extra_token(self) -> int | None:
        """A token allowed beside the grammar's next ones (the think-start token)."""
        return self._may_think[0] if self._may_think else None

    @property
    def matcher(self):
        """The grammar's matcher while it applies; None during free text."""
        return self._matcher

    def _start(self) -> None:
        llg = _llguidance()
        self._matcher = llg.LLMatcher(self._tokenizer, self._plan.grammar, log_level=0)

    def advance(self, token: int) -> bool:
        """Take the next token; False when the grammar refuses it."""
        may_think, self._may_think = self._may_think, None
        if may_think and token == may_think[0]:  # it thinks first: the grammar waits
            self._matcher, self._after = None, may_think[1]
            self._waiting = self._after
            return True
        if self._matcher is None:
            return self._free(self._tokenizer.decode_bytes([token]))
        if not self._matcher.consume_token(token):
            return False
        if self._plan.repeat and self._matcher.is_stopped():
            self._matcher, self._waiting = None, self._plan.trigger
        return True

    def _free(self, data: bytes) -> bool:
        self._tail = (self._tail + data)[-MARKER_WINDOW:]
        at = self._tail.find(self._waiting)
        if at < 0:
            return True
        rest = self._tail[at + len(self._waiting) :]
        self._tail = b""
        if self._waiting == self._after and self._plan.trigger is not None:
            self._waiting = self._plan.trigger  # reasoning over: free answer text until a call
            return self._free(rest) if rest else True
        self._waiting = None
        self._start()
        # A marker can end inside a token: the rest of that token is the grammar's first text.
        if rest.strip():
            return self._matcher.consume_tokens(self._tokenizer.tokenize_bytes(rest.lstrip()))
        return True

    def accepting(self) -> bool:
        """Whether output that ends here satisfies the plan."""
        if self._matcher is None:
            return self._plan.trigger is not None  # free text, where free text may end
        return self._matcher.is_accepting()

    def error(self) -> str:
        return self._matcher.get_error() if self._matcher is not None else ""
