"""Any audio PyAV (FFmpeg) opens — WAV, FLAC, MP3, OGG/Opus, M4A — decoded to Whisper's input:
mono float32 samples at 16 kHz. PyAV over soundfile: soundfile (libsndfile) reads no M4A/AAC.
"""

from __future__ import annotations

import io

import numpy as np

SAMPLE_RATE = 16_000


class NotAudio(ValueError):
    """The bytes hold no audio stream PyAV can decode; the message says what it found."""


class TooLong(ValueError):
    """The clip runs past the longest one allowed; decoding stopped there."""


def decode_audio(data: bytes, max_seconds: float | None = None) -> np.ndarray:
    """Mono float32 samples at 16 kHz of the audio file in `data`; `TooLong` as soon as
    more than `max_seconds` of them are decoded (nothing past it is decoded)."""
    import av

    try:
        container = av.open(io.BytesIO(data))
    except (av.error.FFmpegError, ValueError) as e:  # InvalidDataError and kin
        raise NotAudio(f"not an audio file FFmpeg can read ({e})") from None
    with container:
        if not container.streams.audio:
            raise NotAudio("the file holds no audio stream")
        resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
        parts: list[np.ndarray] = []
        bound = None if max_seconds is None else int(max_seconds * SAMPLE_RATE)
        count = 0
        try:
            for frame in container.decode(container.streams.audio[0]):
                for f in resampler.resample(frame):
                    parts.append(f.to_ndarray().reshape(-1))
                    count += len(parts[-1])
                if bound is not None and count > bound:
                    raise TooLong(f"the audio runs past {max_seconds:g} s")
            parts.extend(f.to_ndarray().reshape(-1) for f in resampler.resample(None))
        except av.error.FFmpegError as e:
            raise NotAudio(f"the audio stream does not decode ({e})") from None
    if not parts:
        raise NotAudio("the audio stream holds no samples")
    return np.concatenate(parts).astype(np.float32, copy=False)
