"""Reasoning: the thinking split from the answer wherever the stream breaks, stop strings kept
out of it, and the efforts read from YAML."""

import pytest

from engines.text.output import OutputParser
from engines.text.reasoning import ReasoningSplitter, ThinkMarkers, effort_of, opens_thinking
from schemas.canonical import ChatRequest, Message, ReasoningDelta, TextDelta


def split(pieces, opened=False):
    splitter = ReasoningSplitter(ThinkMarkers("<think>", "</think>"), opened)
    out = [p for piece in pieces for p in splitter.feed(piece)] + splitter.finish()
    thought = "".join(t for r, t in out if r)
    said = "".join(t for r, t in out if not r)
    return thought, said


@pytest.mark.parametrize("size", [1, 2, 5, 100])
def test_reasoning_is_split_from_the_answer_wherever_the_pieces_break(size):
    text = "<think>\nhmm, the user greets\n</think>\n\nHello!"
    pieces = [text[i : i + size] for i in range(0, len(text), size)]
    assert split(pieces) == ("hmm, the user greets", "Hello!")


def test_a_prompt_that_opened_the_think_block_starts_in_reasoning():
    assert opens_thinking("<|im_start|>assistant\n<think>\n", ThinkMarkers("<think>", "</think>"))
    assert split(["pondering</think>", "Answer"], opened=True) == ("pondering", "Answer")


def test_stop_strings_never_match_inside_reasoning_and_off_hides_it():
    for effort, shown in (("high", "stop here"), ("off", "")):
        req = ChatRequest(
            messages=[Message(role="user", content="hi")],
            max_tokens=50,
            stop=["stop here"],
            reasoning=effort,
        )
        parser = OutputParser.for_request(req, None)
        outputs = parser.feed("<think>stop here</think>Hello stop here and more") + parser.finish()
        assert "".join(o.text for o in outputs if isinstance(o, ReasoningDelta)) == shown
        assert "".join(o.text for o in outputs if isinstance(o, TextDelta)) == "Hello "
        assert parser.stopped


def test_efforts_read_from_yaml():
    assert effort_of(False) == "off" and effort_of(True) == "medium"
    assert effort_of("low") == "low" and effort_of(None) == "off"
