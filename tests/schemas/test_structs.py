"""The two kinds of struct in schemas/: config is strict (a typo fails loudly), wire formats
are lenient (clients send fields we do not model), and the canonical request is frozen."""

import importlib
import inspect

import msgspec
import pytest

from schemas.config import ModelConfig, Strict
from schemas.wire import Wire

WIRE_MODULES = ["openai", "openai_completions", "openai_responses", "anthropic", "ollama",
                "embeddings"]  # fmt: skip


def structs_of(module_name: str) -> list[type[msgspec.Struct]]:
    """The structs defined in `schemas.<module_name>`, or in its modules when a package."""
    module = importlib.import_module(f"schemas.{module_name}")
    return [
        cls
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, msgspec.Struct)
        and (cls.__module__ == module.__name__ or cls.__module__.startswith(f"{module.__name__}."))
    ]


def test_every_config_struct_is_strict():
    structs = structs_of("config")
    assert len(structs) > 10
    assert [cls.__name__ for cls in structs if not issubclass(cls, Strict)] == []
    with pytest.raises(msgspec.ValidationError, match="residncy"):
        msgspec.convert({"id": "m", "residncy": "pinned"}, ModelConfig)


@pytest.mark.parametrize("module", WIRE_MODULES)
def test_every_request_struct_of_a_wire_format_is_lenient(module):
    requests = [cls for cls in structs_of(module) if cls.__name__.endswith("Request")]
    assert requests, module
    for cls in requests:
        assert issubclass(cls, Wire), cls
        assert not cls.__struct_config__.forbid_unknown_fields, cls


def test_a_wire_struct_ignores_a_field_it_does_not_model():
    from schemas.openai import ChatCompletionRequest

    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "x_new": 1}'
    assert msgspec.json.decode(body, type=ChatCompletionRequest).model == "m"


def test_the_canonical_request_is_frozen():
    from schemas.canonical import ChatRequest, Message

    request = ChatRequest(messages=[Message(role="user", content="hi")], max_tokens=8)
    with pytest.raises(AttributeError):
        request.max_tokens = 5


def test_defaults_carry_every_model_key_but_id_and_the_table_names_each():
    from schemas.config import ModelSettings
    from schemas.config_keys import MODEL_KEYS

    model_keys = [f.name for f in msgspec.structs.fields(ModelConfig) if f.name != "id"]
    settings = msgspec.structs.fields(ModelSettings)
    assert [f.name for f in settings] == model_keys == list(MODEL_KEYS)
    assert all(f.default is None for f in settings)  # absent: the model's own default
    assert issubclass(ModelSettings, Strict)
