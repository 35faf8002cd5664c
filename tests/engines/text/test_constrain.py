"""Constrained decoding on the scripted engine: its reply is checked against the same
grammar a real model is masked with, so every mapping is testable deterministically; a
reply that does not fit gives way to a short instance the grammar allows."""

from __future__ import annotations

import json

import msgspec
import pytest
from conftest import with_controls

from engines.errors import BadRequest
from engines.scripted import ConstraintViolated, ScriptedEngine
from engines.text import grammars
from engines.text.constrain import check_request, plan_for
from schemas.canonical import (
    ChatRequest,
    Finished,
    Message,
    OutputControls,
    OutputFormat,
    TextDelta,
    ToolCallOutput,
    ToolSpec,
)
from schemas.config import ScriptConfig
from schemas.logprobs import Logprobs

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "mood": {"enum": ["happy", "sad"]},
    },
    "required": ["name", "age", "mood"],
    "additionalProperties": False,
}
WEATHER = ToolSpec(
    name="get_weather",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
)
HI = [Message(role="user", content="hi")]


def run(reply: str, constrained: list[str] = (), **fields) -> list:
    engine = ScriptedEngine(ScriptConfig(reply=reply, constrained=list(constrained)))
    request = ChatRequest(messages=HI, max_tokens=200, **with_controls(**fields))
    check_request(request)
    return list(engine.generate(request, lambda: False))


def refused(reply: str, **fields) -> bool:
    """Whether the request's grammar refuses `reply`: given as the script's only
    constrained reply too, a refused one leaves the script nothing that fits."""
    try:
        run(reply, constrained=[reply], **fields)
    except ConstraintViolated:
        return True
    return False


def text_of(outputs: list) -> str:
    return "".join(o.text for o in outputs if isinstance(o, TextDelta))


def test_a_reply_that_satisfies_the_schema_goes_out():
    reply = '{"name": "Ada", "age": 36, "mood": "happy"}'
    outputs = run(reply, format=OutputFormat(schema=PERSON))
    assert json.loads(text_of(outputs)) == {"name": "Ada", "age": 36, "mood": "happy"}


@pytest.mark.parametrize(
    "reply",
    [
        '{"name": "Ada", "age": 200, "mood": "happy"}',  # past the maximum
        '{"name": "Ada", "age": 3, "mood": "meh"}',  # not in the enum
        "Sure! Here it is",  # not JSON at all
        '{"name": "Ada"',  # cut short
    ],
)
def test_a_reply_the_schema_forbids_gives_way_to_a_short_instance(reply):
    outputs = run(reply, format=OutputFormat(schema=PERSON))
    assert json.loads(text_of(outputs)) == {"name": "", "age": 0, "mood": "happy"}


def test_the_first_constrained_reply_that_fits_answers():
    given = ['{"name": "Bo"}', '{"name": "Bo", "age": 7, "mood": "sad"}']
    outputs = run("Sure!", constrained=given, format=OutputFormat(schema=PERSON))
    assert json.loads(text_of(outputs)) == {"name": "Bo", "age": 7, "mood": "sad"}


@pytest.mark.parametrize(
    "reply, where",
    [
        (
            '{"name": "Ada", "age": 200, "mood": "happy"}',
            'breaks it after \'{"name": "Ada", "age": 20\'',
        ),
        (
            '{"name": "Ada", "age": 3, "mood": "meh"}',
            'breaks it after \'{"name": "Ada", "age": 3, "mood": "\'',
        ),
        ("Sure! Here it is", "breaks it after ''"),
        ('{"name": "Ada"', "ends before it is satisfied"),
    ],
)
def test_a_script_with_no_reply_that_fits_says_where_its_reply_breaks(reply, where):
    with pytest.raises(ConstraintViolated, match="script.constrained") as error:
        run(reply, constrained=["nope"], format=OutputFormat(schema=PERSON))
    assert f"the scripted reply {where}" in error.value.message
    assert error.value.message.startswith("model 'scripted': its script has no reply")


def test_json_object_mode_takes_any_object_and_no_array():
    assert text_of(run('{"a": [1, 2]}', format=OutputFormat())) == '{"a": [1, 2]}'
    assert text_of(run("[1, 2]", format=OutputFormat())) == "{}"
    with pytest.raises(ConstraintViolated):
        run("[1, 2]", constrained=["[]"], format=OutputFormat())


