"""A whole float is an integer (JSON Schema, the OpenAI spec): `"seed": 5.0` is accepted in
every protocol's integer fields; `5.5` and the string `"5"` are refused by name."""

from __future__ import annotations

import httpx
import msgspec
import pytest
from conftest import serving

from gateway.http.whole import INT_GOT_FLOAT, decode_whole
from schemas import embeddings, openai

HI = [{"role": "user", "content": "hi"}]
CONFIG = "models:\n  - id: echo\n    engine: scripted\n"
# (path, body with whole floats in integer fields, the field then given 0.5 more)
CASES = [
    (
        "/v1/chat/completions",
        {
            "messages": HI,
            "seed": -139838.0,
            "n": 2.0,
            "max_tokens": 8.0,
            "top_logprobs": 2.0,
            "logprobs": True,
        },
        "seed",
    ),
    (
        "/v1/completions",
        {"prompt": "hi", "max_tokens": 8.0, "logprobs": 1.0, "seed": 3.0},
        "logprobs",
    ),
    ("/v1/messages", {"messages": HI, "max_tokens": 8.0, "top_k": 5.0}, "max_tokens"),
    ("/v1/responses", {"input": "hi", "max_output_tokens": 16.0}, "max_output_tokens"),
    (
        "/api/chat",
        {"messages": HI, "stream": False, "options": {"num_predict": 8.0, "seed": 1.0}},
        "num_predict",
    ),
    ("/api/generate", {"prompt": "hi", "stream": False, "options": {"num_ctx": 2048.0}}, "num_ctx"),
]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("whole"), CONFIG) as process:
        yield process


@pytest.mark.parametrize(("path", "body", "field"), CASES)
def test_whole_floats_are_integers_and_fractions_are_refused_by_name(gateway, path, body, field):
    body = {"model": "echo", **body}
    response = httpx.post(gateway.url + path, json=body, timeout=30)
    assert response.status_code == 200, response.text
    holder = body.get("options", body)
    holder[field] += 0.5
    response = httpx.post(gateway.url + path, json=body, timeout=30)
    assert response.status_code == 400, response.text
    assert f"$.{field}" in response.text or f"$.options.{field}" in response.text
    assert INT_GOT_FLOAT.search(response.text), response.text


def test_strings_stay_refused_and_token_arrays_take_whole_floats():
    chat = {"model": "m", "messages": HI, "seed": "5"}
    with pytest.raises(msgspec.ValidationError, match=r"\$\.seed"):
        decode_whole(msgspec.json.encode(chat), openai.ChatCompletionRequest)
    nested = {"model": "m", "input": [[1.0, 2.0], [3.0]], "dimensions": 4.0}
    request = decode_whole(msgspec.json.encode(nested), embeddings.EmbeddingRequest)
    assert request.input == [[1, 2], [3]] and request.dimensions == 4
    assert type(request.dimensions) is int
