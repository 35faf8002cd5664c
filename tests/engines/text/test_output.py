"""Tool calls cut out of a text stream by an mlx-lm tool parser, and stops on the answer only."""

import json

import pytest

from engines.text.output import OutputParser, load_tool_format
from schemas.canonical import TextDelta, ToolCallOutput

CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


def parse(pieces, stops=(), tools=True, parser="json_tools"):
    out = OutputParser(list(stops), load_tool_format(parser) if tools else None, [])
    outputs = [o for piece in pieces for o in out.feed(piece)] + out.finish()
    text = "".join(o.text for o in outputs if isinstance(o, TextDelta))
    calls = [o.call for o in outputs if isinstance(o, ToolCallOutput)]
    return text, calls, out


def split_every(text, n):
    return [text[i : i + n] for i in range(0, len(text), n)]


@pytest.mark.parametrize("size", [1, 3, 7, 200])
def test_a_call_split_anywhere_becomes_one_tool_call(size):
    text, calls, parser = parse(split_every("Let me check. " + CALL, size))
    assert text == "Let me check. "
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert calls[0].id.startswith("call_") and parser.tool_calls == 1


def test_two_calls_and_text_between():
    text, calls, _ = parse([CALL, " and ", CALL.replace("Paris", "Oslo")])
    assert text == " and "
    assert [json.loads(c.arguments)["city"] for c in calls] == ["Paris", "Oslo"]


def test_call_ended_by_end_of_sequence_without_closing_tag():
    text, calls, _ = parse([CALL.removesuffix("</tool_call>")])
    assert text == "" and calls[0].name == "get_weather"


def test_malformed_call_comes_out_as_the_text_that_was_said():
    broken = '<tool_call>{"name": get_weather}</tool_call>'
    text, calls, _ = parse([broken])
    assert calls == [] and text == broken


def test_without_tools_in_the_request_markers_are_plain_text():
    text, calls, _ = parse([CALL], tools=False)
    assert text == CALL and calls == []


def test_stop_strings_apply_to_the_answer_not_inside_a_call():
    text, calls, _ = parse(["Sure: ", CALL, " Paris is nice"], stops=["Paris"])
    assert text == "Sure:  " and len(calls) == 1


def test_an_unknown_parser_name_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown tool parser 'nope'"):
        load_tool_format("nope")
