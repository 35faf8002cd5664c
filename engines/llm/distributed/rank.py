"""One rank of a sharded model: every rank holds a `Replica` and applies the same changes,
in the same order, before the same steps (the collectives in each forward pass need every
rank in it). Rank 0 (`lead`) is the gateway's model process: it takes the gateway's calls
and batch messages from its pipes, as `isolation: process` does, and shares the changes
with the other ranks (`follow`, started by engines/llm/distributed/group.py) each step.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection, wait
from pathlib import Path

import msgspec

from engines.base import LoadInfo
from engines.llm.distributed.wire import Channel, RingRefused, authenticate, gather
from engines.llm.isolated_child import Arrivals, answer, pack_error
from engines.mlx.weights import weight_bytes
from engines.platform import PlatformPath
from schemas.canonical import Finished
from schemas.config import ModelConfig


class RankSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What every rank loads, and the launch's key it proves on the ring. Ranks 1..N-1 read
    it from their stdin (never argv or the environment, which `ps` and /proc show); it holds
    no secret the rank does not need (no `hf_token`: a rank loads, never downloads)."""

    model: ModelConfig
    platform: PlatformPath
    base_dir: str | None
    mode: str
    sharing: list[int]
    key: bytes


# Changes every rank applies; anything else the gateway asks only rank 0 answers.
SHARED = {"load", "open", "prepare", "add", "cancel", "stop"}
HEARTBEAT_S = 1.0  # a rank that writes no byte for this long (x3) is taken as hung


