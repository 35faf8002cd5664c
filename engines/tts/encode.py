"""Speech audio encoded as it is made: mono float32 samples in, bytes of the asked format
out, a piece at a time, so a client hears the first sentence while the next is generated.

mp3, opus (in Ogg), aac (ADTS) and flac through PyAV (FFmpeg's encoders: PyAV already
decodes the uploads); wav and pcm written here. pcm is OpenAI's: signed 16-bit
little-endian, mono, at the model's rate (Kokoro: 24 kHz). A streamed wav cannot know its
length when its header goes out: the sizes say 0xFFFFFFFF, as streaming servers write them
(FFmpeg, PyAV and browsers read to the end).
"""

from __future__ import annotations

import struct

import numpy as np

# format -> (PyAV muxer, encoder)
_CODED = {
    "mp3": ("mp3", "libmp3lame"),
    "opus": ("ogg", "libopus"),
    "aac": ("adts", "aac"),
    "flac": ("flac", "flac"),
}
_UNKNOWN_SIZE = 0xFFFFFFFF


def _pcm16(samples: np.ndarray) -> bytes:
    return (np.clip(samples, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


def _wav_header(rate: int) -> bytes:
    return (
        b"RIFF"
        + struct.pack("<I", _UNKNOWN_SIZE)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
        + b"data"
        + struct.pack("<I", _UNKNOWN_SIZE)
    )


class _Sink:
    """The file PyAV's muxer writes into; what it wrote is taken after each piece."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, data) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        out, self._parts = b"".join(self._parts), []
        return out


class AudioEncoder:
    """One answer's encoder: `push` each piece of samples, then `close`; each returns the
    bytes ready so far (a muxer may hold some back until a frame or page fills)."""

    def __init__(self, response_format: str, rate: int) -> None:
        self._format = response_format
        self._rate = rate
        self._header = response_format == "wav"
        self._container = None
        if response_format in _CODED:
            import av

            muxer, codec = _CODED[response_format]
            self._sink = _Sink()
            self._container = av.open(self._sink, mode="w", format=muxer)
            self._stream = self._container.add_stream(codec, rate=rate)
            self._stream.layout = "mono"
            self._pts = 0

    def push(self, samples: np.ndarray) -> bytes:
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        if self._container is None:
            head = _wav_header(self._rate) if self._header else b""
            self._header = False
            return head + _pcm16(samples)
        import av

        frame = av.AudioFrame.from_ndarray(
            np.clip(samples, -1.0, 1.0)[None, :], format="flt", layout="mono"
        )
        frame.sample_rate = self._rate
        frame.pts = self._pts
        self._pts += len(samples)
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        return self._sink.take()

    def close(self) -> bytes:
        if self._container is None:
            return _wav_header(self._rate) if self._header else b""
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()
        return self._sink.take()
