"""Text to speech over HTTP on a real gateway, through the openai SDK: a seeded random-weight
Kokoro (engines/tts/demo.py: mlx-audio's real architecture, small, its voice noise) read
through the real pipeline (espeak-ng G2P, voice packs, iSTFTNet at 24 kHz), every
response_format decoding to audio of the length generated, streamed as it is made, SSE,
the voices list, and bad input refused by name while the gateway keeps serving.

Kokoro's decoder runs ~10-50x slower than real time on this CPU (its 1024-channel convs),
so every clip here is a word or two at speed 4."""

from __future__ import annotations

import base64
import io
import json
import re

import av
import httpx
import openai
import pytest
from conftest import serving

from engines.tts.demo import build_kokoro

KEY, ADMIN = "sk-speech-0123456789", "adm-speech-9876543210"
AUTH = {"Authorization": f"Bearer {KEY}"}
RATE = 24_000


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    kokoro = build_kokoro(tmp_path_factory.mktemp("kokoro") / "kokoro")
    config = f"""
server:
  api_keys:
    - {{key: {KEY}, label: talker}}
  admin_key: {ADMIN}
  fallback: echo
models:
  - id: kokoro
    source: {kokoro}
    aliases: [tts-1]
  - id: echo
    engine: scripted
"""
    with serving(tmp_path_factory.mktemp("speech"), config) as process:
        yield process


@pytest.fixture(scope="module")
def client(gateway) -> openai.OpenAI:
    return gateway.openai(api_key=KEY)


def seconds_of(data: bytes, response_format: str) -> tuple[int, float]:
    """The sample rate and length of an answer's audio, decoded by PyAV (pcm: counted)."""
    if response_format == "pcm":
        return RATE, len(data) / 2 / RATE
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        samples = sum(frame.samples for frame in container.decode(stream))
        return stream.rate, samples / stream.rate


def test_every_response_format_decodes_to_the_audio_generated(gateway, client):
    for made, response_format in enumerate(("wav", "pcm", "mp3", "opus", "aac", "flac"), 1):
        answer = client.audio.speech.create(
            model="tts-1", input="Hi.", voice="af_heart", response_format=response_format,
            speed=4.0,
        )  # fmt: skip
        event = gateway.wait_events("generated", count=made, model="kokoro")[-1]
        rate, length = seconds_of(answer.content, response_format)
        # Opus is decoded at 48 kHz whatever it was encoded from (RFC 7845).
        assert rate == (48_000 if response_format == "opus" else RATE), response_format
        generated = event["audio_out_seconds"]
        assert 0.05 < generated < 2.0
        # Lossy codecs pad their first and last frames (encoder delay): within 0.1 s.
        exact = response_format in ("wav", "pcm", "flac")
        assert abs(length - generated) < (1e-3 if exact else 0.1), (response_format, length)
        assert event["stop_reason"] == "spoken" and event["real_time_factor"] > 0
    assert len(gateway.events("generated", model="kokoro")) == 6
    assert gateway.wait_event("request_routed", requested="tts-1")["served"] == "kokoro"


def test_audio_streams_before_the_last_sentence_is_made(gateway, client):
    before = len(gateway.events("generated", model="kokoro"))
    with client.audio.speech.with_streaming_response.create(
        model="kokoro", input="Hi. Go. Yes.", voice="am_adam", response_format="pcm", speed=4.0
    ) as response:
        assert response.headers["content-type"] == "audio/pcm"
        chunks = response.iter_bytes()
        first = next(chunks)
        # The first sentence's audio is here while the speech is still being made.
        assert first and len(gateway.events("generated", model="kokoro")) == before
        rest = b"".join(chunks)
    event = gateway.wait_events("generated", count=before + 1, model="kokoro")[-1]
    assert len(first) < len(first + rest)
    assert abs((len(first) + len(rest)) / 2 / RATE - event["audio_out_seconds"]) < 1e-3


