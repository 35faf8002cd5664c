"""What the gateway writes under `server.state_dir` is its users' own words (stored
Responses, the ops page's captured bodies): files 0600 in a 0700 directory, whatever the
umask, SQLite's -wal and -shm files included."""

from __future__ import annotations

import os
import stat

import httpx


def test_the_state_dir_and_its_databases_are_private_to_the_gateway_s_user(start_gateway, tmp_path):
    state = tmp_path / "state"
    config = f"""
        server: {{state_dir: {state}}}
        models:
          - id: echo
            engine: scripted
            capture: true
    """
    old = os.umask(0o022)  # the usual one: files 0644, directories 0755 unless said
    try:
        gateway = start_gateway(config)
    finally:
        os.umask(old)
    body = {"model": "echo", "messages": [{"role": "user", "content": "my password"}]}
    assert httpx.post(f"{gateway.url}/v1/chat/completions", json=body).status_code == 200
    stored = {"model": "echo", "input": "a stored response"}
    assert httpx.post(f"{gateway.url}/v1/responses", json=stored).status_code == 200
    gateway.wait_event("request_finished")
    files = sorted(p.name for p in state.iterdir())
    assert {"activity.sqlite3", "activity.sqlite3-wal", "responses.sqlite3"} <= set(files)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in state.iterdir()}
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert modes == dict.fromkeys(files, 0o600), modes
