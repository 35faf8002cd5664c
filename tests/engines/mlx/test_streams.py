"""`concurrency: auto`: as many streams as keep the window one stream alone gets, capped."""

from __future__ import annotations

from engines.mlx.sizing import AUTO_STREAM_WINDOW, auto_streams, size_context, streams

PER_TOKEN = 1000
WEIGHTS = 10_000_000


def sized(left: int | None, window: int | str = "auto", wanted: int | str = "auto") -> int:
    return streams("m", wanted, window, 8192, WEIGHTS, PER_TOKEN, left, lambda n: n, 8)


def test_without_a_budget_auto_takes_the_cap() -> None:
    assert sized(None) == 8
    assert auto_streams("cpu") == 8 and auto_streams("gpu (cuda)") == 32


def test_auto_takes_as_many_whole_windows_as_the_budget_holds() -> None:
    window_bytes = 8192 * PER_TOKEN
    assert sized(WEIGHTS + 3 * window_bytes + 10) == 3
    assert sized(WEIGHTS + 100 * window_bytes) == 8
    # A fixed window: streams of 2048 tokens each.
    assert sized(WEIGHTS + 5 * 2048 * PER_TOKEN, window=2048) == 5


def test_where_one_window_does_not_fit_auto_is_one_and_a_number_is_kept() -> None:
    assert sized(WEIGHTS + 10) == 1
    assert sized(WEIGHTS + 100 * 8192 * PER_TOKEN, wanted=2) == 2


def test_a_long_trained_window_is_shared_out_rather_than_served_serially() -> None:
    # A 131072-token window fits three times: kept whole, auto would be 3 (1 with parked
    # sessions' windows counted too); shared out, each stream keeps at least 32768 tokens.
    trained, left = 131072, WEIGHTS + 3 * 131072 * PER_TOKEN

    def with_cap(cap: int) -> int:
        return streams("m", "auto", "auto", trained, WEIGHTS, PER_TOKEN, left, lambda n: n, cap)

    assert with_cap(8) == 8
    assert with_cap(32) == 12
    window = size_context("m", "auto", trained, WEIGHTS, PER_TOKEN, left, with_cap(32))
    assert AUTO_STREAM_WINDOW <= window < trained
    # A fixed window is kept whole: as many streams as hold it.
    fixed = streams("m", "auto", 131072, trained, WEIGHTS, PER_TOKEN, left, lambda n: n, 32)
    assert fixed == 3
