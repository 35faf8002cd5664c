"""What the real-client tests share: where the JS clients are installed (`./setup.sh test`
runs `npm ci` in tests/clients/js) and the environment that keeps every client offline."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

JS = Path(__file__).resolve().parent / "js"
CLAUDE = JS / "node_modules" / ".bin" / "claude"

# No telemetry, no update checks, no error reports, nothing but the gateway.
OFFLINE = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DO_NOT_TRACK": "1",
    "NEXT_TELEMETRY_DISABLED": "1",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # LiteLLM fetches its price list otherwise
    "LITELLM_TELEMETRY": "False",
    "LANGCHAIN_TRACING_V2": "false",
    "NO_PROXY": "127.0.0.1,localhost",
}


def require_js() -> None:
    """Fail (not skip) when the JS clients are not installed: CI must run them."""
    if not (JS / "node_modules" / "ai").is_dir() or not CLAUDE.exists():
        pytest.fail(
            "the JS clients are not installed: run ./setup.sh test (npm ci in tests/clients/js)"
        )


def node(script: str, *args: str, timeout: float = 300) -> dict:
    """Run `node tests/clients/js/SCRIPT ARGS...` and return the JSON object it prints."""
    require_js()
    run = subprocess.run(
        ["node", str(JS / script), *args],
        cwd=JS,
        env={**os.environ, **OFFLINE},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])
