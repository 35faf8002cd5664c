"""One run of a model's server program: started under the keeper, its output turned into
rate-limited `model_log` events, stopped with SIGTERM then SIGKILL to its whole group."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
import time
from collections import deque
from pathlib import Path

from engines.child_env import inherited
from engines.log import emit
from schemas.events import ModelLog

KEEPER = Path(__file__).with_name("keeper.py")
LOG_BURST = 50  # lines logged at once before the rate applies
LOG_RATE = 20.0  # lines a second, on average, past the burst
TAIL_LINES = 20  # the last lines kept, to say why a start failed


# An option whose value is masked where a command line is shown (`--api-key X`, `--token=X`).
SECRET_OPTION = re.compile(r"^-{1,2}[\w-]*(key|token|secret|password|passwd|auth)[\w-]*$", re.I)
MASK = "***"


def fill_port(text: str, port: int) -> str:
    return text.replace("${PORT}", str(port))


def server_environment(env: dict[str, str], port: int) -> dict[str, str]:
    """The server's environment: what engines/child_env.py keeps of the gateway's (nothing
    that could hold a key), then `env` (`process.env`)."""
    return inherited() | {k: fill_port(v, port) for k, v in env.items()}


def shown_command(command: list[str]) -> str:
    """`command` as events show it: the value of an option named like a secret masked."""
    shown: list[str] = []
    masking = False  # the part before was a secret option: this one is its value
    for part in command:
        name, eq, _ = part.partition("=")
        if masking:
            shown.append(MASK)
        elif eq and SECRET_OPTION.match(name):
            shown.append(f"{name}={MASK}")
        else:
            shown.append(part)
        masking = not masking and not eq and bool(SECRET_OPTION.match(part))
    return " ".join(shown)


class LogLimiter:
    """A token bucket over log lines: bursts pass, floods are counted and said once."""

    def __init__(self, burst: int = LOG_BURST, rate: float = LOG_RATE) -> None:
        self._burst, self._rate = burst, rate
        self._tokens = float(burst)
        self._at = time.monotonic()
        self.dropped = 0

    def allow(self) -> bool:
        now = time.monotonic()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        self.dropped += 1
        return False


class ServerProcess:
    """The keeper and the server under it, on the engine's event loop."""

    def __init__(self, model_id: str, process: asyncio.subprocess.Process) -> None:
        self.model_id = model_id
        self.process = process
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._limiter = LogLimiter()
        self._readers = [
            asyncio.ensure_future(self._read(process.stdout, "stdout")),
            asyncio.ensure_future(self._read(process.stderr, "stderr")),
        ]

    @classmethod
    async def start(
        cls,
        model_id: str,
        command: list[str],
        *,
        port: int,
        env: dict[str, str],
        cwd: Path | None,
        grace: float,
    ) -> ServerProcess:
        """Start `command` (with `${PORT}` filled in) under the keeper, in a new group."""
        argv = [fill_port(part, port) for part in command]
        environ = server_environment(env, port)
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(KEEPER),
            str(grace),
            *argv,
            stdin=asyncio.subprocess.PIPE,  # the keeper's lifeline: EOF when we are gone
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env=environ,
            start_new_session=True,  # its own process group: signals reach the whole tree
        )
        return cls(model_id, process)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def exited(self) -> bool:
        return self.process.returncode is not None

    async def _read(self, stream: asyncio.StreamReader, name: str) -> None:
        while True:
            try:
                raw = await stream.readline()
            except (ValueError, asyncio.LimitOverrunError):  # one line past the buffer
                raw = await stream.read(65536)
            if not raw:
                return
            line = raw.decode(errors="replace").rstrip()
            if not line:
                continue
            self.tail.append(line)
            if self._limiter.allow():
                dropped, self._limiter.dropped = self._limiter.dropped, 0
                emit(ModelLog(model=self.model_id, stream=name, line=line, dropped=dropped))

    async def wait(self) -> int:
        """The server's exit status (negative: the signal that ended it)."""
        code = await self.process.wait()
        await asyncio.gather(*self._readers, return_exceptions=True)
        return code

    async def stop(self, grace: float) -> int:
        """SIGTERM to the whole group; SIGKILL to what is left after `grace` seconds."""
        if not self.exited:
            self._signal(signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.process.wait()), grace)
        # The group again, even when the server is gone: nothing it started may stay.
        self._signal(signal.SIGKILL)
        if self.process.stdin is not None:
            self.process.stdin.close()
        return await self.wait()

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)
