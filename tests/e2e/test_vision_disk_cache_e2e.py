"""The disk tier under a vision model's block cache, through the real gateway (issue 26):
the demo VLM (the real SmolLM2 behind a seeded vision tower) asked about a picture, then
again after a restart, after an unload, and with its blocks damaged. Each answer must be
the one a model without any cache gives at temperature 0; a different picture must find no
block of the first's."""

from __future__ import annotations

import base64
import io
import textwrap
from pathlib import Path

import httpx
import numpy as np
import pytest
from conftest import GatewayProcess, free_port
from PIL import Image

from engines.vision.demo import build_demo_vlm

pytestmark = pytest.mark.e2e

# ~200 tokens of text before the picture: blocks of 16 tokens, most of the prompt.
SYSTEM = " ".join(f"Rule {i}: describe what you see in few words." for i in range(20))


def png(seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 255, (100, 150, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    return out.getvalue()


A, B = png(1), png(2)


def config(demo: Path, cache: Path) -> str:
    return textwrap.dedent(f"""
        server:
          cache: {{dir: {cache}, max_bytes: 2GiB}}
        models:
          - id: plain
            source: {demo}
            context: {{max: 2048}}
            residency: {{on_demand: true}}
            prefix_reuse: false
            disk_cache: false
          - id: vlm
            source: {demo}
            context: {{max: 2048}}
            residency: {{on_demand: true}}
            concurrency: 2
    """)


def ask(gateway: GatewayProcess, model: str, image: bytes) -> str:
    url = "data:image/png;base64," + base64.b64encode(image).decode()
    content = [
        {"type": "image_url", "image_url": {"url": url}},
        {"type": "text", "text": "Describe this picture."},
    ]
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": content}]
    body = {"model": model, "temperature": 0, "max_tokens": 8, "messages": messages}
    reply = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=600)
    assert reply.status_code == 200, reply.text
    return reply.json()["choices"][0]["message"]["content"]


def start(directory: Path, text: str, n: int) -> GatewayProcess:
    path = directory / f"models-{n}.yaml"
    path.write_text(text)
    gateway = GatewayProcess(path, directory / f"events-{n}.jsonl", port=free_port())
    gateway.wait_ready()
    return gateway


def unload(gateway: GatewayProcess) -> None:
    """An admin unload; it waits for the disk writes under way."""
    reply = httpx.post(f"{gateway.url}/admin/models/vlm/unload", timeout=120)
    assert reply.json()["state"] == "unloaded"


def blocks_in(cache: Path) -> list[Path]:
    return sorted(cache.glob("*/*.safetensors"))


def test_a_restart_reads_a_vision_prompt_from_disk_keyed_by_its_picture(tmp_path):
    demo, cache = build_demo_vlm(), tmp_path / "kv"
    first = start(tmp_path, config(demo, cache), 0)
    try:
        plain = {name: ask(first, "plain", image) for name, image in (("A", A), ("B", B))}
        assert not blocks_in(cache)  # disk_cache: false saves nothing
        assert ask(first, "vlm", A) == plain["A"]
        attached = first.wait_event("model_attached", model="vlm")
        assert "keyed by image" in attached["detail"]["disk_cache"]
        saved = first.wait_event("cache_saved", timeout=30, model="vlm")
        assert saved["tokens"] >= 128 and saved["blocks"] == saved["tokens"] // 16
    finally:
        first.stop()

    second = start(tmp_path, config(demo, cache), 1)
    try:
        assert ask(second, "vlm", A) == plain["A"]
        (again,) = second.wait_events("generated", 1, model="vlm")
        prompt = again["prompt_tokens"]
        assert prompt - 32 < again["reused_disk_tokens"] < prompt  # all but the tail
        assert again["reused_prefix_tokens"] == again["reused_disk_tokens"]
        assert again["disk_load_s"] > 0 and again["image_tokens"] > 0
        # Another picture: its blocks are salted with its own hash, none is A's.
        assert ask(second, "vlm", B) == plain["B"]
        other = second.wait_events("generated", 2, model="vlm")[-1]
        assert other["reused_prefix_tokens"] == 0 and other["reused_disk_tokens"] == 0
        assert not second.events("cache_corrupt")

        # Unloaded (as an idle or budget eviction would): RAM's blocks are gone, disk's not.
        unload(second)
        assert ask(second, "vlm", A) == plain["A"]
        after_unload = second.wait_events("generated", 3, model="vlm")[-1]
        assert after_unload["reused_disk_tokens"] > prompt - 32

        # Every block cut short: the first one read is removed and reported, A is prefilled.
        unload(second)
        for block in blocks_in(cache):
            block.write_bytes(block.read_bytes()[: block.stat().st_size // 2])
        assert ask(second, "vlm", A) == plain["A"]
        assert second.wait_event("cache_corrupt", model="vlm")["reason"] == "cut short"
        assert second.wait_events("generated", 4, model="vlm")[-1]["reused_prefix_tokens"] == 0
    finally:
        second.stop()
