"""The gateway's side of a sharded model's ranks 1..N-1: starting them (here, or over ssh
as `mlx.launch` reaches a host), the environment MLX's backend reads in each, and telling
when one has died or hangs (each writes a heartbeat byte a second on its stdout).

Rank 0 is the model's process of `isolation: process` (engines/llm/isolated.py), started
with the environment `start()` returns; it runs engines/llm/distributed/rank.py's `lead`.

What a rank receives: its spec (the model, without `hf_token`) and the launch's ring key on
its stdin, which neither `ps` nor /proc shows (over ssh, on the connection's stdin); in its
environment only what MLX's backend reads and what engines/child_env.py keeps (no API key,
admin key or HF_TOKEN). Each start draws a new key, so a rank of an earlier start cannot join.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

import msgspec

from engines.child_env import inherited
from engines.llm.distributed.rank import HEARTBEAT_S, RankSpec
from engines.llm.distributed.shard import check_split
from engines.llm.distributed.wire import KEY_BYTES
from engines.platform import PlatformPath
from engines.sources.resolve import resolve_source
from schemas.config import ModelConfig, seconds

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
# A rank silent this long hangs (stopped, or its host gone). Its heartbeat thread needs the
# GIL, which a load holds for seconds at a time on a busy machine: hence not 2-3 beats.
STALE_S = 10 * HEARTBEAT_S
FIRST_BEAT_S = 60.0  # a rank starting (importing MLX, reaching its host) may take this long
STOP_GRACE_S = 10.0
# What a local rank keeps of the gateway's environment past engines/child_env.py's: how it
# finds this package and its libraries, and the backends' own settings.
RANK_INHERITED = (
    "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "LD_PRELOAD",
    "GATEWAY_CACHE_DIR", "GATEWAY_NO_OPENBLAS",
)  # fmt: skip
RANK_PREFIXES = ("MLX_", "CUDA_", "NCCL_", "OMP_", "OPENBLAS_")


class Failure(NamedTuple):
    """A rank that left the group: which, where, and how."""

    rank: int
    host: str
    error: str


class Peer:
    """One rank past rank 0: its process and when it last spoke."""

    def __init__(self, rank: int, host: str, process: subprocess.Popen) -> None:
        self.rank, self.host, self.process = rank, host, process
        self.started = self.last_beat = time.monotonic()
        self.beating = False
        threading.Thread(target=self._listen, daemon=True, name=f"rank-{rank}").start()

    def _listen(self) -> None:
        while self.process.stdout.read1(64):
            self.beating, self.last_beat = True, time.monotonic()

    def failure(self) -> Failure | None:
        """Why this rank is no longer part of the group; None while it runs and beats."""
        code = self.process.poll()
        if code is not None:
            return self._failed(f"exited with code {code}")
        silent = time.monotonic() - self.last_beat
        if silent > (STALE_S if self.beating else FIRST_BEAT_S):
            return self._failed(f"is not responding ({silent:.0f} s silent)")
        return None

    def _failed(self, how: str) -> Failure:
        return Failure(self.rank, self.host, f"rank {self.rank} on {self.host} {how}")


class RankGroup:
    """Ranks 1..N-1 of one model; rank 0's environment; their failures, named."""

    def __init__(self, model: ModelConfig, platform: PlatformPath, base_dir: Path | None):
        self.config = model.distributed
        self.hosts = self.config.hosts or ["127.0.0.1"] * self.config.ranks
        self.timeout = seconds(self.config.timeout)
        self._model, self._base_dir = model, base_dir
        self._spec = RankSpec(
            model=msgspec.structs.replace(model, hf_token=None),  # ranks load, never download
            platform=platform,
            base_dir=str(base_dir) if base_dir is not None else None,
            mode=self.config.mode,
            sharing=self.sharing(),
            key=b"",
        )
        self._peers: list[Peer] = []
        self._hostfile: str | None = None

    @property
    def spec(self) -> RankSpec:
        """This start's spec, with its ring key (rank 0 takes it over its spawn pipe)."""
        return self._spec

    def start(self) -> dict[str, str]:
        """Start ranks 1..N-1 with a new ring key; the environment rank 0 joins the group
        with. A split the checkpoint cannot take is refused first, by its numbers."""
        self.stop()
        model = self._model
        path = resolve_source(model.id, model.source, base_dir=self._base_dir)
        check_split(model.id, path, self.config.ranks, self.config.mode)
        self._spec = msgspec.structs.replace(self._spec, key=secrets.token_bytes(KEY_BYTES))
        envs = self._environments()
        python = self.config.python or sys.executable
        spec = msgspec.msgpack.encode(self._spec)
        for rank in range(1, self.config.ranks):
            process = self._launch(rank, envs[rank], python)
            with contextlib.suppress(OSError):  # one that died at once is found by its exit
                process.stdin.write(spec)
                process.stdin.close()
            self._peers.append(Peer(rank, self.hosts[rank], process))
        return envs[0]

    def failure(self) -> Failure | None:
        """The first rank that died or went silent, named with its host; None if none."""
        return next(filter(None, (peer.failure() for peer in self._peers)), None)

    def stop(self) -> None:
        """Every rank past rank 0 ends: asked to (SIGTERM), then made to."""
        peers, self._peers = self._peers, []
        for peer in peers:
            with contextlib.suppress(OSError):
                peer.process.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for peer in peers:
            try:
                peer.process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                peer.process.kill()
                peer.process.wait()
        if self._hostfile:
            with contextlib.suppress(OSError):
                os.unlink(self._hostfile)
            self._hostfile = None

    def sharing(self) -> list[int]:
        """Per rank: how many ranks share the gateway's machine with it (0: another host).
        Those ranks split the memory the budget leaves, and count against it together."""
        here = [h in LOCAL_HOSTS or h == self.hosts[0] for h in self.hosts]
        return [sum(here) if mine else 0 for mine in here]

    def on_this_machine(self, per_rank: list[int]) -> int:
        """The bytes the ranks on the gateway's machine hold together."""
        return sum(m for m, n in zip(per_rank, self.sharing(), strict=True) if n)

    def describe(self) -> dict[str, str]:
        """The group as `model_attached` tells it."""
        config = self.config
        return {
            "ranks": str(config.ranks),
            "hosts": ",".join(self.hosts),
            "mode": config.mode,
            "backend": config.backend,
        }

    def _environments(self) -> list[dict[str, str]]:
        """What MLX's backend reads in each rank (`mlx.launch` sets the same)."""
        config, ranks = self.config, self.config.ranks
        ports = _ports(config.port, ranks)
        common = {"GATEWAY_BACKEND": config.backend, "GATEWAY_RANKS": str(ranks)}
        if config.backend == "nccl":  # rank 0 coordinates; one GPU per rank of a host
            common |= {
                "NCCL_HOST_IP": _address(self.hosts[0]),
                "NCCL_PORT": str(ports[0]),
                "MLX_WORLD_SIZE": str(ranks),
            }
            per_host: dict[str, int] = {}
            envs = []
            for rank, host in enumerate(self.hosts):
                gpu = per_host.setdefault(host, 0)
                per_host[host] += 1
                envs.append(common | {"MLX_RANK": str(rank), "CUDA_VISIBLE_DEVICES": str(gpu)})
            return envs
        ring = [[f"{_address(h)}:{p}"] for h, p in zip(self.hosts, ports, strict=True)]
        common["GATEWAY_HOSTFILE"] = json.dumps(ring)
        if ranks > 1:
            # mkstemp: 0600, this user's alone.
            handle, self._hostfile = tempfile.mkstemp(prefix="mlx-ring-", suffix=".json")
            os.write(handle, common["GATEWAY_HOSTFILE"].encode())
            os.close(handle)
            common["MLX_HOSTFILE"] = self._hostfile
        return [common | {"MLX_RANK": str(rank)} for rank in range(ranks)]

    def _launch(self, rank: int, env: dict[str, str], python: str) -> subprocess.Popen:
        command = [python, "-m", "engines.llm.distributed.rank"]
        host = self.hosts[rank]
        if host in LOCAL_HOSTS:
            environment = inherited(*RANK_INHERITED, prefixes=RANK_PREFIXES) | env
            return subprocess.Popen(
                command, env=environment, stdout=subprocess.PIPE, stdin=subprocess.PIPE
            )
        # As `mlx.launch` reaches a host: ssh, the same directory, the environment exported,
        # the ring's hostfile written there. ssh's own end ends the rank (no -tt: stdout is
        # the heartbeat, and a closed connection is a dead rank). The exports hold no secret:
        # the spec and its key go down the connection's stdin.
        script = f"cd {shlex.quote(os.getcwd())} && "
        script += "".join(f"export {k}={shlex.quote(v)}; " for k, v in env.items())
        if "GATEWAY_HOSTFILE" in env and int(env["GATEWAY_RANKS"]) > 1:
            script += (
                'f=$(mktemp); printf %s "$GATEWAY_HOSTFILE" > "$f"; export MLX_HOSTFILE="$f"; '
            )
        script += "exec " + shlex.join(command)
        return subprocess.Popen(
            ["ssh", "-o", "BatchMode=yes", host, script],
            stdout=subprocess.PIPE,
            stdin=subprocess.PIPE,
        )


def _address(host: str) -> str:
    """The IP the ring connects to (it takes addresses, not names)."""
    name = host.rsplit("@", 1)[-1]
    return socket.gethostbyname(name) if name != "localhost" else "127.0.0.1"


def _ports(first: int | None, count: int) -> list[int]:
    """`port:` and the next ones; else free ports of this machine, picked at each start."""
    if first is not None:
        return list(range(first, first + count))
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()
