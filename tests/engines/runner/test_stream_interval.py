"""`stream_interval`: a busy batch's tokens go out several to a frame, a lone stream's and
every stream's first token one by one; by default ("0ms") every token has its frame. Through the real gateway
on scripted models and the official `openai` client."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

WORDS = [f"w{i}" for i in range(1, 25)]
REPLY = " ".join(WORDS)
CONFIG = f"""
models:
  - id: held
    engine: scripted
    concurrency: 2
    stream_interval: 150ms
    script: {{reply: "{REPLY}", token_delay: 0.01}}
  - id: every
    engine: scripted
    concurrency: 2
    script: {{reply: "{REPLY}", token_delay: 0.01}}
"""
HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture
def gateway(start_gateway):
    return start_gateway(CONFIG)


def frames(gateway, model: str, clients: int) -> list[list[str]]:
    """Each client's content frames, the clients streaming at once."""

    async def one(client: openai.AsyncOpenAI) -> list[str]:
        stream = await client.chat.completions.create(model=model, messages=HELLO, stream=True)
        return [c.choices[0].delta.content async for c in stream if c.choices[0].delta.content]

    async def all_of_them() -> list[list[str]]:
        async with openai.AsyncOpenAI(
            base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0
        ) as client:
            return await asyncio.gather(*(one(client) for _ in range(clients)))

    return asyncio.run(all_of_them())


def test_a_busy_batch_sends_several_tokens_a_frame_and_each_first_token_alone(gateway):
    lone = frames(gateway, "every", 1)[0]
    assert "".join(lone) == REPLY
    for stream in frames(gateway, "held", 2):
        assert "".join(stream) == REPLY  # nothing lost, nothing out of order
        assert stream[0] == lone[0]  # the first token is never held
        # 24 tokens 20-40 ms apart under two streams, held up to 150 ms: a handful of frames.
        assert len(stream) <= len(lone) // 3


def test_the_default_and_a_lone_stream_frame_every_token(gateway):
    lone = frames(gateway, "held", 1)[0]
    assert len(lone) == len(WORDS)
    for stream in frames(gateway, "every", 2):
        assert stream == lone


def test_a_reload_retunes_it_in_place(gateway, tmp_path):
    (config,) = tmp_path.glob("models-*.yaml")
    config.write_text(
        CONFIG.replace("  - id: every\n", "  - id: every\n    stream_interval: 150ms\n")
    )
    diff = httpx.post(f"{gateway.url}/admin/reload", timeout=30).json()
    assert diff["changed"] == ["every"] and "every" not in diff["restarted"]
    for stream in frames(gateway, "every", 2):
        assert "".join(stream) == REPLY
        assert len(stream) <= len(WORDS) // 3
