"""Engine process with a real server program: another `gateway serve` on a scripted model
(fast to start, so the lifecycle can be walked through): start and serve, model_log, a
crash restarted with back-off, on-demand start and idle stop, admin unload, reload, and no
orphan when the gateway itself is killed."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import REPO, GatewayProcess

from engines.process.child import LogLimiter

CHILD = """
models:
  - {id: echo, engine: scripted, concurrency: 4, script: {reply: "hello from the child"}}
"""


def front(child_config: Path, lazy_ttl: str = "2s") -> str:
    command = (
        f"[{sys.executable}, -m, gateway, serve, --config, {child_config}, --port, '${{PORT}}']"
    )
    return f"""
models:
  - id: child
    engine: process
    process: {{command: {command}, cwd: {REPO}, model: echo, memory: 1GiB, stop_grace: 5s}}
  - id: lazy
    engine: process
    residency: {{on_demand: true, idle_ttl: {lazy_ttl}}}
    process: {{command: {command}, cwd: {REPO}, model: echo}}
"""


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return status != "Z"  # a zombie has exited: only its parent has yet to reap it


def wait_gone(pids: list[int], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids):
        assert time.monotonic() < deadline, f"still running: {[p for p in pids if alive(p)]}"
        time.sleep(0.1)


def count(gateway: GatewayProcess, name: str, **match) -> int:
    return len(gateway.events(name, **match))


def wait_more(gateway: GatewayProcess, name: str, before: int, timeout: float = 30, **match):
    deadline = time.monotonic() + timeout
    while count(gateway, name, **match) <= before:
        assert time.monotonic() < deadline, f"no new {name} {match}"
        time.sleep(0.1)
    return gateway.events(name, **match)[-1]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    directory = tmp_path_factory.mktemp("process")
    (directory / "child.yaml").write_text(CHILD)
    config = directory / "models.yaml"
    config.write_text(front(directory / "child.yaml"))
    process = GatewayProcess(config, directory / "events.jsonl")
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()  # also when a test has stopped it: closes its log and clients


def chat(gateway: GatewayProcess, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    return httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=60)


def server_of(gateway: GatewayProcess, model: str) -> tuple[int, int]:
    """The keeper's pid (from model_attached) and the server program's under it."""
    keeper = int(gateway.events("model_attached", model=model)[-1]["detail"]["pid"])
    return keeper, children(keeper)[0]


def test_a_pinned_server_starts_with_the_gateway_and_serves(gateway):
    attached = gateway.events("model_attached", model="child")[0]
    assert attached["memory_bytes"] == 2**30 and attached["detail"]["engine"] == "process"
    keeper, server = server_of(gateway, "child")
    assert os.getpgid(server) == keeper  # its own process group, led by the keeper
    answer = chat(gateway, "child")
    assert answer.status_code == 200
    assert answer.json()["choices"][0]["message"]["content"] == "hello from the child"
    generated = gateway.events("generated", model="child")[-1]
    assert generated["replica"] == f"http://127.0.0.1:{attached['detail']['port']}/v1"
    logs = gateway.events("model_log", model="child", stream="stdout")
    assert any('"event":"server_started"' in e["line"] for e in logs)  # the child's own log
    assert not gateway.events("model_log", model="lazy")  # on demand: not started


def test_a_crash_is_model_failed_and_restarts(gateway):
    keeper, server = server_of(gateway, "child")
    restarts = count(gateway, "model_restarting", model="child")
    ups = count(gateway, "replica_up", model="child")
    os.kill(server, signal.SIGKILL)
    failed = gateway.wait_event("model_failed", model="child", timeout=10)
    assert failed["exit_code"] == -signal.SIGKILL
    restarting = wait_more(gateway, "model_restarting", restarts, model="child")
    assert restarting["attempt"] == 1 and restarting["delay_s"] == 1.0
    wait_more(gateway, "replica_up", ups, model="child")
    assert not alive(keeper)
    assert chat(gateway, "child").status_code == 200


def test_on_demand_starts_at_first_request_and_stops_when_idle(gateway):
    answer = chat(gateway, "lazy")  # waits in the queue while the server starts
    assert answer.status_code == 200
    loading = gateway.events("model_loading", model="lazy")[0]
    generated = gateway.events("generated", model="lazy")[0]
    assert loading["request_id"] == generated["request_id"] and generated["queue_wait_s"] > 0.5
    pids = list(server_of(gateway, "lazy"))
    gateway.wait_event("model_detached", model="lazy", reason="idle", timeout=15)
    wait_gone(pids)


def test_admin_unload_stops_the_server(gateway):
    pids = list(server_of(gateway, "child"))
    answer = httpx.post(f"{gateway.url}/admin/models/child/unload")
    assert answer.status_code == 200
    gateway.wait_event("model_detached", model="child", reason="admin")
    wait_gone(pids)
    assert not gateway.events("model_failed", model="child", exit_code=-signal.SIGTERM)


def test_reload_with_a_changed_command_restarts_the_server(gateway):
    assert chat(gateway, "child").status_code == 200  # unloaded above: starts it again
    old = list(server_of(gateway, "child"))
    config = gateway_config(gateway)
    config.write_text(config.read_text().replace("stop_grace: 5s", "stop_grace: 4s"))
    answer = httpx.post(f"{gateway.url}/admin/reload", timeout=60)
    assert answer.status_code == 200 and answer.json()["restarted"] == ["child"]
    gateway.wait_event("model_detached", model="child", reason="changed", timeout=30)
    wait_gone(old)
    assert chat(gateway, "child").status_code == 200
    assert server_of(gateway, "child")[0] not in old


def gateway_config(gateway: GatewayProcess) -> Path:
    return Path(gateway.process.args[gateway.process.args.index("--config") + 1])


def test_no_orphan_when_the_gateway_is_killed(gateway):
    pids = list(server_of(gateway, "child"))
    gateway.process.send_signal(signal.SIGKILL)
    gateway.process.wait(10)
    wait_gone(pids, timeout=15)  # the keeper saw its lifeline close and stopped the group
    gateway.stop()


def test_log_lines_pass_in_bursts_and_floods_are_counted():
    limiter = LogLimiter(burst=3, rate=0.001)  # no refill within the test
    assert [limiter.allow() for _ in range(5)] == [True, True, True, False, False]
    assert limiter.dropped == 2  # said once, on the next line that passes


def test_memory_counts_against_the_budget_and_evicts_the_idle_one(start_gateway, tmp_path):
    (tmp_path / "child.yaml").write_text(CHILD)
    command = f"[{sys.executable}, -m, gateway, serve, --config, {tmp_path / 'child.yaml'}, --port, '${{PORT}}']"
    process = f"{{command: {command}, cwd: {REPO}, model: echo, memory: 1GiB}}"
    gateway = start_gateway(
        f"""
        server: {{memory_budget: 1.5GiB}}
        models:
          - {{id: one, engine: process, residency: {{on_demand: true}}, process: {process}}}
          - {{id: two, engine: process, residency: {{on_demand: true}}, process: {process}}}
        """
    )
    assert chat(gateway, "one").status_code == 200
    first = list(server_of(gateway, "one"))
    assert chat(gateway, "two").status_code == 200  # 1 GiB more does not fit beside one
    gateway.wait_event("model_detached", model="one", reason="evicted")
    wait_gone(first)
    assert gateway.events("model_attached", model="two")[0]["memory_bytes"] == 2**30


STUBBORN = """
import http.server, signal, sys
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a server that will not stop when asked

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass

http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


def test_a_server_that_ignores_sigterm_is_killed_after_the_grace(start_gateway, tmp_path):
    (tmp_path / "stubborn.py").write_text(STUBBORN)
    gateway = start_gateway(
        f"""
        models:
          - id: stubborn
            engine: process
            process:
              command: [{sys.executable}, {tmp_path / "stubborn.py"}, "${{PORT}}"]
              stop_grace: 1s
        """
    )
    pids = list(server_of(gateway, "stubborn"))
    started = time.monotonic()
    assert httpx.post(f"{gateway.url}/admin/models/stubborn/unload", timeout=30).status_code == 200
    wait_gone(pids, timeout=10)
    assert time.monotonic() - started >= 1.0  # SIGTERM was ignored; SIGKILL after 1 s
