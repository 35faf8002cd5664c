"""Nothing blocks the event loop that other clients' streams run on: a reload of a large
config (parsing and source checks run in a thread), and a log nobody reads (lines are
written by their own thread)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import httpx
from conftest import REPO, free_port, serving

FILLERS = 1000  # enough models that a reload takes the better part of a second
WORDS = 120


def big_config() -> str:
    reply = " ".join(f"w{i}" for i in range(WORDS))
    lines = [
        "models:",
        "  - id: talker",
        "    engine: scripted",
        f"    script: {{reply: {reply!r}, token_delay: 0.05}}",
    ]
    for i in range(FILLERS):
        lines += [
            f"  - id: filler-{i}",
            "    engine: scripted",
            "    residency: {on_demand: true}",
            f"    aliases: [f{i}-a, f{i}-b]",
            "    sampling: {temperature: 0.5, top_p: 0.9}",
        ]
    return "\n".join(lines) + "\n"


def test_a_stream_keeps_its_pace_while_a_large_config_reloads(tmp_path):
    with serving(tmp_path, big_config()) as gateway:
        arrivals: list[float] = []
        reloads: list[float] = []
        done = threading.Event()
        chat = [{"role": "user", "content": "go"}]
        body = {"model": "talker", "stream": True, "max_tokens": 4000, "messages": chat}

        def reload_while_streaming() -> None:
            while len(arrivals) < 5:
                time.sleep(0.01)
            while not done.is_set():
                started = time.perf_counter()
                httpx.post(f"{gateway.url}/admin/reload", timeout=60).raise_for_status()
                reloads.append(time.perf_counter() - started)

        reloader = threading.Thread(target=reload_while_streaming)
        reloader.start()
        with httpx.stream("POST", f"{gateway.url}/v1/chat/completions", json=body, timeout=60) as r:
            for line in r.iter_lines():
                if line.startswith("data:"):
                    arrivals.append(time.perf_counter())
        done.set()
        reloader.join()
    assert len(reloads) >= 2 and len(arrivals) > WORDS
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    # Each reload took the better part of a second; the stream never waited on one.
    assert min(reloads) > 0.3, reloads
    assert max(gaps) < 0.3, (max(gaps), reloads)


def test_a_log_nobody_reads_never_stalls_the_gateway(tmp_path):
    config = tmp_path / "models.yaml"
    config.write_text("models:\n  - id: echo\n    engine: scripted\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [
        sys.executable,
        "-m",
        "gateway",
        "serve",
        "--config",
        str(config),
        "--port",
        str(port),
    ]
    # stdout is a pipe this test does not read: it fills after 64 KiB of log lines.
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                httpx.get(f"{url}/health", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        body = {"model": "echo", "messages": [{"role": "user", "content": "x" * 200}]}
        with httpx.Client(timeout=5) as client:
            for _ in range(400):  # several hundred KiB of request lines
                assert client.post(f"{url}/v1/chat/completions", json=body).status_code == 200
            started = time.perf_counter()
            assert client.get(f"{url}/health").status_code == 200
            assert time.perf_counter() - started < 1
        process.terminate()
        output, _ = process.communicate(timeout=30)  # now read: every line was kept
        assert output.count(b'"event":"request_finished"') >= 401
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_body_is_looked_through_for_images_only_when_it_has_an_image_part():
    from gateway.http.body import IMAGE_PART

    # Text that merely mentions images costs no second decode...
    assert not IMAGE_PART.search(b'{"messages": [{"content": "an image of images"}]}')
    assert not IMAGE_PART.search(b'{"content": "say \\"images\\": [1]"}')  # inside a string
    # ...while every protocol's image part, and any \u escape that could spell one, does.
    for body in [
        b'{"content": [{"type": "image_url", "image_url": {"url": "x"}}]}',
        b'{"input": [{"type" : "input_image", "image_url": "x"}]}',
        b'{"content": [{"type": "image", "source": {}}]}',
        b'{"messages": [{"images": ["x"]}]}',
        b'{"content": [{"type": "\\u0069mage", "source": {}}]}',
    ]:
        assert IMAGE_PART.search(body), body
