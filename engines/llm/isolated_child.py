"""The model's own process under `isolation: process`: an `MLXEngine` that answers the
gateway's calls on one pipe and steps its batch from the other (engines/llm/isolated.py is
the gateway's side). Errors cross the pipes packed, so gateway errors arrive whole.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from pathlib import Path

from engines import timeline
from engines.cache import CacheDir
from engines.llm.engine import MLXEngine
from engines.log import RELAY
from engines.platform import PlatformPath
from schemas.canonical import Finished
from schemas.config import ModelConfig
from schemas.events import Event


def pack_error(error: BaseException) -> tuple:
    """An exception as its class, args and attributes: gateway errors rebuild from these
    even where their constructor takes other arguments than their args (pickle's way)."""
    return type(error), error.args, dict(vars(error))


def unpack_error(packed: tuple) -> BaseException:
    cls, args, attributes = packed
    error = cls.__new__(cls)
    error.args = args
    vars(error).update(attributes)
    return error


def serve(
    control: Connection,
    batch_pipe: Connection,
    events: Connection,
    model: ModelConfig,
    platform: PlatformPath,
    base_dir: Path | None,
    draft: ModelConfig | None,
    disk: CacheDir | None,
) -> None:
    """The child: answer calls, and step the batch whenever it holds a request. Its events
    (the disk tier's, from its writer thread too) go to the gateway on `events`."""
    os.dup2(2, 1)  # stdout is the gateway's event stream
    sys.stdout = sys.stderr
    RELAY.set(relay_to(events))  # before the engine: threads it starts copy this context
    engine = MLXEngine(model, platform, base_dir, draft, disk)
    batch = None
    cancelled: set[int] = set()
    arrivals = Arrivals()
    while True:
        stepping = batch is not None and batch.active
        for pipe in wait([control, batch_pipe], timeout=0 if stepping else None):
            # Everything that arrived, before the next step: a burst of adds joins as one
            # group (one prefill), as it does on the gateway's own thread.
            while True:
                try:
                    message = pipe.recv()
                except EOFError:  # the gateway is gone
                    return
                if pipe is control:
                    if message[0] == "stop":
                        engine.unload()
                        return
                    control.send(answer(engine, message))
                else:
                    batch = _take(engine, batch, cancelled, batch_pipe, message, arrivals)
                if not pipe.poll():
                    break
        if not (batch is not None and batch.active):
            continue
        try:
            if timeline.ON:
                timeline.mark("child step", batch.active)
            steps = batch.step()
            if timeline.ON:
                timeline.mark("child stepped", len(steps))
        except Exception as error:  # the batch broke: the runner ends every request in it
            batch = None
            detail = "".join(traceback.format_exception(error))
            batch_pipe.send(("failed", (type(error).__name__, str(error), detail)))
            continue
        if steps:
            packed = [(i, pack_error(o) if isinstance(o, Exception) else o) for i, o in steps]
            if timeline.ON:  # before the send: the gateway may read it before this goes on
                timeline.mark("child sends", len(steps))
            batch_pipe.send(("steps", packed))
            for i, output in steps:
                if isinstance(output, Finished | Exception):
                    cancelled.discard(i)


def relay_to(events: Connection) -> Callable[[Event, str], None]:
    """Send each event and its level to the gateway; from any thread, one at a time."""
    lock = threading.Lock()

    def relay(event: Event, level: str) -> None:
        # OSError: the gateway is gone, nobody is left to tell.
        with lock, contextlib.suppress(OSError):
            events.send((event, level))

    return relay


class Arrivals:
    """Requests prepared (rendered, tokenized, given their sampler and parser) as each
    arrives, while the gateway's event loop takes in the rest of their burst, then joined to
    the batch together when the gateway's runner steps. Preparing at the join instead put a
    128-request burst's rendering (~1 ms each on an H200's host) between its last arrival and
    its prefill."""

    def __init__(self) -> None:
        self._waiting: dict[int, tuple] = {}  # id -> (request, its Prepared or the error)

    def prepare(self, engine: MLXEngine, requests: list[tuple[int, object]]) -> None:
        for i, request in requests:
            try:
                self._waiting[i] = (request, engine.prepare(request))
            except Exception as error:  # refused at its join, as before (past the window)
                self._waiting[i] = (request, error)

    def join(self, batch, ids: list[int], cancelled: set[int]) -> list[tuple[int, tuple]]:
        """Add the prepared requests to `batch`; those refused, with their packed errors."""
        refused = []
        for i in ids:
            request, prepared = self._waiting.pop(i)
            if isinstance(prepared, Exception):  # refused when it was prepared
                refused.append((i, pack_error(prepared)))
                continue
            try:
                batch.add(i, request, lambda i=i: i in cancelled, prepared)
            except Exception as error:  # this request's alone (a prompt past the window)
                refused.append((i, pack_error(error)))
        return refused

    def clear(self) -> None:
        self._waiting.clear()


def _take(
    engine: MLXEngine,
    batch,
    cancelled: set[int],
    pipe: Connection,
    message: tuple,
    arrivals: Arrivals,
):
    """One message of the batch pipe, in the child; the batch it leaves."""
    kind = message[0]
    if kind == "open":
        cancelled.clear()
        arrivals.clear()
        return engine.open_batch()
    if kind == "cancel":
        cancelled.update(message[1])
    elif kind == "prepare":
        arrivals.prepare(engine, message[1])
    elif kind == "add" and (refused := arrivals.join(batch, message[1], cancelled)):
        pipe.send(("steps", refused))
    return batch


def answer(engine: MLXEngine, message: tuple) -> tuple[bool, object]:
    """A call of the gateway's on the engine: `(True, value)`, or `(False, packed error)`."""
    name, *args = message
    try:
        return True, getattr(engine, name)(*args)
    except Exception as error:
        return False, pack_error(error)
