"""`isolation: process`: an MLX model's engine in a process of its own.

The batch step of a small model on a fast GPU is Python-bound (mlx-lm builds each step's
graph in Python; the GPU finishes first), so every bit of Python another thread runs is
taken from the step: on an H200, a second thread running Python cut the batch of a 1B
model to 0.25x its speed (bench/gpu/batch_ab.py, bench/RESULTS.md run 8), and the event
loop that turns outputs into SSE chunks is such a thread. In a process of its own the
batch has a GIL of its own: it steps on its own, between steps taking in what the gateway
sent (requests to add, cancellations), and sends each step's outputs back in one message.

Three pipes: `control` for calls answered in turn (load, count, trim, unload), `batch`
for the batch's traffic in both directions, which never waits on a call, and `events`
for the child's events (the disk tier's, written by a thread of the child's), which a
thread here logs and hands to the gateway's listeners (metrics) as its own. The
requests the runner admits between two steps go down in one message, so a burst joins the
child's batch as one group, as it would join the batch on the gateway's thread. The
child's stdout is the gateway's event stream: it writes to stderr instead.
"""

from __future__ import annotations

import contextlib
import contextvars
import multiprocessing
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path

from engines.backoff import Backoff
from engines.base import Capabilities, LoadInfo
from engines.cache import CacheDir
from engines.errors import ModelUnavailable
from engines.llm.distributed.group import Failure, RankGroup
from engines.llm.distributed.wire import RingRefused
from engines.llm.engine import MLXEngine
from engines.llm.isolated_child import serve, unpack_error
from engines.llm.isolated_pipes import IsolatedBatch, relay_events
from engines.log import emit
from engines.platform import PlatformPath
from schemas.canonical import ChatRequest, Output
from schemas.config import ModelConfig
from schemas.events import ModelAttached, ModelFailed

# A sharded model's group started this many times, each with new ports and a new key, before
# its load fails: a stranger who takes a rank's connection while the ring forms costs a start.
RING_STARTS = 3


