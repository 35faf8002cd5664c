"""Stop strings that hold across delta boundaries and are never emitted."""

from __future__ import annotations


class StopMatcher:
    """Feed text deltas; get back only text that can no longer be part of a stop string.

    The tail that could still grow into a stop string is held back until the next delta
    settles it, so a stop split over two tokens is caught and none of it reaches the client.
    """

    def __init__(self, stops: list[str]) -> None:
        self._stops = [s for s in stops if s]
        self._held = ""
        self.stopped = False

    def feed(self, delta: str) -> str:
        """The part of `held + delta` that is safe to emit; sets `stopped` on a match."""
        if not self._stops:  # no stop strings asked for: every token of most requests
            return delta
        if self.stopped:
            return ""
        text = self._held + delta
        cut = min((i for i in (text.find(s) for s in self._stops) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            self._held = ""
            return text[:cut]
        keep = max(partial_suffix(text, stop) for stop in self._stops)
        self._held = text[len(text) - keep :]
        return text[: len(text) - keep]

    def flush(self) -> str:
        """What was held back, once generation ended without a stop string."""
        held, self._held = self._held, ""
        return "" if self.stopped else held


def partial_suffix(text: str, marker: str) -> int:
    """Length of the longest tail of `text` that is a proper prefix of `marker`."""
    # Such a tail starts with the marker's first character, in the last len(marker) - 1
    # characters: most tokens' text has none there (every token of every stream asks).
    if len(marker) < 2 or marker[0] not in text[1 - len(marker) :]:
        return 0
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0
