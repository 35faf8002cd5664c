"""Single stream: decode tokens/s and time-to-first-token through the gateway's SSE versus
in-process `mlx_lm.stream_generate` on the same model, prompt and greedy sampler.

    .venv/bin/python bench/single_stream.py [--repeats 5] [--max-tokens 128] [--source SRC]

SRC is any model source the gateway takes (default: the SmolLM2 GGUF); on the GPU,
bench/gpu/ runs the same measurement on random-weight shapes.

The in-process reference (`bench/inprocess.py`) runs in a subprocess on the gateway's
platform path (OpenBLAS preloaded, 4-bit weights expanded to float32 on the CPU). Runs are
interleaved (reference, gateway, gateway batched, reference, ...) so noise hits every side;
the first run of each is a discarded warm-up. Prefix reuse is off in the gateway so both
sides prefill the whole prompt each time. Targets (issue 5): decode ratio >= 0.97, TTFT
overhead <= 10 ms.
"""

from __future__ import annotations

import argparse
import os

import httpx
from common import (
    REPO,
    SMOLLM2,
    Gateway,
    StreamTiming,
    Worker,
    chat_body,
    fmt,
    median,
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

# A long prompt (~600 tokens) for a second TTFT measure, where prefill dominates.
LONG_PROMPT = [
    {
        "role": "user",
        "content": "Here are my notes from the harbour. "
        + " ".join(
            f"Day {day}: the wind came from the {wind}, we mended {day % 4 + 1} nets, the "
            f"engine of boat {day % 3 + 1} was checked and the tide turned at {6 + day % 5} "
            "in the morning."
            for day, wind in zip(range(1, 19), ["north", "west", "south"] * 6, strict=True)
        )
        + " Summarise the notes in three sentences.",
    }
]

CONFIG = """
server: {{host: 127.0.0.1}}
models:
  - id: serial
    engine: mlx
    source: {source}
    context: {{max: 2048}}
    concurrency: 1
    prefix_reuse: false
  - id: batched
    engine: mlx
    source: {source}
    context: {{max: 2048}}
    concurrency: 8
    prefix_reuse: false
"""


def worker_timing(out: dict) -> StreamTiming:
    """The timing of one answer as an in-process worker reports it (bench/inprocess.py's
    JSON line), in the shape of the gateway side's."""
    return StreamTiming(
        started=out["started"],
        first_token=out["first"],
        last_token=out["last"],
        ended=out["ended"],
        text=out["text"],
        prompt_tokens=out["prompt_tokens"],
        new_tokens=out["new_tokens"],
    )


class Reference:
    """The in-process reference subprocess: one JSON line in, one JSON line out."""

    def __init__(self, source: str = SMOLLM2) -> None:
        self._worker = Worker(REPO / "bench" / "inprocess.py", source)
        self.platform = self._worker.ready["platform"]

    def run(self, max_tokens: int, messages: list[dict] = PROMPT) -> StreamTiming:
        job = {"messages": messages, "max_tokens": max_tokens}
        return worker_timing(self._worker.ask(job))

    def stop(self) -> None:
        self._worker.stop()


def rotated(sides: list[str], round_: int) -> list[str]:
    """The sides in a different order each round, so none always runs right after another."""
    shift = round_ % len(sides)
    return sides[shift:] + sides[:shift]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="decode runs per side")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument(
        "--ttft-rounds", type=int, default=15, help="max_tokens 1 runs per side, for TTFT"
    )
    parser.add_argument(
        "--long-rounds", type=int, default=5, help="max_tokens 1 runs per side, long prompt"
    )
    parser.add_argument(
        "--source", default=SMOLLM2, help="the model source (any the gateway takes)"
    )
    args = parser.parse_args()
    load_before = os.getloadavg()
    sides = ["in-process", "serial", "batched"]

    reference = Reference(args.source)
    try:
        with (
            Gateway(CONFIG.format(source=args.source), "single") as gateway,
            httpx.Client(timeout=600) as client,
        ):

            def run(side: str, max_tokens: int, messages: list[dict] = PROMPT) -> StreamTiming:
                if side == "in-process":
                    return reference.run(max_tokens, messages)
                body = chat_body(side, messages, max_tokens)
                timing = stream_chat(client, gateway.url, body)
                event = gateway.generated(timing.request_id)
                timing.extra["engine_ttft"] = event.get("ttft_s")
                # The engine's own decode rate, before SSE delivery: separates the two.
                if event.get("decode_s") and event.get("new_tokens", 0) > 1:
                    timing.extra["engine_tps"] = (event["new_tokens"] - 1) / event["decode_s"]
                return timing

            decode: dict[str, list[StreamTiming]] = {side: [] for side in sides}
            first: dict[str, list[StreamTiming]] = {side: [] for side in sides}
            long_first: dict[str, list[StreamTiming]] = {side: [] for side in sides}
            for round_ in range(args.repeats + 1):  # round 0 warms every side up
                for side in rotated(sides, round_):
                    timing = run(side, args.max_tokens)
                    if round_:
                        decode[side].append(timing)
                    print(
                        f"decode round {round_} {side:10s} ttft {timing.ttft * 1000:7.1f} ms  "
                        f"decode {fmt(timing.decode_tps)} tok/s  "
                        f"({timing.prompt_tokens}+{timing.new_tokens} tokens)",
                        flush=True,
                    )
            for round_ in range(args.ttft_rounds):
                for side in rotated(sides, round_):
                    first[side].append(run(side, 1))
                print(
                    f"ttft round {round_}: "
                    + "  ".join(f"{s} {first[s][-1].ttft * 1000:.1f} ms" for s in sides),
                    flush=True,
                )
            for round_ in range(args.long_rounds):
                for side in rotated(sides, round_):
                    long_first[side].append(run(side, 1, LONG_PROMPT))
                print(
                    f"long-prompt ttft round {round_}: "
                    + "  ".join(f"{s} {long_first[s][-1].ttft * 1000:.1f} ms" for s in sides),
                    flush=True,
                )
            platform_path = gateway.platform()
            decoding = gateway.decoding()
    finally:
        reference.stop()

    ref_decode, ref_first = decode["in-process"], first["in-process"]
    ref_text = ref_decode[0].text
    rows = []
    for side in sides:
        # Side by side: each gateway run against the reference run of the same round.
        ratios = [
            g.decode_tps / r.decode_tps
            for g, r in zip(decode[side], ref_decode, strict=True)
            if g.decode_tps and r.decode_tps
        ]
        overheads = [(g.ttft - r.ttft) * 1000 for g, r in zip(first[side], ref_first, strict=True)]
        reference_side = side == "in-process"
        engine_ttft = median([t.extra.get("engine_ttft") for t in first[side]])
        rows.append(
            [
                "in-process mlx_lm.stream_generate"
                if reference_side
                else f"gateway SSE, concurrency {1 if side == 'serial' else 8}",
                f"{decode[side][0].prompt_tokens}+{decode[side][0].new_tokens}",
                fmt(median([t.decode_tps for t in decode[side]])),
                "1 (reference)" if reference_side else fmt(median(ratios), 3),
                fmt(median([t.ttft * 1000 for t in first[side]]), 1),
                "0 (reference)" if reference_side else fmt(median(overheads), 1),
                "n/a" if reference_side else fmt(engine_ttft * 1000, 1),
                "n/a"
                if reference_side
                else fmt(median([t.extra.get("engine_tps") for t in decode[side]])),
                "yes" if all(t.text == ref_text for t in decode[side]) else "NO",
            ]
        )
    body = table(
        [
            "side",
            "prompt+new tokens",
            "decode tok/s (median)",
            "decode ratio vs in-process (median of per-round ratios)",
            "TTFT ms (median)",
            "TTFT overhead ms (median of per-round differences)",
            "gateway's own ttft_s ms (from entering its queue)",
            "gateway's own decode tok/s ((new - 1) / decode_s)",
            "same text as in-process",
        ],
        rows,
    )
    long_rows = []
    for side in sides:
        runs = long_first[side]
        diffs = [
            (g.ttft - r.ttft) * 1000 for g, r in zip(runs, long_first["in-process"], strict=True)
        ]
        long_rows.append(
            [
                side,
                runs[0].prompt_tokens if runs else "n/a",
                fmt(median([t.ttft * 1000 for t in runs]), 1),
                "0 (reference)" if side == "in-process" else fmt(median(diffs), 1),
                fmt(
                    median(
                        [
                            t.ttft / r.ttft
                            for t, r in zip(runs, long_first["in-process"], strict=True)
                        ]
                    ),
                    3,
                ),
            ]
        )
    if args.long_rounds:
        body += "\n\nTime to first token on a long prompt (prefill dominates):\n\n" + table(
            [
                "side",
                "prompt tokens",
                "TTFT ms (median)",
                "overhead ms (median)",
                "ratio to in-process",
            ],
            long_rows,
        )
    notes = (
        f"Gateway models as attached: {decoding}. "
        f"Decode: {args.repeats} rounds of max_tokens {args.max_tokens} after one warm-up "
        f"round; TTFT: {args.ttft_rounds} rounds of max_tokens 1 (and {args.long_rounds} on the "
        "long prompt); every round runs every "
        "side, in an order rotating by round. Greedy (temperature 0), prefix reuse off, so "
        "both sides prefill the whole prompt. Decode tok/s = (new tokens - 1) / (last token "
        "- first token); the gateway's times are the SSE content chunks' arrival at the "
        "client, its token counts the usage chunk's; the in-process TTFT includes the chat "
        "template and tokenizer, as the gateway's does. Targets: decode ratio >= 0.97, TTFT "
        f"overhead <= 10 ms. Reference platform: {reference.platform['blas']}, "
        f"{reference.platform['weights']}."
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