class IsolatedEngine:
    """The Engine protocol, served by an `MLXEngine` in a child process.

    It wraps rather than inherits: every method is forwarded by name, so one it lacks is an
    AttributeError here, never `MLXEngine`'s own code running in the gateway with no
    weights. What needs no weights (the memory estimate, whether the template reasons) is
    answered by an `MLXEngine` held here that is never loaded.
    """

    capabilities = Capabilities(chat=True)

    def __init__(
        self,
        model: ModelConfig,
        platform: PlatformPath,
        base_dir: Path | None,
        draft: ModelConfig | None = None,
        disk: CacheDir | None = None,
        *,
        group: RankGroup | None = None,
    ) -> None:
        self._config = model
        self._disk = disk  # the disk tier, opened in the child (None: off)
        # A sharded model: this process is rank 0, the group starts and watches the others.
        self._group = group
        self._failure: Failure | None = None  # a rank that died or hung, until reported
        self._platform = platform
        self._base_dir = base_dir
        self._draft_config = draft
        self._unloaded = MLXEngine(model, platform, base_dir, draft)  # never loads
        self._process: multiprocessing.Process | None = None
        self._control: Connection | None = None
        self._batch_pipe: Connection | None = None
        self._relay: threading.Thread | None = None  # logs the child's events here
        self._calls = threading.RLock()  # one call at a time on the control pipe
        self._memory_left: int | None = None  # as the last load had it, for a restart
        self._started_at = 0.0  # when the child last started (monotonic)
        self._death_reported = False  # its last death is told (model_failed), not yet restarted
        self._backoff = Backoff(at_once_first=True)
        self._retry_at = 0.0

    def estimate_memory(self) -> int:
        return self._unloaded.estimate_memory()

    def reasons(self) -> bool:
        """Read from the model directory's tokenizer files: no weights needed."""
        return self._unloaded.reasons()

    def load(self, memory_left: int | None = None) -> LoadInfo:
        with self._calls:
            self._memory_left = memory_left
            info = self._load_group(memory_left) if self._group else self._load(memory_left)
            memory = info.memory_bytes
            if self._group is not None:  # every rank on this machine counts against its budget
                per_rank = [int(m) for m in info.detail["memory_per_rank"].split(",")]
                memory = self._group.on_this_machine(per_rank)
            return LoadInfo(
                context=info.context,
                memory_bytes=memory,
                trained_context=info.trained_context,
                detail={
                    **info.detail,
                    "isolation": f"process {self._process.pid}",
                    **(self._group.describe() if self._group else {}),
                    # The ranks hold no disk tier (engines/llm/distributed/rank.py).
                    **({"disk_cache": "off (distributed)"} if self._group else {}),
                },
            )

    def _load(self, memory_left: int | None) -> LoadInfo:
        self._start()
        return self._call("load", memory_left)

    def _load_group(self, memory_left: int | None) -> LoadInfo:
        """The group started and loaded; started again (`RING_STARTS`) where its ring did not
        form between the launch's ranks, or a rank died before the load's answer."""
        for _ in range(RING_STARTS - 1):
            try:
                return self._load(memory_left)
            except (RingRefused, ModelUnavailable) as error:
                if isinstance(error, RingRefused):
                    emit(
                        ModelFailed(
                            model=self._config.id,
                            error=f"its ranks' ring did not form ({error}); starting it again",
                        ),
                        level="warning",
                    )
                self._process.join(timeout=5)
                self._halt(self._process)
                self._death_reported, self._failure = False, None
        return self._load(memory_left)

    def count_prompt(self, request: ChatRequest) -> int:
        return self._call("count_prompt", request)

    def trim(self) -> None:
        if self._alive():
            self._call("trim")

    def open_batch(self) -> IsolatedBatch:
        self._revive()
        self._batch_pipe.send(("open",))
        return IsolatedBatch(self._batch_pipe, self._gone, self._receive)

    def generate(self, request: ChatRequest, cancelled: Callable[[], bool]) -> Iterator[Output]:
        # The child holds one batch, the runner's: a request decoded alone would need another.
        raise NotImplementedError("an isolated model decodes through open_batch")

    def unload(self) -> None:
        """Stop the child: the weights and caches go with its process."""
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(OSError):  # already gone
            self._control.send(("stop",))
        process.join(timeout=30)
        self._halt(process)
        if self._relay is not None:  # the last writes' events are logged before the detach
            self._relay.join(timeout=5)

    def _halt(self, process: multiprocessing.Process) -> None:
        """No rank left running: rank 0 killed if it lingers, the others stopped."""
        if process.is_alive():
            process.kill()
            process.join()
        if self._group is not None:
            self._group.stop()
        self._control.close()
        self._batch_pipe.close()

    def _alive(self) -> bool:
        if self._process is None or not self._process.is_alive():
            return False
        if self._group is not None and self._failure is None:
            self._failure = self._group.failure()
        return self._failure is None

    def _receive(self, pipe: Connection, limit: float | None = None):
        """The next message on `pipe`; for a sharded model, not past a rank's death or
        silence, nor past `distributed.timeout` (then EOFError: the group is gone)."""
        if self._group is None:
            return pipe.recv()
        limit = self._group.timeout if limit is None else limit
        deadline = time.monotonic() + limit
        while not pipe.poll(0.25):
            if not self._alive() and self._failure is None:  # rank 0 itself ended
                break
            if self._failure is None and time.monotonic() > deadline:
                self._failure = Failure(
                    0,
                    self._group.hosts[0],
                    f"no step from the ranks in {limit:g} s (distributed.timeout): a rank "
                    "hangs, or the network between them does",
                )
            if self._failure is not None:
                raise EOFError(self._failure.error)
        return pipe.recv()

    def _revive(self) -> None:
        """A child that died (killed, out of memory) starts again and loads as before, at
        once the first time; what it was generating failed with it. Ops see `model_failed`,
        then `model_attached` with the new pid."""
        with self._calls:
            wait = self._death()
            if wait is None:
                return
            if wait > 0:
                raise self._gone()
            self._death_reported = False
            started = time.perf_counter()
            info = self.load(self._memory_left)
            emit(
                ModelAttached(
                    model=self._config.id,
                    load_s=round(time.perf_counter() - started, 3),
                    memory_bytes=info.memory_bytes,
                    context=info.context,
                    detail=info.detail,
                )
            )

    def _death(self) -> float | None:
        """None while the child runs; else the seconds until it may start again, its death
        reported once. It starts again at once, unless it died within a minute of its last
        start: then it waits 1 s, 2, 4 ... (`engines.backoff`)."""
        with self._calls:
            if self._process is None or self._alive():
                return None
            now = time.monotonic()
            if not self._death_reported:
                self._death_reported = True
                delay = self._backoff.next_delay(now - self._started_at)
                self._retry_at = now + delay
                code = self._process.exitcode
                failure, self._failure = self._failure, None
                if failure is None and self._group is not None:
                    host = self._group.hosts[0]
                    failure = Failure(0, host, f"rank 0 on {host} exited with code {code}")
                what = failure.error if failure else f"its process exited with code {code}"
                self._halt(self._process)  # the other ranks go with it
                emit(
                    ModelFailed(
                        model=self._config.id,
                        error=f"{what}; starting it again" + (f" in {delay:g} s" if delay else ""),
                        exit_code=code,
                        rank=failure.rank if failure else None,
                        host=failure.host if failure else None,
                    ),
                    level="error",
                )
            return max(self._retry_at - now, 0.0)

    def _gone(self) -> ModelUnavailable:
        """What a request meets while the child is dead: a 503 saying when to come back."""
        wait = self._death() or 0.0
        when = f"in {wait:.1f} s" if wait else "with the next request"
        refused = ModelUnavailable(
            f"model {self._config.id!r}: its process exited and starts again {when}; retry"
        )
        refused.retry_after = round(max(wait, 1.0), 1)
        return refused

    def _start(self) -> None:
        if self._alive():
            return
        context = multiprocessing.get_context("spawn")  # no fork of a process with threads
        control, control_child = context.Pipe()
        batch, batch_child = context.Pipe()
        if self._group is None:
            events, events_child = context.Pipe(duplex=False)
            target = serve
            config = (self._config, self._platform, self._base_dir, self._draft_config)
            args = (events_child, *config, self._disk)
        else:
            from engines.llm.distributed.rank import lead

            env = self._group.start()  # draws this start's ring key: the spec after it
            target, args = lead, (self._group.spec, env)
        self._process = context.Process(
            target=target,
            args=(control_child, batch_child, *args),
            name=f"model-{self._config.id}",
            daemon=True,
        )
        self._process.start()
        self._started_at = time.monotonic()
        control_child.close()
        batch_child.close()
        self._control, self._batch_pipe = control, batch
        if self._group is None:
            events_child.close()
            # In the load's context: the events reach the listeners of the app loading it.
            context = contextvars.copy_context()
            self._relay = threading.Thread(
                target=context.run, args=(relay_events, events), name=f"events {self._config.id}"
            )
            self._relay.daemon = True
            self._relay.start()

    def _call(self, name: str, *args):
        if name != "load":
            self._revive()
        with self._calls:
            try:
                self._control.send((name, *args))
                # A load waits as long as every rank lives (a large model loads for minutes).
                ok, value = self._receive(self._control, 1e9 if name == "load" else None)
            except (EOFError, OSError):
                raise self._gone() from None
        if not ok:
            raise unpack_error(value)
        return value
