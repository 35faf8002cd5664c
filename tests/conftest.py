"""Shared fixtures: a real `gateway serve` process on a config, and its event log."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class GatewayProcess:
    """`gateway serve` as users run it, with its stdout (the event log) in a file."""

    def __init__(self, config: Path, log: Path, env: dict[str, str] | None = None) -> None:
        self.clients: list = []  # SDK clients made for this gateway, closed with it
        self.port = free_port()
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

    def wait_event(self, name: str, timeout: float = 10, **match) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.events(name, **match)
            if found:
                return found[-1]
            time.sleep(0.05)
        raise TimeoutError(f"no {name} event matching {match}")

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


@pytest.fixture
def start_gateway(tmp_path):
    """Start a gateway on YAML text; every process started is stopped after the test."""
    started: list[GatewayProcess] = []

    def start(config_text: str, env: dict[str, str] | None = None) -> GatewayProcess:
        config = tmp_path / f"models-{len(started)}.yaml"
        config.write_text(textwrap.dedent(config_text))
        gateway = GatewayProcess(config, tmp_path / f"events-{len(started)}.jsonl", env)
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