def test_the_reasoning_before_the_answer_is_not_constrained():
    reply = '<think>Let me think... free text!</think>{"name": "Ada", "age": 1, "mood": "sad"}'
    outputs = run(reply, format=OutputFormat(schema=PERSON), reasoning="low")
    assert json.loads(text_of(outputs))["mood"] == "sad"


def test_a_forced_call_must_be_a_call_with_valid_arguments():
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    outputs = run(call, tools=[WEATHER], tool_choice="required")
    (made,) = [o.call for o in outputs if isinstance(o, ToolCallOutput)]
    assert (made.name, json.loads(made.arguments)) == ("get_weather", {"city": "Paris"})
    assert [o for o in outputs if isinstance(o, Finished)][0].stop_reason == "tool_calls"
    for reply in ("It is sunny.", call.replace("city", "town")):  # no call, a bad one
        outputs = run(reply, tools=[WEATHER], forced_tool="get_weather")
        (made,) = [o.call for o in outputs if isinstance(o, ToolCallOutput)]
        assert (made.name, json.loads(made.arguments)) == ("get_weather", {"city": ""})


def test_a_named_tool_must_be_that_tool():
    other = ToolSpec(name="get_time", parameters={"type": "object"})
    call = '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    assert run(call, tools=[WEATHER, other], forced_tool="get_time")
    outputs = run(call, tools=[WEATHER, other], forced_tool="get_weather")
    assert [o.call.name for o in outputs if isinstance(o, ToolCallOutput)] == ["get_weather"]
    with pytest.raises(ConstraintViolated):
        run(call, constrained=[call], tools=[WEATHER, other], forced_tool="get_weather")


def test_strict_tools_under_auto_leave_text_free_and_hold_calls_to_the_schema():
    assert text_of(run("No call needed.", tools=[WEATHER], strict_tools=["get_weather"]))
    call = 'Checking. <tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    assert run(call, tools=[WEATHER], strict_tools=["get_weather"])
    bad = 'Checking. <tool_call>{"name": "get_weather", "arguments": {"city": 3}}</tool_call>'
    assert refused(bad, tools=[WEATHER], strict_tools=["get_weather"])


def test_parallel_tool_calls_off_keeps_one_call():
    one = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    outputs = run(one + "\n" + one, tools=[WEATHER], parallel_tool_calls=False)
    assert len([o for o in outputs if isinstance(o, ToolCallOutput)]) == 1
    assert refused(
        one + "\n" + one, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False
    )  # forced and single: a second call breaks it
    assert run(one + "\n" + one, tools=[WEATHER], tool_choice="required", parallel_tool_calls=True)


@pytest.mark.parametrize(
    "forced",
    [{"tool_choice": "required"}, {"forced_tool": "get_weather"}],
    ids=["required", "named"],
)
def test_a_forced_call_is_one_call_unless_parallel_calls_are_asked_for(forced):
    # Unset is not true: a grammar that allowed more calls let a small model repeat its call
    # until the token limit cut one in half (issue 25).
    one = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    assert run(one, tools=[WEATHER], **forced)
    assert refused(one + "\n" + one, tools=[WEATHER], **forced)
    if "forced_tool" in forced:  # a named tool is one call, whatever the client says
        assert refused(one + "\n" + one, tools=[WEATHER], parallel_tool_calls=True, **forced)


@pytest.mark.parametrize(
    "schema, feature",
    [
        ({"type": "object", "$dynamicRef": "#x"}, "$dynamicRef"),
        ({"type": "string", "format": "ipv9"}, "ipv9"),
    ],
)
def test_a_schema_feature_the_engine_cannot_enforce_is_a_400_naming_it(schema, feature):
    request = ChatRequest(
        messages=HI, max_tokens=5, controls=OutputControls(format=OutputFormat(schema=schema))
    )
    with pytest.raises(BadRequest, match="response_format") as error:
        check_request(request)
    assert feature in error.value.message


def test_a_forced_tool_that_is_not_declared_is_a_400_naming_it():
    request = ChatRequest(
        messages=HI, max_tokens=5, tools=[WEATHER], controls=OutputControls(forced_tool="nope")
    )
    with pytest.raises(BadRequest, match="'nope'.*get_weather"):
        check_request(request)


def test_a_tool_format_without_a_grammar_refuses_a_forced_call():
    request = ChatRequest(
        messages=HI,
        max_tokens=5,
        tools=[WEATHER],
        controls=OutputControls(tool_choice="required"),
    )
    with pytest.raises(BadRequest, match="qwen3_coder"):
        plan_for(request, "mlx_lm.tool_parsers.qwen3_coder", ("<tool_call>", "</tool_call>"), None)


