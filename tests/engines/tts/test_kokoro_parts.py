"""The text-to-speech engine's parts, in-process: the espeak-ng frontend (sentences, pieces
within Kokoro's 510 phonemes), the streaming encoders (each format decodes to the samples
pushed), the Kokoro directory as a source (found, its task inferred, refused by what it
lacks), voices refused by name, and a speech stopped at the next piece once cancelled."""

from __future__ import annotations

import io
import shutil

import av
import msgspec
import numpy as np
import pytest

from engines.errors import BadRequest, SourceError
from engines.factory import infer_task
from engines.sources.kokoro_dir import check_kokoro_dir
from engines.sources.resolve import check_source
from engines.tts.demo import build_kokoro
from engines.tts.encode import AudioEncoder
from engines.tts.engine import KokoroEngine
from engines.tts.frontend import MAX_PHONEMES, language_of, phonemize, pieces, sentences
from schemas.canonical import SpeechRequest
from schemas.config import ModelConfig

RATE = 24_000


@pytest.fixture(scope="module")
def kokoro(tmp_path_factory):
    return build_kokoro(
        tmp_path_factory.mktemp("kokoro") / "kokoro", voices=("af_heart", "bf_emma", "jf_alpha")
    )


def test_sentences_and_pieces_within_kokoros_window():
    assert sentences("Ever tried. Ever failed!\nNo matter…  Try again") == [
        "Ever tried.", "Ever failed!", "No matter…", "Try again",
    ]  # fmt: skip
    assert phonemize("Try again.", "en-us") == "tɹˈI ɐɡˈɛn."
    long = " ".join(["fail better"] * 120) + "."
    cut = list(pieces(long, "en-us"))
    assert len(cut) > 1 and all(0 < len(p) <= MAX_PHONEMES for _, p in cut)
    assert " ".join(p for _, p in cut) == phonemize(long, "en-us")
    assert language_of("af_heart") == "en-us" and language_of("bf_emma") == "en-gb"
    assert language_of("zf_xiaobei") is None


def _decoded(data: bytes) -> tuple[int, float]:
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        return stream.rate, sum(f.samples for f in container.decode(stream)) / stream.rate


@pytest.mark.parametrize("response_format", ["mp3", "opus", "aac", "flac", "wav", "pcm"])
def test_each_format_streams_and_decodes_to_what_was_pushed(response_format):
    tone = (0.3 * np.sin(np.arange(RATE) * 2 * np.pi * 440 / RATE)).astype(np.float32)
    encoder = AudioEncoder(response_format, RATE)
    pieces = [encoder.push(tone) for _ in range(3)]
    pieces.append(encoder.close())
    assert sum(1 for p in pieces[:3] if p) >= 2  # bytes come out before the end
    data = b"".join(pieces)
    if response_format == "pcm":
        samples = np.frombuffer(data, "<i2")
        assert len(samples) == 3 * RATE and abs(samples.max() / 32767 - 0.3) < 0.01
        return
    rate, seconds = _decoded(data)
    assert rate == (48_000 if response_format == "opus" else RATE)
    assert abs(seconds - 3.0) < (1e-6 if response_format in ("wav", "flac") else 0.1)


def test_a_kokoro_directory_is_a_source_of_task_speech(kokoro, tmp_path):
    assert check_source("k", str(kokoro)) == kokoro  # no tokenizer or model*.safetensors asked
    assert infer_task(ModelConfig(id="k", source=str(kokoro)), None) == "speech"
    bare = tmp_path / "bare"
    shutil.copytree(kokoro, bare, ignore=shutil.ignore_patterns("voices"))
    with pytest.raises(SourceError, match=r"missing voices/\*\.safetensors"):
        check_kokoro_dir("k", bare)


@pytest.fixture(scope="module")
def engine(kokoro):
    config = msgspec.convert({"id": "k", "source": str(kokoro), "task": "speech"}, ModelConfig)
    engine = KokoroEngine(config, None)
    assert [v.name for v in engine.voices()] == ["af_heart", "bf_emma"]  # before the load too
    engine.load()
    return engine


def test_voices_refused_by_name(engine):
    never = lambda: False  # noqa: E731
    with pytest.raises(BadRequest, match="voice: 'alloy' is not a voice of model 'k'"):
        engine.speak(SpeechRequest(text="Hi.", voice="alloy"), print, never)
    with pytest.raises(BadRequest, match="voice: 'jf_alpha' reads Japanese"):
        engine.speak(SpeechRequest(text="Hi.", voice="jf_alpha"), print, never)


def test_a_cancelled_speech_stops_at_the_next_piece(engine):
    chunks: list[bytes] = []
    asked = SpeechRequest(text="Hi. Go. Yes.", voice="af_heart", speed=4.0, response_format="pcm")
    spoken = engine.speak(asked, chunks.append, cancelled=lambda: bool(chunks))
    assert spoken.segments == 1 and spoken.audio_seconds > 0
    assert len(b"".join(chunks)) == round(spoken.audio_seconds * RATE) * 2


def test_hf_source_fetches_the_kokoro_layout(kokoro, tmp_path, monkeypatch):
    """`source: hf:prince-canuma/Kokoro-82M` against a local stand-in for the Hub in that
    repository's layout: the weights and voice packs come, the README does not, and the
    snapshot is a Kokoro source."""
    from hub_server import FakeHub, Repo

    from engines.sources.hub import fetch

    commit = "c" * 40
    files = {
        "config.json": kokoro / "config.json",
        "kokoro-v1_0.safetensors": kokoro / "kokoro-demo.safetensors",
        "README.md": kokoro / "config.json",
        **{f"voices/{p.name}": p for p in (kokoro / "voices").iterdir()},
    }
    repos = {"prince-canuma/Kokoro-82M": Repo({commit: files}, {"main": commit})}
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with FakeHub(repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        snapshot = fetch("k", "hf:prince-canuma/Kokoro-82M")
        got = {
            path.split("/resolve/", 1)[-1].split("/", 1)[-1] for path, _ in hub.file_requests("GET")
        }
    assert got == set(files) - {"README.md"}
    assert check_source("k", "hf:prince-canuma/Kokoro-82M") == snapshot.path
    config = ModelConfig(id="k", source="hf:prince-canuma/Kokoro-82M")
    assert infer_task(config, None) == "speech"
    assert [v.name for v in KokoroEngine(config, None).voices()] == ["af_heart", "bf_emma"]
