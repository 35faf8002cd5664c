"""Tool-call guardrails as pure functions: JSON repair case by case, verdicts under each policy,
tool schemas refused by name, and calls that do not parse handed over as malformed."""

import json

import pytest

from engines.errors import BadRequest
from engines.policy import repair
from engines.policy.guardrails import CallChecker, check_tools
from engines.policy.repair import decode_arguments, repair_json
from engines.text.output import OutputParser, load_tool_format
from schemas.canonical import ChatRequest, MalformedToolCall, Message, ToolCall, ToolSpec

WEATHER = ToolSpec(
    name="get_weather",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
        "additionalProperties": False,
    },
)

# text the model wrote -> (value meant, fixes named)
REPAIRS = [
    ('{"city": "Paris"}', {"city": "Paris"}, []),
    ('{"city": "Paris"} I hope that helps!', {"city": "Paris"}, [repair.TRAILING_TEXT]),
    ("{'city': 'Paris'}", {"city": "Paris"}, [repair.SINGLE_QUOTES]),
    ("{'q': \"it's\"}", {"q": "it's"}, [repair.SINGLE_QUOTES]),
    ('{city: "Paris", days: 3}', {"city": "Paris", "days": 3}, [repair.UNQUOTED_KEYS]),
    ('{"city": "Paris"', {"city": "Paris"}, [repair.MISSING_CLOSERS]),
    ('{"a": {"b": [1, 2', {"a": {"b": [1, 2]}}, [repair.MISSING_CLOSERS]),
    (
        '{"ok": True, "no": False, "x": None}',
        {"ok": True, "no": False, "x": None},
        [repair.PYTHON_LITERALS],
    ),
    ('{"a": [1, 2,],}', {"a": [1, 2]}, [repair.TRAILING_COMMA]),
    ('Here you go: {"city": "Paris"}', {"city": "Paris"}, [repair.LEADING_TEXT]),
    (
        '{"city": "Par',
        {"city": "Par"},
        [repair.UNTERMINATED_STRING, repair.MISSING_CLOSERS],
    ),
    (
        "{'note': 'say \"hi\"', 'n': -1.5e2}",
        {"note": 'say "hi"', "n": -150.0},
        [repair.SINGLE_QUOTES],
    ),
    ('{"city": "Paris", "tag": "True"}', {"city": "Paris", "tag": "True"}, []),
]


@pytest.mark.parametrize(("text", "value", "fixes"), REPAIRS)
def test_repair_json_fixes_each_defect_and_names_it(text, value, fixes):
    repaired = repair_json(text)
    assert repaired is not None
    assert repaired.value == value
    assert sorted(repaired.fixes) == sorted(fixes)


@pytest.mark.parametrize("text", ["", "hello", '{"a":', '{"a": nope}', '{"a": 1]'])
def test_repair_json_gives_up_on_what_has_no_safe_reading(text):
    assert repair_json(text) is None


def test_arguments_written_as_a_json_string_are_unwrapped():
    decoded = decode_arguments(json.dumps(json.dumps({"city": "Paris"})))
    assert decoded.value == {"city": "Paris"}
    assert decoded.fixes == [repair.STRING_ENCODED]
    # ... and a string holding broken JSON is repaired too
    decoded = decode_arguments(json.dumps("{'city': 'Paris'}"))
    assert decoded.value == {"city": "Paris"}
    assert decoded.fixes == [repair.STRING_ENCODED, repair.SINGLE_QUOTES]


def call(arguments, name="get_weather"):
    return ToolCall(id="call_1", name=name, arguments=arguments)


def test_a_valid_call_passes_untouched_under_every_policy():
    for policy in ("repair", "strict", "off"):
        verdict = CallChecker([WEATHER], policy).check(call('{"city": "Paris"}'))
        assert verdict.problem is None
        assert verdict.call == call('{"city": "Paris"}')


def test_repair_mends_the_arguments_and_says_what_it_did():
    verdict = CallChecker([WEATHER], "repair").check(call("{'city': 'Paris', days: 2"))
    assert verdict.repaired
    assert json.loads(verdict.call.arguments) == {"city": "Paris", "days": 2}
    assert verdict.call.id == "call_1"
    assert "single-quoted" in verdict.problem and "unquoted keys" in verdict.problem


def test_repair_fixes_a_tool_name_that_differs_only_in_spelling_style():
    verdict = CallChecker([WEATHER], "repair").check(call('{"city": "Oslo"}', name="Get-Weather"))
    assert verdict.call.name == "get_weather"
    assert "'Get-Weather' is 'get_weather'" in verdict.problem


