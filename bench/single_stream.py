"""Single stream: decode tokens/s and time-to-first-token through the gateway's SSE versus
in-process `mlx_lm.stream_generate` on the same model, prompt and greedy sampler.

    .venv/bin/python bench/single_stream.py [--repeats 5] [--max-tokens 128]

The in-process reference (`bench/inprocess.py`) runs in a subprocess on the gateway's
platform path (OpenBLAS preloaded, 4-bit weights expanded to float32 on the CPU). Runs are
interleaved (reference, gateway, gateway batched, reference, ...) so noise hits every side;
the first run of each is a discarded warm-up. Prefix reuse is off in the gateway so both
sides prefill the whole prompt each time. Targets (issue 5): decode ratio >= 0.97, TTFT
overhead <= 10 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import httpx
from common import (
    REPO,
    SMOLLM2,
    Gateway,
    StreamTiming,
    chat_body,
    fmt,
    median,
    platform_env,
    report,
    stream_chat,
    table,
)

PROMPT = [
    {
        "role": "user",
        "content": "Write a long story about a lighthouse keeper who finds a message in a "
        "bottle. Describe the sea, the weather and the keeper's thoughts in detail.",
    }
]

CONFIG = f"""
server: {{host: 127.0.0.1}}
models:
  - id: serial
    engine: mlx
    source: {SMOLLM2}
    context: {{max: 2048}}
    concurrency: 1
    prefix_reuse: false
  - id: batched
    engine: mlx
    source: {SMOLLM2}
    context: {{max: 2048}}
    concurrency: 8
    prefix_reuse: false
"""


class Reference:
    """The in-process reference subprocess: one JSON line in, one JSON line out."""

    def __init__(self) -> None:
        env = platform_env()
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        self.process = subprocess.Popen(
            [sys.executable, str(REPO / "bench" / "inprocess.py"), SMOLLM2],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        ready = json.loads(self.process.stdout.readline() or "{}")
        if not ready.get("ready"):
            raise RuntimeError("in-process reference failed to load")
        self.platform = ready["platform"]

    def run(self, max_tokens: int) -> StreamTiming:
        self.process.stdin.write(json.dumps({"messages": PROMPT, "max_tokens": max_tokens}) + "\n")
        self.process.stdin.flush()
        out = json.loads(self.process.stdout.readline())
        return StreamTiming(
            started=out["started"],
            first_token=out["first"],
            last_token=out["last"],
            ended=out["ended"],
            text=out["text"],
            prompt_tokens=out["prompt_tokens"],
            new_tokens=out["new_tokens"],
        )

    def stop(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="measured runs per side")
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()
    load_before = os.getloadavg()

    reference = Reference()
    runs: dict[str, list[StreamTiming]] = {"in-process": [], "serial": [], "batched": []}
    try:
        with Gateway(CONFIG, "single") as gateway, httpx.Client(timeout=600) as client:
            for round_ in range(args.repeats + 1):  # round 0 warms every side up
                for side in runs:
                    if side == "in-process":
                        timing = reference.run(args.max_tokens)
                    else:
                        body = chat_body(side, PROMPT, args.max_tokens)
                        timing = stream_chat(client, gateway.url, body)
                        event = gateway.generated(timing.request_id)
                        timing.extra["engine_ttft"] = event.get("ttft_s")
                    if round_:
                        runs[side].append(timing)
                    print(
                        f"round {round_} {side:10s} ttft {timing.ttft * 1000:7.1f} ms  "
                        f"decode {fmt(timing.decode_tps)} tok/s  "
                        f"({timing.prompt_tokens}+{timing.new_tokens} tokens)",
                        flush=True,
                    )
            platform_path = gateway.platform()
    finally:
        reference.stop()

    ref_tps = median([t.decode_tps for t in runs["in-process"]])
    ref_ttft = median([t.ttft for t in runs["in-process"]])
    ref_text = runs["in-process"][0].text
    rows = []
    for side, timings in runs.items():
        tps = median([t.decode_tps for t in timings])
        ttft = median([t.ttft for t in timings])
        # Per round, side by side: each gateway run against the reference run next to it.
        ratios = [
            g.decode_tps / r.decode_tps
            for g, r in zip(timings, runs["in-process"], strict=True)
            if g.decode_tps and r.decode_tps
        ]
        overheads = [
            (g.ttft - r.ttft) * 1000 for g, r in zip(timings, runs["in-process"], strict=True)
        ]
        rows.append(
            [
                "in-process mlx_lm.stream_generate"
                if side == "in-process"
                else f"gateway SSE, concurrency {1 if side == 'serial' else 8}",
                f"{timings[0].prompt_tokens}+{timings[0].new_tokens}",
                fmt(tps),
                fmt(ttft * 1000, 1),
                "1 (reference)" if side == "in-process" else fmt(median(ratios), 3),
                "0 (reference)" if side == "in-process" else fmt(median(overheads), 1),
                "yes" if all(t.text == ref_text for t in timings) else "NO",
            ]
        )
    body = table(
        [
            "side",
            "prompt+new tokens",
            "decode tok/s (median)",
            "TTFT ms (median)",
            "decode ratio vs in-process (median of per-round ratios)",
            "TTFT overhead ms (median of per-round differences)",
            "same text as in-process",
        ],
        rows,
    )
    notes = (
        f"{args.repeats} measured rounds after one warm-up, sides interleaved in each round; "
        f"greedy (temperature 0), max_tokens {args.max_tokens}, prefix reuse off; "
        f"in-process reference median {fmt(ref_tps)} tok/s, TTFT {fmt(ref_ttft * 1000, 1)} ms. "
        "Decode tok/s = (new tokens - 1) / (last token - first token); the gateway's are "
        "the SSE content chunks' arrival times at the client, its token counts the usage "
        "chunk's. Targets: decode ratio >= 0.97, TTFT overhead <= 10 ms. "
        f"Reference platform: {reference.platform['blas']}, {reference.platform['weights']}."
    )
    report(
        "Single stream: gateway SSE vs in-process mlx_lm",
        body,
        platform_path=platform_path,
        load_before=load_before,
        notes=notes,
    )


if __name__ == "__main__":
    main()
