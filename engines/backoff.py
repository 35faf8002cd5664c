"""How long a model that keeps failing waits before it is tried again.

One schedule for every such retry (a `process:` model's server program and an MLX model's
`isolation: process` child that exit, an on-demand model that failed to load): 1 s, then
2, 4 ... up to MAX_S while each run ends within STEADY_S of its start; a run that lasted
STEADY_S (or a success, `reset`) starts the count again, so a crash after a day of serving
costs no long wait while a crash loop does not spin.
"""

from __future__ import annotations

FIRST_S = 1.0
MAX_S = 60.0
STEADY_S = 60.0  # a run this long resets the count


class Backoff:
    """The delays before successive starts. `at_once_first`: the first start after a
    steady run waits nothing (a process whose state is reloaded in seconds)."""

    def __init__(self, *, at_once_first: bool = False) -> None:
        self._at_once_first = at_once_first
        self.attempt = 0  # starts since the last steady run, this one included

    def reset(self) -> None:
        """It worked: the next failure waits as the first did."""
        self.attempt = 0

    def next_delay(self, ran_s: float) -> float:
        """The wait before starting again a process that ran `ran_s` seconds and exited
        (0 for a start that failed before it ran)."""
        if ran_s >= STEADY_S:
            self.reset()
        self.attempt += 1
        doublings = self.attempt - 1 - self._at_once_first
        if doublings < 0:
            return 0.0
        return min(FIRST_S * 2.0**doublings, MAX_S)