@pytest.mark.parametrize(
    ("arguments", "name", "problem"),
    [
        ('{"days": 2}', "get_weather", "'city' is a required property"),
        ('{"city": 7}', "get_weather", "7 is not of type 'string' (at $.city)"),
        ('{"city": "Paris", "extra": 1}', "get_weather", "Additional properties"),
        ('{"city": "Paris"}', "get_time", "'get_time' was not declared (declared: get_weather)"),
        ("[1, 2]", "get_weather", "not a JSON object"),
        ("no json here", "get_weather", "arguments are not JSON"),
    ],
)
def test_what_repair_cannot_mend_is_left_for_a_re_ask(arguments, name, problem):
    verdict = CallChecker([WEATHER], "repair").check(call(arguments, name))
    assert verdict.call is None
    assert problem in verdict.problem


def test_strict_repairs_nothing():
    verdict = CallChecker([WEATHER], "strict").check(call("{'city': 'Paris'}"))
    assert verdict.call is None
    assert "single-quoted" in verdict.problem or "not JSON" in verdict.problem
    verdict = CallChecker([WEATHER], "strict").check(call('{"city": "x"}', name="GET_WEATHER"))
    assert verdict.call is None and "not declared" in verdict.problem


def test_a_call_that_did_not_parse_is_read_by_repair_and_refused_by_strict():
    broken = MalformedToolCall(
        body="{'name': 'get_weather', 'arguments': {'city': 'Paris'}}",
        raw="<tool_call>{'name': 'get_weather', 'arguments': {'city': 'Paris'}}</tool_call>",
    )
    verdict = CallChecker([WEATHER], "repair").check(broken)
    assert verdict.call.name == "get_weather"
    assert json.loads(verdict.call.arguments) == {"city": "Paris"}
    assert verdict.call.id.startswith("call_")
    refused = CallChecker([WEATHER], "strict").check(broken)
    assert refused.call is None and refused.tool == "get_weather"
    assert "did not parse" in refused.problem


def test_check_tools_names_the_tool_whose_schema_is_broken():
    check_tools([WEATHER])
    bad = ToolSpec(name="lookup", parameters={"type": "object", "properties": {"q": {"type": 5}}})
    with pytest.raises(BadRequest, match=r"tools\[1\]: tool 'lookup' .*not a valid JSON Schema"):
        check_tools([WEATHER, bad])
    with pytest.raises(BadRequest, match="declared twice"):
        check_tools([WEATHER, WEATHER])


def test_the_parser_hands_unparsable_calls_to_the_guardrails_only_when_they_check():
    text = "Sure. <tool_call>{'name': 'get_weather'}</tool_call>"
    tools = [WEATHER]
    for policy, expected in (("repair", MalformedToolCall), ("off", None)):
        request = ChatRequest(
            messages=[Message(role="user", content="hi")],
            max_tokens=50,
            tools=tools,
            tool_policy=policy,
        )
        parser = OutputParser.for_request(request, load_tool_format("json_tools"))
        outputs = parser.feed(text) + parser.finish()
        malformed = [o for o in outputs if isinstance(o, MalformedToolCall)]
        if expected:
            assert malformed and malformed[0].raw.startswith("<tool_call>")
        else:
            assert not malformed
            assert "".join(o.text for o in outputs).endswith("</tool_call>")


def test_a_validator_resolves_nothing_outside_its_schema():
    # check_tools refuses such a schema; the validator itself never fetches one either.
    schema = {"type": "object", "properties": {"q": {"$ref": "http://127.0.0.1:1/q.json"}}}
    verdict = CallChecker([ToolSpec(name="t", parameters=schema)], "repair").check(
        ToolCall(id="call_1", name="t", arguments='{"q": "x"}')
    )
    assert verdict.call is None
    assert "reference that cannot be resolved" in verdict.problem


def test_references_inside_the_schema_resolve_and_outside_ones_are_refused_by_path():
    inside = {
        "type": "object",
        "properties": {"q": {"$ref": "#/$defs/Q"}},
        "$defs": {"Q": {"type": "integer"}},
    }
    check_tools([ToolSpec(name="t", parameters=inside)])
    verdict = CallChecker([ToolSpec(name="t", parameters=inside)], "strict").check(
        ToolCall(id="call_1", name="t", arguments='{"q": "x"}')
    )
    assert "'x' is not of type 'integer'" in verdict.problem
    for ref, problem in (("file:///etc/hosts", "outside"), ("#/$defs/R", "nothing")):
        schema = {"type": "object", "properties": {"q": {"anyOf": [{"$ref": ref}]}}}
        with pytest.raises(BadRequest, match=rf"{problem}.*") as refused:
            check_tools([ToolSpec(name="t", parameters=schema)])
        assert "$.properties.q.anyOf[0].$ref" in str(refused.value)
    # A "$ref" key inside data (const, enum) is data, not a reference.
    check_tools([ToolSpec(name="t", parameters={"const": {"$ref": "http://x"}})])
