"""The Engine protocol: what a runner needs from a model, whatever runs it."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from typing import Protocol

import msgspec

from engines.batch import Batch
from schemas.canonical import (
    ChatRequest,
    Embedded,
    EmbedRequest,
    Output,
    Reranked,
    RerankRequest,
    SpeechRequest,
    Spoken,
    Transcribed,
    TranscribeRequest,
    Voice,
)
from schemas.events.models import SteeringAnnounced


class EngineState(enum.Enum):
    UNLOADED = "unloaded"
    DOWNLOADING = "downloading"  # fetching an `hf:` source before the load
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"


class LoadInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What a load cost and what it resolved, for the `model_attached` event."""

    memory_bytes: int  # weights plus the KV cache reserved for `context` tokens
    weights_bytes: int = 0  # of memory_bytes, the weights (0: the engine does not split them)
    context: int
    trained_context: int | None = None
    dimensions: int | None = None  # an embedding model's vector size
    # Requests decoded together as this load sized them (`concurrency: auto`); 0 where the
    # engine sizes none (the runner then takes the config's number, or 1).
    concurrency: int = 0
    detail: dict[str, str] = {}
    steering: dict[str, SteeringAnnounced] = {}  # by model id: each steered one's vector


class Capabilities(msgspec.Struct, frozen=True, kw_only=True):
    """What an engine can do, declared once, so no caller probes it with `getattr`.

    The runner refuses what an engine cannot do before it queues: a chat request to an
    engine without `chat`, an embedding to one without `embed`, image parts to one that
    does not read `images`, a rerank to one without `rerank`, audio to one without
    `transcribe`, text to read aloud to one without `speech`.
    """

    chat: bool = True
    embed: bool = False
    images: bool = False
    # Scores documents against a query: a cross-encoder, or an embedder by cosine.
    rerank: bool = False
    # Speech to text: an audio file in, its transcript out (the audio routes).
    transcribe: bool = False
    # Text to speech: text in, audio out, chunk by chunk (`POST /v1/audio/speech`).
    speech: bool = False

    @property
    def task(self) -> str:
        """What the model listings report: "embed" for an embedding-only engine, "rerank"
        for a reranker that neither chats nor embeds, "transcribe" for speech to text,
        "speech" for text to speech, else "chat"."""
        if self.chat:
            return "chat"
        if self.transcribe:
            return "transcribe"
        if self.speech:
            return "speech"
        return "embed" if self.embed else "rerank" if self.rerank else "chat"


class Engine(Protocol):
    """One model. Every method blocks and runs on its runner's own thread, never the loop.

    An engine has the methods its `capabilities` declare: `generate` where `chat`, `embed`
    where `embed`, `rerank` where `rerank`. None keeps a method only to refuse (a method
    that exists works); the runner refuses what an engine does not declare, before the
    request queues.
    """

    capabilities: Capabilities

    def estimate_memory(self) -> int:
        """Bytes a load will take, guessed before loading (for making room in the budget)."""
        ...

    def load(self, memory_left: int | None = None) -> LoadInfo:
        """Load the weights and size the context window within `memory_left` bytes."""
        ...

    def count_prompt(self, request: ChatRequest) -> int:
        """Tokens in the request's rendered prompt (chat template and special tokens); an
        engine without `chat` counts the messages' text as it reads it."""
        ...

    def generate(self, request: ChatRequest, cancelled: Callable[[], bool]) -> Iterator[Output]:
        """Yield text and tool-call outputs, then exactly one `Finished` (where `chat`).

        Stops within a token of `cancelled()` turning true.
        """
        ...

    def open_batch(self) -> Batch:
        """The batch the runner's thread steps its admitted requests through (where `chat`;
        an engine without it may still open an empty one, which no request joins)."""
        ...

    def embed(self, request: EmbedRequest) -> Embedded:
        """One vector per input (only where `capabilities.embed`)."""
        ...

    def rerank(self, request: RerankRequest) -> Reranked:
        """One relevance score per document, in order (only where `capabilities.rerank`)."""
        ...

    def transcribe(
        self, request: TranscribeRequest, on_segment: Callable[[str], None] | None = None
    ) -> Transcribed:
        """The audio's transcript, whole (only where `capabilities.transcribe`);
        `on_segment`, where given, hears each segment's text as soon as it is decoded."""
        ...

    def speak(
        self,
        request: SpeechRequest,
        on_chunk: Callable[[bytes], None],
        cancelled: Callable[[], bool],
    ) -> Spoken:
        """Read `request.text` aloud (only where `capabilities.speech`): each piece of
        encoded audio goes to `on_chunk` as soon as it is made; stops early once
        `cancelled()`."""
        ...

    def voices(self) -> list[Voice]:
        """The voices `speak` reads in (only where `capabilities.speech`)."""
        ...

    def reasons(self) -> bool:
        """Whether the model thinks of itself (its chat template opens a thinking block)."""
        ...

    def trim(self) -> None:
        """The runner went idle: give back what the last burst left cached (a no-op where
        nothing is cached)."""
        ...

    def unload(self) -> None: ...