def test_the_scripted_engine_reports_logprobs_of_certainty():
    from schemas.logprobs import LogprobsRequest

    outputs = run("hello world", logprobs=LogprobsRequest(top=2, prompt=True))
    prompt, *generated = [o for o in outputs if isinstance(o, Logprobs)]
    assert prompt.prompt and prompt.tokens[0].logprob is None
    tokens = [t for o in generated for t in o.tokens]
    assert "".join(t.token for t in tokens) == "hello world"
    assert all(t.logprob == 0.0 and len(t.top) == 1 for t in tokens)
    assert msgspec.json.encode(tokens[0])


def test_a_model_that_opens_its_own_think_block_thinks_freely_first():
    from engines.scripted import make_byte_tokenizer
    from engines.text.constraint_state import ConstraintState, make_tokenizer

    byte_tokenizer = make_byte_tokenizer()
    byte_tokenizer.add_special_tokens(["<|end|>", "<think>"])
    tokenizer = make_tokenizer(byte_tokenizer.to_str(), 258, [256])
    request = ChatRequest(
        messages=HI, max_tokens=99, controls=OutputControls(format=OutputFormat(schema=PERSON))
    )
    plan = plan_for(request, None, None, None)

    def feed(state, text: str) -> bool:
        return all(state.advance(t) for t in tokenizer.tokenize_str(text))

    state = ConstraintState(plan, tokenizer, may_think=(257, b"</think>"))
    assert state.extra_token == 257
    assert state.advance(257) and state.extra_token is None  # it thinks: free until the end
    assert feed(state, "any words { at all</think>")
    assert feed(state, '{"name": "Ada", "age": 3, "mood": "sad"}') and state.accepting()
    state = ConstraintState(plan, tokenizer, may_think=(257, b"</think>"))
    assert not feed(state, "no thinking, no JSON")  # without the think token: the grammar


def test_a_schema_sent_again_is_compiled_once(monkeypatch):
    import llguidance

    calls = []
    compile_schema = llguidance.LLMatcher.grammar_from_json_schema

    def counting(schema, *args, **kwargs):
        calls.append(schema)
        return compile_schema(schema, *args, **kwargs)

    monkeypatch.setattr(llguidance.LLMatcher, "grammar_from_json_schema", counting)
    schema = {"type": "object", "properties": {"cache_probe_7": {"type": "integer"}}}
    first = grammars.format_grammar(OutputFormat(schema=schema, field="$.response_format"))
    again = grammars.format_grammar(OutputFormat(schema=dict(schema), field="$.response_format"))
    assert first == again and len(calls) == 1


OPEN_PERSON = {  # as `llm --schema 'name, age int'` sends it: additionalProperties unset
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


def test_an_object_with_properties_and_additional_properties_unset_takes_no_other_key():
    # Left open, SmolLM2 went on `"skills": [...` until its token budget was gone (issue 25).
    assert run('{"name": "Sylvie", "age": 25}', format=OutputFormat(schema=OPEN_PERSON))
    assert refused(
        '{"name": "Sylvie", "age": 25, "skills": []}', format=OutputFormat(schema=OPEN_PERSON)
    )
    nested = {"type": "object", "properties": {"who": OPEN_PERSON}, "required": ["who"]}
    assert refused('{"who": {"name": "Sy", "age": 2, "x": 1}}', format=OutputFormat(schema=nested))
    listed = {"type": "array", "items": OPEN_PERSON}
    assert refused('[{"name": "Sy", "age": 2, "x": 1}]', format=OutputFormat(schema=listed))


def test_the_tool_arguments_of_a_forced_call_take_no_other_key():
    tool = ToolSpec(name="get_weather", parameters=dict(WEATHER.parameters))
    del tool.parameters["additionalProperties"]
    extra = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo", "x": 1}}</tool_call>'
    assert refused(extra, tools=[tool], forced_tool="get_weather")


@pytest.mark.parametrize("extra", [True, {"type": "integer"}])
def test_extra_keys_stay_allowed_where_the_schema_asks_for_them(extra):
    schema = {**OPEN_PERSON, "additionalProperties": extra}
    assert run('{"name": "Sylvie", "age": 25, "x": 1}', format=OutputFormat(schema=schema))
    # No `properties` (a map of anything): nothing to close.
    assert run('{"a": 1}', format=OutputFormat(schema={"type": "object"}))
