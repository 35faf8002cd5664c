"""The LLM-style reranker (Qwen3-Reranker's yes/no) on a test-built tiny Qwen3 with seeded
random weights and a word-level tokenizer, checked against mlx-lm's own forward of each
prompt alone: the template, the scores, batching and the window's cut."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import msgspec
import pytest
from conftest import serving

from engines.rerank import causal
from engines.rerank.engine import RerankEngine
from schemas.canonical import RerankRequest
from schemas.config import ModelConfig

QUERY = "what is the capital of france"
DOCUMENTS = [
    "paris",
    "paris is the capital of france",
    "bananas are yellow",
    "the market fell on monday after the news about bananas",
]
SPECIAL = ["<|im_start|>", "<|im_end|>", "<think>", "</think>"]
WINDOW = 96


def words(text: str) -> list[str]:
    return re.findall(r"\w+|[^\w\s]+", text)


def build_checkpoint(directory: Path) -> None:
    """config.json, model.safetensors and a word-level tokenizer.json for a tiny Qwen3."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import qwen3
    from tokenizers import Tokenizer, models, pre_tokenizers

    texts = [causal.PREFIX, causal.SUFFIX, causal.INSTRUCTION, QUERY, *DOCUMENTS, "Query Document"]
    vocab = {"[UNK]": 0, "yes": 1, "no": 2}
    for token in [w for t in texts for w in words(t)] + SPECIAL:
        vocab.setdefault(token, len(vocab))
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.add_special_tokens(SPECIAL)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "intermediate_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "rms_norm_eps": 1e-6,
        "vocab_size": 128,
        "max_position_embeddings": WINDOW,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
    }
    assert len(vocab) <= config["vocab_size"]
    (directory / "config.json").write_text(json.dumps(config))
    mx.random.seed(54)
    model = qwen3.Model(qwen3.ModelArgs.from_dict(config))
    mx.eval(model.parameters())
    mx.save_safetensors(
        str(directory / "model.safetensors"), dict(tree_flatten(model.parameters()))
    )


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tiny-qwen3-reranker")
    build_checkpoint(directory)
    return directory


@pytest.fixture(scope="module")
def engine(checkpoint):
    config = msgspec.convert(
        {"id": "tiny-llm-ranker", "source": str(checkpoint), "task": "rerank"}, ModelConfig
    )
    engine = RerankEngine(config, None)
    engine.info = engine.load()
    yield engine
    engine.unload()


@pytest.fixture(scope="module")
def reference(checkpoint):
    """mlx-lm's own model and a plain tokenizer: P(yes) of one whole prompt, alone."""
    import mlx.core as mx
    from mlx_lm.utils import load_model
    from tokenizers import Tokenizer

    model, _ = load_model(checkpoint)
    tokenizer = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))

    def ids(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False).ids

    def score(prompt: list[int]) -> float:
        logits = model(mx.array([prompt]))[0, -1]
        no, yes = logits[2].item(), logits[1].item()
        return float(mx.softmax(mx.array([no, yes]))[1].item())

    return ids, score


def rerank(engine, query, documents, **fields):
    return engine.rerank(RerankRequest(query=query, documents=documents, **fields))


def test_each_score_is_p_yes_of_the_template_read_alone(engine, reference):
    ids, score = reference
    reranked = rerank(engine, QUERY, DOCUMENTS)
    prompts = [
        ids(causal.PREFIX) + ids(causal.body(QUERY, d)) + ids(causal.SUFFIX) for d in DOCUMENTS
    ]
    assert reranked.scores == pytest.approx([score(p) for p in prompts], abs=1e-5)
    assert reranked.prompt_tokens == sum(len(p) for p in prompts)
    assert all(0 < s < 1 for s in reranked.scores)
    assert len({round(s, 5) for s in reranked.scores}) == len(DOCUMENTS)
    assert engine.info.context == WINDOW and engine.info.detail["scorer"] == "yes/no of a causal LM"


def test_right_padded_batches_score_as_one_by_one(engine, monkeypatch):
    monkeypatch.setattr(causal, "DEFAULT_BATCH_TOKENS", 120)  # several batches
    batched = rerank(engine, QUERY, DOCUMENTS * 3)
    singles = [rerank(engine, QUERY, [d]).scores[0] for d in DOCUMENTS * 3]
    assert batched.scores == pytest.approx(singles, abs=1e-5)


def test_a_long_document_loses_its_end_and_the_template_is_kept(engine, reference):
    ids, score = reference
    long = "bananas are yellow " * 40
    room = WINDOW - len(ids(causal.PREFIX)) - len(ids(causal.SUFFIX))
    prompt = ids(causal.PREFIX) + ids(causal.body(QUERY, long))[:room] + ids(causal.SUFFIX)
    reranked = rerank(engine, QUERY, [long])
    assert reranked.prompt_tokens == WINDOW
    assert reranked.scores[0] == pytest.approx(score(prompt), abs=1e-5)


def test_the_gateway_serves_it_when_the_config_says_task_rerank(checkpoint, tmp_path, engine):
    expected = rerank(engine, QUERY, DOCUMENTS).scores
    config = f"""
    models:
      - id: tiny-llm-ranker
        source: {checkpoint}
        task: rerank
    """
    with serving(tmp_path, config) as gateway:
        gateway.wait_event("model_attached", model="tiny-llm-ranker", timeout=120)
        body = {"model": "tiny-llm-ranker", "query": QUERY, "documents": DOCUMENTS, "top_n": 2}
        response = httpx.post(gateway.url + "/v1/rerank", json=body, timeout=60)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    best = sorted(range(len(DOCUMENTS)), key=lambda i: -expected[i])[:2]
    assert [r["index"] for r in results] == best
    assert [r["relevance_score"] for r in results] == pytest.approx(
        [expected[i] for i in best], abs=1e-5
    )
