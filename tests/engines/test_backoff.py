"""The restart schedule shared by model processes (`engines.backoff`)."""

from engines.backoff import MAX_S, STEADY_S, Backoff


def delays(backoff: Backoff, runs: list[float]) -> list[float]:
    return [backoff.next_delay(ran_s) for ran_s in runs]


def test_quick_exits_double_the_wait_up_to_the_cap():
    assert delays(Backoff(), [1.0] * 9) == [1, 2, 4, 8, 16, 32, MAX_S, MAX_S, MAX_S]


def test_a_steady_run_starts_the_count_again():
    backoff = Backoff()
    assert delays(backoff, [1.0, 0.0, 0.0]) == [1, 2, 4]
    assert backoff.next_delay(STEADY_S) == 1
    assert backoff.attempt == 1


def test_at_once_first_waits_nothing_the_first_time_only():
    backoff = Backoff(at_once_first=True)
    assert delays(backoff, [5.0, 5.0, 5.0, STEADY_S + 1, 5.0]) == [0, 1, 2, 0, 1]


def test_reset_after_a_success_starts_again_at_the_first_wait():
    backoff = Backoff()
    assert delays(backoff, [0.0, 0.0, 0.0]) == [1, 2, 4]
    backoff.reset()
    assert backoff.next_delay(0.0) == 1
