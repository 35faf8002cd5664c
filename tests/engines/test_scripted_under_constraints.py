"""A scripted model under a constraint, through the openai and anthropic SDKs: it answers
with a valid instance (its reply when the reply fits, else `script.constrained`'s first that
fits, else a short instance the grammar allows), and a script whose instances do not fit is
a 400 naming the model's script that the SDKs do not retry."""

from __future__ import annotations

import json

import anthropic
import jsonschema
import openai
import pytest
from conftest import serving

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
PARAMS = {
    "type": "object",
    "properties": {"city": {"type": "string", "minLength": 2}},
    "required": ["city"],
    "additionalProperties": False,
}
CONFIG = """
models:
  - id: prose
    engine: scripted
    script: {reply: "It is sunny in Paris."}
  - id: json
    engine: scripted
    script: {reply: '{"name": "Ada", "age": 36}'}
  - id: given
    engine: scripted
    script:
      reply: "It is sunny in Paris."
      constrained: ['{"name": "Bob", "age": 7}']
"""
SCHEMA_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "person", "schema": PERSON, "strict": True},
}
OPENAI_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": PARAMS}}
FORCED = {"type": "function", "function": {"name": "get_weather"}}
HI = [{"role": "user", "content": "Who?"}]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("scripted-constraints"), CONFIG) as process:
        yield process


@pytest.mark.parametrize(
    "model, expected",
    [("json", {"name": "Ada", "age": 36}), ("given", {"name": "Bob", "age": 7})],
)
def test_a_reply_that_fits_the_schema_is_the_answer(openai_client, model, expected):
    reply = openai_client.chat.completions.create(
        model=model, messages=HI, response_format=SCHEMA_FORMAT
    )
    assert json.loads(reply.choices[0].message.content) == expected


def test_a_reply_that_does_not_fit_gives_a_short_valid_instance(openai_client):
    for stream in (False, True):
        if stream:
            chunks = openai_client.chat.completions.create(
                model="prose", messages=HI, response_format=SCHEMA_FORMAT, stream=True
            )
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            reply = openai_client.chat.completions.create(
                model="prose", messages=HI, response_format=SCHEMA_FORMAT
            )
            text = reply.choices[0].message.content
        jsonschema.validate(json.loads(text), PERSON)
        assert json.loads(text) == {"name": "", "age": 0}


def test_a_forced_tool_call_through_openai_is_a_valid_call(openai_client):
    reply = openai_client.chat.completions.create(
        model="prose", messages=HI, tools=[OPENAI_TOOL], tool_choice=FORCED
    )
    (call,) = reply.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, PARAMS)
    assert reply.choices[0].finish_reason == "tool_calls"


def test_a_forced_tool_use_through_anthropic_is_a_valid_call(anthropic_client):
    reply = anthropic_client.messages.create(
        model="prose",
        max_tokens=200,
        messages=HI,
        tools=[{"name": "get_weather", "input_schema": PARAMS}],
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    (use,) = [block for block in reply.content if block.type == "tool_use"]
    assert use.name == "get_weather"
    jsonschema.validate(use.input, PARAMS)
    assert reply.stop_reason == "tool_use"


def test_a_script_whose_instances_do_not_fit_is_a_400_not_retried(gateway, openai_client):
    with pytest.raises(openai.BadRequestError) as error:
        openai_client.chat.completions.create(
            model="given", messages=HI, tools=[OPENAI_TOOL], tool_choice=FORCED
        )
    assert error.value.response.headers["x-should-retry"] == "false"
    message = error.value.message
    assert "'given'" in message and "script.constrained" in message
    request_id = error.value.response.headers["x-request-id"]
    assert len(gateway.events("request_routed", request_id=request_id)) == 1  # no retry
    with pytest.raises(openai.BadRequestError, match="script.constrained"):  # before a stream
        openai_client.chat.completions.create(
            model="given", messages=HI, tools=[OPENAI_TOOL], tool_choice=FORCED, stream=True
        )
    client = gateway.anthropic()
    with pytest.raises(anthropic.BadRequestError, match="script.constrained"):
        client.messages.create(
            model="given",
            max_tokens=200,
            messages=HI,
            tools=[{"name": "get_weather", "input_schema": PARAMS}],
            tool_choice={"type": "tool", "name": "get_weather"},
        )
