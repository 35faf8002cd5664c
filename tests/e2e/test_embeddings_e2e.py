"""End to end: embeddings from `gateway serve` on the shipped config, via `openai` and `ollama`."""

from __future__ import annotations

import sys

import httpx
import numpy as np
import ollama
import openai
import pytest
from conftest import run_example

FOOD = "A man is eating food."
BREAD = "A man is eating a piece of bread."
BABY = "The girl is carrying a baby."


def post(gateway, path, **body):
    return httpx.post(f"{gateway.url}{path}", json=body, timeout=60)


def test_the_model_attaches_with_its_window_and_size(gateway):
    attached = gateway.wait_event("model_attached", model="minilm", timeout=60)
    assert attached["context"] == 256
    assert attached["detail"]["dimensions"] == "384"
    assert attached["detail"]["openai_token_ids"] == "cl100k_base"
    assert 85_000_000 < attached["memory_bytes"] < 95_000_000


def test_float_and_base64_vectors_are_equal(openai_client):
    floats = openai_client.embeddings.create(model="minilm", input=FOOD, encoding_format="float")
    # The openai package asks for base64 when no format is given, and decodes it itself.
    decoded = openai_client.embeddings.create(model="minilm", input=FOOD)
    assert floats.model == decoded.model == "minilm"
    assert floats.object == "list" and floats.data[0].object == "embedding"
    vector = np.array(floats.data[0].embedding, dtype=np.float32)
    assert vector.shape == (384,) and abs(np.linalg.norm(vector) - 1) < 1e-5
    assert np.array_equal(vector, np.array(decoded.data[0].embedding, dtype=np.float32))


def test_a_batch_keeps_order_and_meaning(openai_client):
    batch = openai_client.embeddings.create(model="all-minilm", input=[FOOD, BREAD, BABY])
    assert [item.index for item in batch.data] == [0, 1, 2]
    food, bread, baby = (np.array(item.embedding) for item in batch.data)
    assert food @ bread > food @ baby + 0.5
    single = openai_client.embeddings.create(model="minilm", input=BABY)
    assert np.allclose(single.data[0].embedding, baby, atol=1e-5)
    assert batch.usage.prompt_tokens == batch.usage.total_tokens > single.usage.prompt_tokens


def test_usage_equals_the_generated_event(gateway, openai_client):
    raw = openai_client.embeddings.with_raw_response.create(model="minilm", input=[FOOD, BABY])
    request_id = raw.headers["x-request-id"]
    usage = raw.parse().usage
    generated = gateway.wait_event("generated", request_id=request_id)
    assert usage.prompt_tokens == generated["prompt_tokens"] == 8 + 9  # [CLS] + pieces + [SEP]
    assert generated["model"] == "minilm" and generated["stop_reason"] == "embedded"
    routed = gateway.wait_event("request_routed", request_id=request_id)
    assert (routed["protocol"], routed["stream"], routed["served"]) == ("openai", False, "minilm")


def test_a_chat_model_refuses_to_embed(openai_client):
    for model in ("smollm2", "echo"):
        with pytest.raises(openai.BadRequestError, match="chat model; it does not embed"):
            openai_client.embeddings.create(model=model, input=FOOD)


def test_the_embedding_model_refuses_to_chat(openai_client):
    hello = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.BadRequestError, match="'minilm' is an embedding model"):
        openai_client.chat.completions.create(model="minilm", messages=hello)
    # Streamed too: the error comes before the stream starts, so it keeps its status.
    with pytest.raises(openai.BadRequestError, match="'minilm' is an embedding model"):
        openai_client.chat.completions.create(model="minilm", messages=hello, stream=True)


