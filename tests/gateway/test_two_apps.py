"""Two gateways (two `create_app` calls) in one process, served over HTTP side by side:
neither hears the other's events (metrics), feeds the other's lines to its ops page, nor
redacts with the other's secrets, and neither changes Pillow's process-wide guard."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import httpx
import pytest
from conftest import REPO, free_port

# Both apps built first, then served together on one event loop, as a test harness would.
SERVE_TWO = """
import asyncio, sys
from pathlib import Path

import uvicorn
from PIL import Image

from engines.mlx import platform
from gateway.app import create_app
from gateway.control.config import load_config
from gateway.logs.setup import setup_logging

setup_logging("info")
apps = []
for config, port in ((sys.argv[1], sys.argv[3]), (sys.argv[2], sys.argv[4])):
    path = Path(config)
    app = create_app(load_config(path), platform.detect(), path, bind_host="127.0.0.1")
    apps.append(uvicorn.Server(uvicorn.Config(
        app, host="127.0.0.1", port=int(port), log_config=None, access_log=False)))
print("pillow", Image.MAX_IMAGE_PIXELS, file=sys.stderr, flush=True)

async def main():
    await asyncio.gather(*(server.serve() for server in apps))

asyncio.run(main())
"""
SECRET_A, SECRET_B = "tok-app-a-0123456789", "tok-app-b-9876543210"
CONFIG = """
server:
  limits: {{max_image_pixels: 1000}}
models:
  - id: echo-{name}
    engine: scripted
  - id: broken-{name}
    engine: scripted
    script: {{reply: "one ${{{var}}} three", fail_after: 2}}
"""
CHAT = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def two_apps(tmp_path_factory):
    directory = tmp_path_factory.mktemp("two-apps")
    paths = []
    for name, var in (("a", "TEST_APP_A_TOKEN"), ("b", "TEST_APP_B_TOKEN")):
        path = directory / f"{name}.yaml"
        path.write_text(textwrap.dedent(CONFIG.format(name=name, var=var)))
        paths.append(str(path))
    ports = [free_port(), free_port()]
    log = directory / "events.jsonl"
    env = {**os.environ, "TEST_APP_A_TOKEN": SECRET_A, "TEST_APP_B_TOKEN": SECRET_B}
    with log.open("w") as out, open(directory / "stderr.txt", "w") as err:
        process = subprocess.Popen(
            [sys.executable, "-c", SERVE_TWO, *paths, *map(str, ports)],
            cwd=REPO, env=env, stdout=out, stderr=err,
        )  # fmt: skip
        try:
            urls = [f"http://127.0.0.1:{port}" for port in ports]
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                try:
                    if all(httpx.get(f"{url}/health").status_code == 200 for url in urls):
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
            yield urls, log, directory / "stderr.txt"
        finally:
            process.kill()
            process.wait()


def lines(log) -> list[dict]:
    return [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]


def test_each_app_counts_only_its_own_requests(two_apps):
    (a, b), _, _ = two_apps
    for _ in range(3):
        body = {"model": "echo-a", "messages": CHAT}
        assert httpx.post(f"{a}/v1/chat/completions", json=body).status_code == 200
    assert (
        'gateway_requests_total{model="echo-a",status="200"} 3.0' in httpx.get(f"{a}/metrics").text
    )
    assert "echo-a" not in httpx.get(f"{b}/metrics").text


def test_each_app_redacts_with_its_own_secrets(two_apps):
    (a, b), log, _ = two_apps
    for url, model in ((a, "broken-a"), (b, "broken-b")):
        body = {"model": model, "messages": CHAT}
        assert httpx.post(f"{url}/v1/chat/completions", json=body).status_code == 500
    time.sleep(0.3)
    failures = [e for e in lines(log) if e["event"] == "internal_error"]
    assert len(failures) == 2 and all("***" in e["message"] for e in failures), failures
    text = log.read_text()
    assert SECRET_A not in text and SECRET_B not in text


def test_each_apps_ops_feed_carries_only_its_own_lines(two_apps):
    (a, b), _, _ = two_apps
    with httpx.stream("GET", f"{a}/ui/events", timeout=10) as feed:
        theirs = httpx.get(f"{b}/v1/models").headers["x-request-id"]
        ours = httpx.get(f"{a}/v1/models").headers["x-request-id"]
        seen = []
        for line in feed.iter_lines():
            seen.append(line)
            if ours in line and "request_finished" in line:
                break
    assert not [line for line in seen if theirs in line]


def test_no_app_changes_pillows_process_wide_guard(two_apps):
    _, _, stderr = two_apps
    from PIL import Image

    assert f"pillow {Image.MAX_IMAGE_PIXELS}" in stderr.read_text()
