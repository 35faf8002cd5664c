"""Every engine declares what it does (`Capabilities`), and has the methods that go with it:
the runner refuses by capability, so no engine keeps a method only to refuse."""

from __future__ import annotations

import pytest

from engines.base import Capabilities
from engines.embed.engine import EmbeddingEngine
from engines.llm.engine import MLXEngine
from engines.llm.isolated import IsolatedEngine
from engines.process.engine import ProcessEngine
from engines.rerank.engine import RerankEngine
from engines.scripted import ScriptedEngine
from engines.speech.engine import WhisperEngine
from engines.tts.engine import KokoroEngine
from engines.upstream.engine import UpstreamEngine
from engines.vision.engine import VisionEngine

CHAT = ("count_prompt", "generate", "open_batch")

DECLARED = [
    (ScriptedEngine, Capabilities(chat=True)),
    (MLXEngine, Capabilities(chat=True)),
    (IsolatedEngine, Capabilities(chat=True)),
    (VisionEngine, Capabilities(chat=True, images=True)),
    (UpstreamEngine, Capabilities(chat=True)),
    (ProcessEngine, Capabilities(chat=True)),
    (EmbeddingEngine, Capabilities(chat=False, embed=True, rerank=True)),
    (RerankEngine, Capabilities(chat=False, rerank=True)),
    (WhisperEngine, Capabilities(chat=False, transcribe=True)),
    (KokoroEngine, Capabilities(chat=False, speech=True)),
]


@pytest.mark.parametrize(
    ("engine", "capabilities"), DECLARED, ids=lambda x: getattr(x, "__name__", "")
)
def test_each_engine_declares_what_it_does(engine, capabilities):
    assert engine.capabilities == capabilities
    assert not hasattr(engine, "reads_images")  # probed by getattr once; declared now


@pytest.mark.parametrize(
    ("engine", "capabilities"), DECLARED, ids=lambda x: getattr(x, "__name__", "")
)
def test_an_engine_embeds_and_reranks_only_where_it_declares_it(engine, capabilities):
    assert hasattr(engine, "embed") == capabilities.embed
    assert hasattr(engine, "rerank") == capabilities.rerank
    assert hasattr(engine, "transcribe") == capabilities.transcribe
    assert hasattr(engine, "speak") == hasattr(engine, "voices") == capabilities.speech
    if capabilities.chat:
        assert all(hasattr(engine, name) for name in CHAT)
    else:
        assert not hasattr(engine, "generate")
