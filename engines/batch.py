"""Batches: how a runner's thread advances every admitted request one step at a time.

A runner admits up to `concurrency` jobs into its engine's batch and calls `step()` until
the batch is empty. The MLX engine batches for real (mlx-lm's `BatchGenerator`: one forward
pass decodes every sequence); `SerialBatch` gives any engine with a `generate()` generator
the same interface by stepping each request's generator in turn. Every batch has a
thread-safe `wake()`: the runner calls it from the event loop when it admits a job, so a
batch whose `step()` waits on I/O (engine upstream's) takes the job at once.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Protocol

from engines.errors import BadRequest
from schemas.canonical import ChatRequest, Finished, Output

# One item of a step: whose output it is, and the output (or the error that ended it).
Step = tuple[Hashable, Output | Exception]


class Batch(Protocol):
    @property
    def active(self) -> int:
        """Requests in the batch that have not finished."""
        ...

    def add(self, key: Hashable, request: ChatRequest, cancelled: Callable[[], bool]) -> None:
        """Admit a request; its outputs come out of `step()` under `key`."""
        ...

    def step(self) -> list[Step]:
        """Advance every active request by (about) one token.

        Each request ends with exactly one `Finished` or one exception; a request whose
        `cancelled()` turned true ends within a step with `Finished(stop_reason="cancelled")`.
        """
        ...

    def wake(self) -> None:
        """Thread-safe, from the event loop: a `step()` blocked waiting for outputs returns
        to take a job just admitted. A no-op for a batch whose `step()` never blocks."""
        ...


class SerialBatch:
    """Round-robin over per-request `generate()` generators: correct, not faster."""

    def __init__(self, generate: Callable[[ChatRequest, Callable[[], bool]], Iterator[Output]]):
        self._generate = generate
        self._streams: dict[Hashable, Iterator[Output]] = {}

    @property
    def active(self) -> int:
        return len(self._streams)

    def add(self, key: Hashable, request: ChatRequest, cancelled: Callable[[], bool]) -> None:
        self._streams[key] = self._generate(request, cancelled)

    def wake(self) -> None:
        """Nothing to wake: `step()` never waits for arrivals."""

    def step(self) -> list[Step]:
        out: list[Step] = []
        for key, stream in list(self._streams.items()):
            try:
                output = next(stream)
            except StopIteration:
                output = RuntimeError("engine ended without a Finished output")
            except Exception as error:  # this request's failure, not the batch's
                output = error
            out.append((key, output))
            if isinstance(output, Finished | Exception):
                del self._streams[key]
        return out


def text_refused(refusal: str) -> SerialBatch:
    """The batch of a model that makes no text (embed, rerank, speech to or from text): a
    runner refuses chat before it queues; one that still lets one through meets `refusal`
    as a 400 when it is added."""

    def refuse(request: ChatRequest, cancelled: Callable[[], bool]) -> Iterator[Output]:
        raise BadRequest(refusal)

    return SerialBatch(refuse)
