"""A schema that leaves `additionalProperties` unset, on the real SmolLM2: the answer is the
listed keys and ends (issue 25: `llm --schema 'name, age int'` went on with `"skills": [...`
until the token limit)."""

from __future__ import annotations

import json

PERSON = {  # what `llm --schema 'name, age int'` sends
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


def test_an_open_schema_answer_has_only_its_keys_and_stops(shipped_gateway):
    reply = shipped_gateway.openai().chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": "Invent a person."}],
        response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}},
        max_tokens=200,
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "stop", choice.message.content
    assert set(json.loads(choice.message.content)) == {"name", "age"}
    assert reply.usage.completion_tokens < 50
