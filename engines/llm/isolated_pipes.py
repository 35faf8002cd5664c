"""What comes back from a model's own process (`isolation: process`), seen from the
gateway's side: the child's batch as the runner's thread steps it (`IsolatedBatch`), and the
child's events, logged here as the gateway's own (`relay_events`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable
from multiprocessing.connection import Connection

from engines.batch import Step
from engines.llm.isolated_child import unpack_error
from engines.log import emit
from schemas.canonical import ChatRequest, Finished


def relay_events(events: Connection) -> None:
    """Log the child's events as the gateway's own, until the child is gone."""
    with events:
        while True:
            try:
                event, level = events.recv()
            except (EOFError, OSError):
                return
            emit(event, level=level)


class IsolatedBatch:
    """The batch in the child, seen from the runner's thread: `add` and cancellations go
    down the pipe; `step` returns the next step's outputs the child sent (waiting for them
    with the GIL released)."""

    def __init__(
        self,
        pipe: Connection,
        gone: Callable[[], Exception],
        receive: Callable[[Connection], object] = Connection.recv,
    ) -> None:
        self._pipe = pipe
        self._receive = receive  # a sharded model's waits on its ranks too
        self._gone = gone  # the error to raise when the child is no more
        self._keys: dict[int, tuple[Hashable, Callable[[], bool]]] = {}
        self._told: set[int] = set()  # cancellations already sent
        self._adds: list[int] = []  # admitted since the last step
        self._next = 0

    @property
    def active(self) -> int:
        return len(self._keys)

    def _exchange(self) -> tuple[str, object]:
        """Send what the runner admitted and cancelled since the last step; the next
        message the child sent back."""
        if self._adds:
            self._pipe.send(("add", self._adds))
            self._adds = []
        gone = [i for i, (_, cancel) in self._keys.items() if i not in self._told and cancel()]
        if gone:
            self._told.update(gone)
            self._pipe.send(("cancel", gone))
        return self._receive(self._pipe)

    def add(self, key: Hashable, request: ChatRequest, cancelled: Callable[[], bool]) -> None:
        """The request goes down at once, to be prepared there while the rest of its burst
        arrives; it joins at the next step: the requests the runner admits between two steps
        (a burst it gathered) join the child's batch as one group."""
        self._next += 1
        self._keys[self._next] = (key, cancelled)
        with contextlib.suppress(OSError):  # the child is gone: the next step says so (503)
            self._pipe.send(("prepare", [(self._next, request)]))
        self._adds.append(self._next)

    def wake(self) -> None:
        """Nothing to wake: the runner never interrupts a step of the child's batch."""

    def step(self) -> list[Step]:
        try:
            kind, value = self._exchange()
        except (EOFError, OSError):  # every request in the batch ends with a 503
            raise self._gone() from None
        if kind == "failed":
            name, message, child_traceback = value
            error = RuntimeError(f"{name}: {message}")
            error.add_note(f"in the model's process:\n{child_traceback}")
            raise error
        out: list[Step] = []
        for i, output in value:
            if isinstance(output, tuple):  # a packed exception: this request's failure
                output = unpack_error(output)
            out.append((self._keys[i][0], output))
            if isinstance(output, Finished | Exception):
                del self._keys[i]
                self._told.discard(i)
        return out