class Replica:
    """A rank's engine and batch, changed only through `apply` and advanced by `step`."""

    def __init__(self, engine, group, sharing: list[int], key: bytes) -> None:
        self.engine, self.group = engine, group
        self.channel = Channel(group, key)
        self.sharing = sharing[group.rank()]  # ranks on the gateway's machine (0: elsewhere)
        self.batch = None
        self.cancelled: set[int] = set()
        self.arrivals = Arrivals()
        self.share = (1, 1)  # the part of the KV cache this rank holds, of its whole
        self.model = None  # this rank's part of the model, once loaded

    @property
    def active(self) -> bool:
        return self.batch is not None and bool(self.batch.active)

    def apply(self, message: tuple):
        """One change; what rank 0 answers the gateway with (None: nothing to answer)."""
        kind = message[0]
        if kind == "load":
            return self._load(message[1])
        if kind == "open":
            self.cancelled.clear()
            self.arrivals.clear()
            self.batch = self.engine.open_batch()
        elif kind == "cancel":
            self.cancelled.update(message[1])
        elif kind == "prepare":
            self.arrivals.prepare(self.engine, message[1])
        elif kind == "add":
            return self.arrivals.join(self.batch, message[1], self.cancelled)
        return None

    def step(self) -> list:
        steps = self.batch.step()
        for i, output in steps:
            if isinstance(output, Finished | Exception):
                self.cancelled.discard(i)
        return steps

    def _load(self, memory_left: int | None):
        """Load this rank's part; every rank then takes the smallest window any holds and
        reports its memory, so rank 0 answers with the whole group's."""
        import mlx.core as mx

        try:
            # The budget is the gateway machine's: its ranks split it; a remote one has none.
            here = memory_left is not None and self.sharing
            info = self.engine.load(memory_left // self.sharing if here else None)
            failed = 0
        except Exception as error:
            info, failed = error, 1
        if sum(gather(self.group, failed)):  # one rank's failure is the group's
            if failed:
                raise info
            raise RuntimeError("another rank failed to load its part of the model")
        held, total = self.share
        context = min(gather(self.group, info.context))
        self.engine.narrow_window(context)
        # The batch's parked caches hold this rank's layers or heads: so does their limit.
        self.engine.parked_bytes = self.engine.parked_bytes * held // total
        # The engine counts the whole model's KV bytes per token: this rank holds its share.
        weights = weight_bytes(self.model)
        mine = weights + (info.memory_bytes - weights) * held // total
        memory = gather(self.group, mine)
        mx.random.seed(gather(self.group, int.from_bytes(os.urandom(4)))[0])  # rank 0's seed
        return LoadInfo(
            memory_bytes=memory[0],
            context=context,
            trained_context=info.trained_context,
            detail={**info.detail, "memory_per_rank": ",".join(map(str, memory))},
        )


def make_replica(spec: RankSpec, group) -> Replica:
    """The engine every rank builds: an `MLXEngine` whose weights load as this rank's part."""
    from engines.llm.distributed.shard import load_shard
    from engines.llm.engine import MLXEngine

    model, mode = spec.model, spec.mode
    replica = None

    def loader(path: Path):
        replica.model, tokenizer, replica.share = load_shard(model.id, path, group, mode)
        return replica.model, tokenizer

    base_dir = Path(spec.base_dir) if spec.base_dir is not None else None
    engine = MLXEngine(model, spec.platform, base_dir, loader=loader)
    replica = Replica(engine, group, spec.sharing, spec.key)
    return replica


def join(env: dict[str, str], key: bytes):
    """This process's place in the group: MLX's own init, on the environment it was given,
    then every rank's proof of the launch's key. RingRefused if either fails."""
    import mlx.core as mx

    os.environ.update(env)
    alone = env["GATEWAY_RANKS"] == "1"  # a group of one needs no backend
    try:
        group = mx.distributed.init(strict=not alone, backend=env["GATEWAY_BACKEND"])
        if group.size() > 1:
            authenticate(group, key)
    except RingRefused:
        raise
    except Exception as error:  # MLX's start: a connection refused, lost, or taken
        raise RingRefused(f"{type(error).__name__}: {error}") from None
    return group


def lead(control: Connection, batch_pipe: Connection, spec: RankSpec, env: dict[str, str]) -> None:
    """Rank 0: the gateway's calls and batch on its pipes; the changes shared with every rank
    before each step; the step's outputs back to the gateway. A ring that did not form is the
    answer to the gateway's first call (the load), which starts the group again."""
    os.dup2(2, 1)  # stdout is the gateway's event stream
    sys.stdout = sys.stderr
    try:
        group = join(env, spec.key)
    except RingRefused as error:
        control.recv()
        control.send((False, pack_error(error)))
        return
    replica = make_replica(spec, group)
    while True:
        changes: list[tuple[Connection | None, tuple]] = []
        for pipe in wait([control, batch_pipe], timeout=0 if replica.active else None):
            while True:  # everything that arrived joins this step (a burst: one prefill)
                try:
                    message = pipe.recv()
                except EOFError:  # the gateway is gone: the others stop with this rank
                    message = ("stop",)
                if message[0] in SHARED:
                    changes.append((pipe, message))
                else:
                    control.send(answer(replica.engine, message))
                if message[0] == "stop" or not pipe.poll():
                    break
        if not changes and not replica.active:
            continue
        replica.channel.share([m for _, m in changes] or None)  # None: one collective
        for pipe, message in changes:
            if message[0] == "stop":
                replica.engine.unload()
                return
            try:
                reply = (True, replica.apply(message))
            except Exception as error:
                reply = (False, pack_error(error))
            if pipe is control:
                control.send(reply)
            elif not reply[0]:  # the batch could not take the change: it is gone
                replica.batch = None
                kind, args = reply[1][0].__name__, reply[1][1]
                batch_pipe.send(("failed", (kind, " ".join(map(str, args)), "")))
            elif reply[1]:  # requests refused alone (a prompt past the window)
                batch_pipe.send(("steps", reply[1]))
        if replica.active:
            _step_back(replica, batch_pipe)


def _step_back(replica: Replica, batch_pipe: Connection) -> None:
    try:
        steps = replica.step()
    except Exception as error:  # the batch broke: the runner ends every request in it
        replica.batch = None
        detail = "".join(traceback.format_exception(error))
        batch_pipe.send(("failed", (type(error).__name__, str(error), detail)))
        return
    if steps:
        packed = [(i, pack_error(o) if isinstance(o, Exception) else o) for i, o in steps]
        batch_pipe.send(("steps", packed))


def follow() -> None:
    """Ranks 1..N-1: apply what rank 0 shares, step when it steps; a heartbeat on stdout."""
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # nothing else may write on the heartbeat's stream
    sys.stdout = sys.stderr
    threading.Thread(target=_beat, args=(out,), daemon=True).start()
    spec = msgspec.msgpack.decode(sys.stdin.buffer.read(), type=RankSpec)
    replica = make_replica(spec, join(dict(os.environ), spec.key))
    while True:
        for message in replica.channel.share() or []:
            if message[0] == "stop":
                replica.engine.unload()
                return
            try:
                replica.apply(message)
            except Exception:  # rank 0 meets the same failure and tells the gateway
                traceback.print_exc()
        if replica.active:
            try:
                replica.step()
            except Exception:
                replica.batch = None
                traceback.print_exc()


def _beat(out) -> None:
    while True:
        try:
            out.write(b".")
        except OSError:  # the gateway is gone
            os._exit(1)
        time.sleep(HEARTBEAT_S)


if __name__ == "__main__":
    follow()
