"""context.overflow: truncate, counted on the scripted engine's real rendered prompt."""

import pytest

from engines.errors import ContextOverflow
from engines.policy.truncation import fit_messages
from engines.scripted import ScriptedEngine
from schemas.canonical import ChatRequest, Message
from schemas.config import ScriptConfig

ENGINE = ScriptedEngine(ScriptConfig())
count = ENGINE.count_prompt


def conversation(turns: int, size: int = 40) -> list[Message]:
    messages = [Message(role="system", content="Be brief.")]
    for i in range(turns):
        messages.append(Message(role="user", content=f"question {i} " + "q" * size))
        messages.append(Message(role="assistant", content=f"answer {i} " + "a" * size))
    messages.append(Message(role="user", content="the latest question"))
    return messages


def request(messages, max_tokens=16) -> ChatRequest:
    return ChatRequest(messages=messages, max_tokens=max_tokens, overflow="truncate")


def test_a_prompt_that_fits_is_left_alone():
    asked = request(conversation(2))
    assert fit_messages("m", asked, count, window=4096) is asked


def test_the_oldest_turns_go_first_and_the_system_and_latest_message_stay():
    asked = request(conversation(6))
    full = count(asked)
    window = full - 100
    fitted = fit_messages("m", asked, count, window)
    assert fitted.messages[0].content == "Be brief."
    assert fitted.messages[-1].content == "the latest question"
    assert fitted.truncated_messages == len(asked.messages) - len(fitted.messages)
    assert fitted.truncated_messages % 2 == 0  # whole turns: user and assistant together
    assert fitted.messages[1].role == "user"  # a kept conversation starts at a user turn
    assert count(fitted) + 16 <= window
    # As few as possible: keeping one more turn would not have fitted.
    kept = len(fitted.messages)
    one_more = asked.messages[:1] + asked.messages[-(kept - 1) - 2 :]
    assert count(request(one_more)) + 16 > window


def test_a_tool_result_is_never_kept_without_its_call():
    messages = [
        Message(role="user", content="weather? " + "x" * 200),
        Message(role="assistant", content="", tool_calls=[]),
        Message(role="tool", content="sunny " + "y" * 200, tool_call_id="c1"),
        Message(role="user", content="and tomorrow?"),
    ]
    asked = request(messages)
    fitted = fit_messages("m", asked, count, count(asked) - 50)
    assert [m.role for m in fitted.messages] == ["user"]
    assert fitted.truncated_messages == 3


def test_too_long_even_alone_is_an_overflow_with_the_counts():
    messages = [Message(role="system", content="s"), Message(role="user", content="z" * 500)]
    asked = request(messages)
    with pytest.raises(ContextOverflow) as refused:
        fit_messages("m", asked, count, window=200)
    assert refused.value.window == 200
    assert refused.value.prompt_tokens == count(asked)
    assert "the context window is 200" in refused.value.message


def test_the_shortest_conversation_is_served_with_less_room_rather_than_refused():
    messages = [Message(role="user", content="old " * 50), Message(role="user", content="new")]
    asked = request(messages, max_tokens=500)
    shortest = count(request(messages[1:]))
    fitted = fit_messages("m", asked, count, window=shortest + 10)
    assert [m.content for m in fitted.messages] == ["new"]
