"""The short instance a constraint plan accepts (the scripted engine's answer under a
constraint its reply does not fit): valid for each kind of schema and grammar, and short."""

from __future__ import annotations

import json

import jsonschema
import pytest

from engines.scripted import BYTE_VOCAB, END_OF_TEXT, make_byte_tokenizer
from engines.text.constrain import Plan
from engines.text.constraint_state import make_tokenizer
from engines.text.grammars import load_llguidance
from engines.text.instance import shortest_instance


@pytest.fixture(scope="module")
def tokenizer():
    tokenizer = make_byte_tokenizer()
    tokenizer.add_special_tokens([END_OF_TEXT])
    return make_tokenizer(tokenizer.to_str(), BYTE_VOCAB + 1, [BYTE_VOCAB])


def schema_plan(schema: dict) -> Plan:
    return Plan(grammar=load_llguidance().LLMatcher.grammar_from_json_schema(schema))


@pytest.mark.parametrize(
    "schema, expected",
    [
        (
            {
                "type": "object",
                "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                "required": ["name", "age"],
            },
            {"name": "", "age": 0},
        ),
        ({"type": "object"}, {}),
        ({"type": "array", "items": {"type": "number"}, "minItems": 2}, [0, 0]),
        ({"type": "string", "pattern": "^[a-z]+@[a-z]+\\.com$"}, "a@a.com"),
        (
            {
                "type": "object",
                "properties": {
                    "tags": {
                        "type": "array",
                        "items": {"type": "string", "minLength": 2},
                        "minItems": 1,
                    }
                },
                "required": ["tags"],
            },
            {"tags": ["00"]},
        ),
        ({"enum": ["zebra", "cat"]}, "cat"),
        ({"type": "boolean"}, False),
        ({"anyOf": [{"type": "null"}, {"type": "integer"}]}, 0),
    ],
)
def test_a_schema_gets_a_short_valid_instance(tokenizer, schema, expected):
    text = shortest_instance(schema_plan(schema), tokenizer)
    value = json.loads(text)
    jsonschema.validate(value, schema)
    assert value == expected


def test_a_lark_grammar_and_a_regex_get_an_instance(tokenizer):
    llg = load_llguidance().LLMatcher
    lark = Plan(grammar=llg.grammar_from_lark('start: "yes" | "no" | /[0-9]+ apples/'))
    assert shortest_instance(lark, tokenizer) == "no"
    regex = Plan(grammar=llg.grammar_from_regex(r"\d{3}-\d{4}"))
    assert shortest_instance(regex, tokenizer) == "000-0000"


def test_free_text_under_a_trigger_is_the_empty_text(tokenizer):
    plan = Plan(grammar=schema_plan({"type": "object"}).grammar, trigger=b"<tool_call>")
    assert shortest_instance(plan, tokenizer) == ""


def test_a_grammar_with_no_instance_within_the_limit_gives_none(tokenizer):
    long = schema_plan({"type": "string", "minLength": 50})
    assert shortest_instance(long, tokenizer, limit=20) is None
    assert len(json.loads(shortest_instance(long, tokenizer))) == 50