def test_token_ids_are_read_as_cl100k_base_text(openai_client):
    """OpenAI's token ids (cl100k_base: 32 = "A", 893 = " man", ...) embed as the text they
    spell, one list of ids or several."""
    ids = [32, 893, 374, 12459, 3691, 13]  # "A man is eating food."
    by_text = openai_client.embeddings.create(model="minilm", input=FOOD, encoding_format="float")
    one = openai_client.embeddings.create(model="minilm", input=ids, encoding_format="float")
    many = openai_client.embeddings.create(
        model="minilm", input=[ids, ids], encoding_format="float"
    )
    assert np.allclose(one.data[0].embedding, by_text.data[0].embedding, atol=1e-6)
    assert len(many.data) == 2 and np.allclose(
        many.data[1].embedding, by_text.data[0].embedding, atol=1e-6
    )
    assert one.usage.prompt_tokens == by_text.usage.prompt_tokens  # MiniLM's pieces, not ids


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"input": [[15339, 200000]]}, "$.input[0][1]: 200000 is not a cl100k_base token id"),
        ({"input": [15339, 100262]}, "$.input[1]: 100262 is not a cl100k_base token id"),
        ({"input": [[15339], []]}, "$.input[1]: empty input"),
        ({"input": ["hello", 15339]}, "$.input[1]: a token id among texts"),
        ({"input": [FOOD, ""]}, "$.input[1]: empty input"),
        ({"input": ""}, "$.input: empty input"),
        ({"input": []}, "$.input"),
        ({"input": ["x"] * 2049}, "$.input"),
        ({"input": FOOD, "dimensions": 100}, "384-dimensional"),
        ({"input": FOOD, "dimensions": 0}, "$.dimensions"),
        ({"input": FOOD, "encoding_format": "hex"}, "$.encoding_format"),
    ],
)
def test_bad_requests_are_400s_naming_the_field(gateway, body, message):
    reply = post(gateway, "/v1/embeddings", model="minilm", **body)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and message in error["message"]


def test_dimensions_equal_to_the_model_are_fine(openai_client):
    reply = openai_client.embeddings.create(model="minilm", input=FOOD, dimensions=384)
    assert len(reply.data[0].embedding) == 384


def test_ollama_embed_matches_openai(gateway, openai_client, ollama_client):
    reply = ollama_client.embed(model="all-minilm", input=[FOOD, BABY])
    assert reply.model == "minilm" and reply.prompt_eval_count == 17
    assert reply.total_duration > 0
    openai_reply = openai_client.embeddings.create(model="minilm", input=[FOOD, BABY])
    for mine, theirs in zip(reply.embeddings, openai_reply.data, strict=True):
        assert np.allclose(mine, theirs.embedding, atol=1e-6)
    one = ollama_client.embed(model="minilm", input=FOOD)
    assert len(one.embeddings) == 1 and len(one.embeddings[0]) == 384
    routed = gateway.events("request_routed", protocol="ollama", served="minilm")
    assert routed and routed[-1]["stream"] is False


def test_ollama_truncation_and_errors(gateway, ollama_client):
    long = "hello " * 600
    assert ollama_client.embed(model="minilm", input=long).prompt_eval_count == 256
    with pytest.raises(ollama.ResponseError, match="602 tokens") as refused:
        ollama_client.embed(model="minilm", input=long, truncate=False)
    assert refused.value.status_code == 400
    with pytest.raises(ollama.ResponseError, match="chat model") as chat:
        ollama_client.embed(model="smollm2", input=FOOD)
    assert chat.value.status_code == 400
    # An empty input only loads the model, as with Ollama itself.
    assert ollama_client.embed(model="minilm", input="").embeddings == []
    reply = post(gateway, "/api/embed", model="minilm", input=[FOOD, ""])
    assert reply.status_code == 400 and "$.input[1]" in reply.json()["error"]


def test_the_example_runs(gateway):
    done = run_example(gateway, sys.executable, "examples/openai_embeddings.py")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "384 dimensions" in lines[0]
    assert lines[1].endswith(BREAD)  # the closest sentence comes first


def test_ollama_names_with_latest_and_the_legacy_embeddings_route(gateway, ollama_client):
    # `name:latest` resolves on every Ollama route, as chat's does.
    tagged = ollama_client.embed(model="all-minilm:latest", input=FOOD).embeddings[0]
    plain = ollama_client.embed(model="minilm", input=FOOD).embeddings[0]
    assert np.allclose(tagged, plain)
    # The older route: `prompt` in, one `embedding` out (the ollama package's `embeddings`).
    legacy = ollama_client.embeddings(model="minilm:latest", prompt=FOOD).embedding
    assert np.allclose(legacy, plain)
    assert post(gateway, "/api/embeddings", model="minilm", prompt="").json() == {"embedding": []}
    routed = gateway.wait_event("request_routed", requested="minilm:latest")
    assert (routed["served"], routed["protocol"]) == ("minilm", "ollama")


def test_ollama_embedding_options_are_refused_by_name_and_keep_alive_is_read(gateway):
    refused = post(gateway, "/api/embed", model="minilm", input=FOOD, options={"num_ctx": 64})
    assert refused.status_code == 400 and "$.options.num_ctx" in refused.json()["error"]
    unset = post(gateway, "/api/embed", model="minilm", input=FOOD, options={"num_ctx": None})
    assert unset.status_code == 200  # clients send every option they know, unset ones null
    bad = post(gateway, "/api/embeddings", model="minilm", prompt=FOOD, keep_alive="soon")
    assert bad.status_code == 400 and "$.keep_alive" in bad.json()["error"]
