"""context.tools_overflow: drop_unused, counted on the scripted engine's real rendered prompt."""

from msgspec.structs import replace

from engines.policy.tools_fit import drop_unused_tools
from engines.scripted import ScriptedEngine
from schemas.canonical import ChatRequest, Message, OutputControls, ToolCall, ToolSpec
from schemas.config import ScriptConfig

ENGINE = ScriptedEngine(ScriptConfig())
count = ENGINE.count_prompt
PARAMETERS = {"type": "object", "properties": {"query": {"type": "string"}}}
TOOLS = [
    ToolSpec(name=f"tool_{i}", description="does one thing " + "d" * 80, parameters=PARAMETERS)
    for i in range(12)
]
ASK = [Message(role="user", content="what time is it?")]


def request(messages=ASK, tools=TOOLS, **extra) -> ChatRequest:
    return ChatRequest(
        messages=messages, max_tokens=16, tools=tools, tools_overflow="drop_unused", **extra
    )


def names(asked: ChatRequest) -> list[str]:
    return [t.name for t in asked.tools]


def test_tools_that_fit_are_left_alone():
    asked = request()
    assert drop_unused_tools("m", asked, count, window=count(asked) + 16) is asked


def test_the_first_declared_tools_that_fit_stay_and_the_rest_are_named():
    asked = request()
    window = count(request(tools=TOOLS[:5])) + 16  # room for five tools and the answer
    fitted = drop_unused_tools("m", asked, count, window)
    assert names(fitted) == names(request(tools=TOOLS[:5]))
    assert fitted.dropped_tools == tuple(t.name for t in TOOLS[5:])
    assert count(fitted) + 16 <= window
    assert count(request(tools=TOOLS[:6])) + 16 > window  # one more would not have fitted


def test_tools_the_conversation_called_stay_whatever_their_place():
    called = Message(
        role="assistant",
        content="",
        tool_calls=[ToolCall(id="c1", name="tool_9", arguments='{"query": "x"}')],
    )
    result = Message(role="tool", content="12:00", tool_call_id="c1")
    messages = [*ASK, called, result, Message(role="user", content="and now?")]
    asked = request(messages)
    window = count(request(messages, tools=[TOOLS[9]])) + 16  # room for the used one alone
    fitted = drop_unused_tools("m", asked, count, window)
    assert names(fitted) == ["tool_9"]
    assert "tool_9" not in fitted.dropped_tools and len(fitted.dropped_tools) == 11


def test_a_forced_tool_stays_and_keeps_the_declared_order():
    asked = request(controls=OutputControls(tool_choice="required", forced_tool="tool_11"))
    window = count(request(tools=[TOOLS[0], TOOLS[11]])) + 16
    fitted = drop_unused_tools("m", asked, count, window)
    assert names(fitted) == ["tool_0", "tool_11"]


def test_too_long_without_any_unused_tool_keeps_the_used_ones_for_context_overflow():
    # Nothing but the used tool left: the request goes on to `context.overflow` as it is.
    asked = request(controls=OutputControls(tool_choice="required", forced_tool="tool_3"))
    fitted = drop_unused_tools("m", asked, count, window=10)
    assert names(fitted) == ["tool_3"] and len(fitted.dropped_tools) == 11
    only = replace(asked, tools=[TOOLS[3]])
    assert drop_unused_tools("m", only, count, window=10) is only  # every tool in use
