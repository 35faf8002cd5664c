"""Per-key limits: requests, tokens and audio seconds per minute, requests in flight, a token
budget per period (`server.api_keys[].limits`).

One `KeyLimiter` per app keeps each key's counts under its label; the limits themselves are
passed in at each check from the config of the moment, so a reload retunes a key's limits
without losing what it has already used. Everything here runs on the event loop.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict, deque
from collections.abc import Callable

from engines.errors import Allowance, RateLimited
from engines.log import emit
from schemas.config import KeyLimits, seconds
from schemas.events import LimitReached

WINDOW_S = 60.0  # rpm, tpm and audio_per_minute count the last minute, sliding
# Told to a client refused for `concurrent`: a request in flight ends at its own pace.
CONCURRENT_RETRY_S = 1.0


class KeyUsage:
    """One key's counts: recent requests and tokens, requests in flight, its budget."""

    def __init__(self) -> None:
        self.requests: deque[float] = deque()  # when each request of the last minute came
        self.tokens: deque[list[float]] = deque()  # [second, tokens] of the last minute
        self.audio: deque[list[float]] = deque()  # [second, audio seconds] of the last minute
        self.in_flight = 0
        self.period_s = 0.0  # the budget's period, as last configured (0: no budget)
        self.period = -1  # which period `spent` counts (multiples of it since the epoch)
        self.spent = 0

    def forget_before(self, now: float) -> None:
        while self.requests and self.requests[0] <= now - WINDOW_S:
            self.requests.popleft()
        while self.tokens and self.tokens[0][0] <= now - WINDOW_S:
            self.tokens.popleft()
        while self.audio and self.audio[0][0] <= now - WINDOW_S:
            self.audio.popleft()

    def tokens_used(self) -> int:
        return int(sum(n for _, n in self.tokens))

    def audio_used(self) -> float:
        return sum(n for _, n in self.audio)

    def budget_spent(self, wall: float) -> int:
        """Tokens spent in the budget's current period (0 at the start of a new one)."""
        if self.period_s:
            period = math.floor(wall / self.period_s)
            if period != self.period:
                self.period, self.spent = period, 0
        return self.spent


class KeyLimiter:
    """Admits each key's requests within its limits and counts the tokens they spend."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock
        self._wall = wall
        self._usage: defaultdict[str, KeyUsage] = defaultdict(KeyUsage)

    def admit(self, label: str, limits: KeyLimits) -> Callable[[], None]:
        """Count a request of the key `label`, or raise `RateLimited` for the first limit it
        is past (concurrent, rpm, tpm, audio, budget). Returns what ends the request's slot."""
        usage = self._usage[label]
        now = self._clock()
        usage.forget_before(now)
        refused = self._refusal(usage, limits, now)
        if refused is not None:
            emit(
                LimitReached(
                    key_label=label, limit=refused.limit, retry_after_s=refused.retry_after
                ),
                level="warning",
            )
            raise refused
        if limits.rpm is not None:
            usage.requests.append(now)
        usage.in_flight += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                usage.in_flight -= 1

        return release

    def spend(self, label: str, tokens: int, audio_seconds: float = 0.0) -> None:
        """`tokens` more of the key's (prompt or completion), counted as they happen, and
        the seconds of audio a finished request transcribed or spoke."""
        usage = self._usage[label]
        second = math.floor(self._clock())
        for counts, amount in ((usage.tokens, tokens), (usage.audio, audio_seconds)):
            if not amount:
                continue
            if counts and counts[-1][0] == second:
                counts[-1][1] += amount
            else:
                counts.append([second, amount])
        usage.budget_spent(self._wall())  # a new period starts from nothing
        usage.spent += tokens

    def allowances(
        self, label: str, limits: KeyLimits
    ) -> tuple[Allowance | None, Allowance | None]:
        """What is left of the key's rpm and tpm now (None where it sets none): the headers
        of an answer that was not refused."""
        return self._allowances(self._usage[label], limits, self._clock())

    @staticmethod
    def _allowances(
        usage: KeyUsage, limits: KeyLimits, now: float
    ) -> tuple[Allowance | None, Allowance | None]:
        requests = tokens = None
        if limits.rpm is not None:
            reset = usage.requests[0] + WINDOW_S - now if usage.requests else 0.0
            requests = Allowance(limits.rpm, max(0, limits.rpm - len(usage.requests)), reset)
        if limits.tpm is not None:
            reset = usage.tokens[0][0] + WINDOW_S - now if usage.tokens else 0.0
            tokens = Allowance(limits.tpm, max(0, limits.tpm - usage.tokens_used()), reset)
        return requests, tokens

    def _refusal(self, usage: KeyUsage, limits: KeyLimits, now: float) -> RateLimited | None:
        """The first limit the key is past, as the 429 to answer with; None when none is."""
        wall = self._wall()
        requests, tokens = self._allowances(usage, limits, now)
        usage.period_s = seconds(limits.budget.period) if limits.budget else 0.0
        spent = usage.budget_spent(wall)
        budget = limits.budget
        # (limit, whether the key is past it, the message, seconds until it may retry)
        checks = [
            (
                "concurrent",
                limits.concurrent is not None and usage.in_flight >= limits.concurrent,
                f"has {usage.in_flight} requests in flight (limits.concurrent "
                f"{limits.concurrent}); retry when one ends",
                CONCURRENT_RETRY_S,
            ),
            (
                "rpm",
                requests is not None and requests.remaining == 0,
                f"made {limits.rpm} requests in the last minute (limits.rpm {limits.rpm})",
                requests and requests.reset_s,
            ),
            (
                "tpm",
                tokens is not None and tokens.remaining == 0,
                f"used {usage.tokens_used()} tokens in the last minute (limits.tpm {limits.tpm})",
                tokens and tokens.reset_s,
            ),
        ]
        if limits.audio_per_minute is not None:
            allowed = seconds(limits.audio_per_minute)
            checks.append(
                (
                    "audio_per_minute",
                    usage.audio_used() >= allowed,
                    f"sent or asked for {usage.audio_used():.0f} s of audio in the last minute "
                    f"(limits.audio_per_minute {limits.audio_per_minute})",
                    usage.audio[0][0] + WINDOW_S - now if usage.audio else 0.0,
                )
            )
        if budget is not None:
            reset = (usage.period + 1) * usage.period_s - wall
            checks.append(
                (
                    "budget",
                    spent >= budget.tokens,
                    f"spent {spent} tokens of its budget of {budget.tokens} per "
                    f"{budget.period} (limits.budget); it renews in {reset:.0f}s",
                    reset,
                )
            )
        for limit, past, message, retry in checks:
            if past:
                if limit == "budget":
                    tokens = Allowance(budget.tokens, 0, retry)
                elif limit in ("rpm", "tpm", "audio_per_minute"):
                    message += f"; retry in {retry:.0f}s"
                return RateLimited(
                    f"this API key {message}",
                    limit=limit,
                    retry_after=retry,
                    requests=requests,
                    tokens=tokens,
                )
        return None
