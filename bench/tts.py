"""Text to speech's real-time factor (seconds spent per second of audio made) of the
gateway's Kokoro engine, in-process (`engines.tts.engine.KokoroEngine.speak`, pcm), on a
seeded random-weight Kokoro (no weights can be fetched here):

    .venv/bin/python bench/tts.py [--rounds 2] [--size test|full]

`test` is the test suite's model (engines/tts/demo.py: one-layer ALBERT, one resblock
kernel, 4 duration bins); `full` has Kokoro-82M's own dimensions, so its compute per
frame is the real model's (random weights predict longer durations than trained ones, so
the clips run longer; the factor is per second of audio, which is what compute tracks).
Each text is a sentence; the figure is the best of `--rounds`.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from common import fmt, report, table

from engines.tts.demo import build_kokoro, full_size_config, kokoro_config
from engines.tts.engine import KokoroEngine
from schemas.canonical import SpeechRequest
from schemas.config import ModelConfig

TEXTS = {"short": "Fail better.", "sentence": "Ever tried, ever failed, no matter."}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--size", choices=["test", "full"], default="test")
    args = parser.parse_args()
    load_before = os.getloadavg()
    config = full_size_config() if args.size == "full" else kokoro_config()
    with tempfile.TemporaryDirectory() as tmp:
        path = build_kokoro(Path(tmp) / "kokoro", config=config)
        engine = KokoroEngine(ModelConfig(id="kokoro", source=str(path), task="speech"), None)
        engine.load()
        rows = []
        for name, text in TEXTS.items():
            best = None
            for _ in range(args.rounds):
                asked = SpeechRequest(text=text, voice="af_heart", response_format="pcm")
                started = time.perf_counter()
                spoken = engine.speak(asked, lambda _: None, lambda: False)
                spent = time.perf_counter() - started
                if best is None or spent < best[0]:
                    best = (spent, spoken.audio_seconds)
            rows.append([name, fmt(best[1], 2), fmt(best[0], 2), fmt(best[0] / best[1], 2)])
    body = table(["text", "audio s", "spent s", "real-time factor"], rows)
    report(
        f"Text to speech: Kokoro in-process ({args.size} size, random weights)",
        body,
        platform_path=None,
        load_before=load_before,
        notes="mlx CPU backend; lower is faster, below 1 faster than it plays.",
    )


if __name__ == "__main__":
    main()
