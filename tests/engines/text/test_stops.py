from engines.text.stops import StopMatcher


def run(stops, deltas):
    matcher = StopMatcher(stops)
    out = [matcher.feed(d) for d in deltas]
    return "".join(out) + matcher.flush(), matcher.stopped


def test_stop_split_across_deltas_is_caught_and_never_emitted():
    assert run(["END"], ["hello E", "N", "D and more"]) == ("hello ", True)


def test_text_that_only_looked_like_a_stop_is_released():
    assert run(["END"], ["a E", "N", "x"]) == ("a ENx", False)


def test_held_tail_is_flushed_when_generation_ends():
    assert run(["END"], ["tail E"]) == ("tail E", False)


def test_earliest_of_several_stops_wins():
    assert run(["bb", "a"], ["xxbba"]) == ("xx", True)


def test_no_stops_passes_everything_through():
    assert run([], ["a", "b"]) == ("ab", False)


def test_nothing_is_emitted_after_a_stop():
    matcher = StopMatcher(["."])
    assert matcher.feed("one. two") == "one"
    assert matcher.feed("three") == ""
    assert matcher.flush() == ""