def test_stream_format_sse_sends_deltas_then_done_with_usage(gateway):
    body = {
        "model": "kokoro", "input": "Hi. Go.", "voice": "bf_emma", "response_format": "wav",
        "speed": 4.0, "stream_format": "sse",
    }  # fmt: skip
    with httpx.stream(
        "POST", gateway.url + "/v1/audio/speech", json=body, headers=AUTH, timeout=300
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [
            json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")
        ]
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "speech.audio.done" and set(kinds[:-1]) == {"speech.audio.delta"}
    assert len(kinds) >= 3  # one delta a sentence at least
    usage = events[-1]["usage"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    audio = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    rate, length = seconds_of(audio, "wav")
    # Kokoro's duration frames are 600 samples (25 ms) at 24 kHz: output_tokens counts them.
    assert rate == RATE and abs(length - usage["output_tokens"] * 600 / RATE) < 1e-3


def test_voices_lists_the_models_voices(client):
    listed = client.get("/audio/voices", cast_to=httpx.Response, options={"params": {}}).json()
    assert listed["object"] == "list"
    assert {(v["id"], v["language"]) for v in listed["data"]} == {
        ("af_heart", "en-us"), ("am_adam", "en-us"), ("bf_emma", "en-gb"),
    }  # fmt: skip
    assert {v["model"] for v in listed["data"]} == {"kokoro"}
    one = client.get("/audio/voices?model=tts-1", cast_to=httpx.Response).json()
    assert [v["id"] for v in one["data"]] == ["af_heart", "am_adam", "bf_emma"]


@pytest.mark.parametrize(
    ("fields", "status", "message"),
    [
        ({"voice": "alloy"}, 400, "voice: 'alloy' is not a voice of model 'kokoro'"),
        ({"model": "echo"}, 400, "it does not speak"),
        ({"model": "nobody"}, 404, "text-to-speech models: kokoro"),
        ({"input": "  "}, 400, "input: empty"),
        ({"input": "a" * 4097}, 400, "input: 4097 characters"),
        ({"instructions": "whisper it"}, 400, "instructions:"),
        ({"speed": 5.0}, 400, "speed: 5.0 is outside 0.25 to 4.0"),
        ({"response_format": "ogg"}, 400, "response_format"),
        ({"stream_format": "ws"}, 400, "stream_format"),
        ({"seed": 1}, 400, "seed"),
    ],
)
def test_bad_input_is_a_4xx_naming_it(gateway, fields, status, message):
    body = {"model": "kokoro", "input": "Hi.", "voice": "af_heart", **fields}
    response = httpx.post(gateway.url + "/v1/audio/speech", json=body, headers=AUTH, timeout=60)
    assert response.status_code == status, response.text
    assert message in response.json()["error"]["message"]


def test_sdk_errors_chat_to_kokoro_and_voices_of_a_chat_model(gateway, client):
    with pytest.raises(openai.BadRequestError, match="voice: 'nova'"):
        client.audio.speech.create(model="kokoro", input="Hi.", voice="nova")
    with pytest.raises(openai.BadRequestError, match="text-to-speech model"):
        client.chat.completions.create(model="kokoro", messages=[{"role": "user", "content": "x"}])
    refused = httpx.get(gateway.url + "/v1/audio/voices?model=echo", headers=AUTH)
    assert refused.status_code == 400 and "has no voices" in refused.json()["error"]["message"]


def test_still_serving_and_counted_in_metrics(gateway, client):
    answer = client.audio.speech.create(
        model="kokoro", input="Go.", voice="af_heart", response_format="pcm", speed=4.0
    )
    assert answer.content
    metrics = httpx.get(gateway.url + "/metrics", headers={"Authorization": f"Bearer {ADMIN}"})
    made = re.search(r'^gateway_speech_seconds_total\{model="kokoro"\} (\S+)$', metrics.text, re.M)
    busy = re.search(
        r'^gateway_speech_generate_seconds_total\{model="kokoro"\} (\S+)$', metrics.text, re.M
    )
    assert made and float(made.group(1)) > 0.05
    assert busy and float(busy.group(1)) > 0
