"""Single-sequence decode paths side by side in one process, on one loaded model.

    python3 bench/gpu/solo_ab.py MODEL_DIR [--rounds 8] [--max-tokens 128]

Where the gateway's single stream trails in-process `mlx_lm.stream_generate`, this tells
which layer costs it, with nothing else running (no HTTP, no other process): the same
model object decodes the same prompt, greedy, through, in turn,

- `stream_generate`: the reference (detokenizer, GenerationResponse per token);
- `generate_step`: mlx-lm's bare loop, no detokenizer;
- `Solo`: the gateway's single-sequence loop (engines/mlx/single.py), tokens only;
- `MLXBatch`: the engine's batch stepping a lone request (Solo + detokenizer + parser);
- `MLXBatch c128`: the same, the batch made as for `concurrency: 128` with prefix reuse on
  (the GPU kit's `batched` model, which decoded a lone stream ~10% slower than `serial`).

Prints decode tok/s (and time to first token) per round and side, and the medians; one
JSON line at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

PRODUCT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(PRODUCT))
sys.path.insert(0, str(PRODUCT / "bench"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()

    import mlx.core as mx
    import mlx_lm
    import msgspec
    from mlx_lm.generate import generate_step
    from mlx_lm.sample_utils import make_sampler
    from single_stream import PROMPT

    from engines.mlx.batch import MLXBatch
    from engines.mlx.engine import MLXEngine
    from engines.mlx.platform import detect
    from engines.mlx.single import Solo
    from schemas.canonical import ChatRequest, Finished
    from schemas.config import ModelConfig

    config = {"id": "ab", "source": args.model_dir, "concurrency": 1, "prefix_reuse": False}
    engine = MLXEngine(msgspec.convert(config, ModelConfig), detect(), None)
    engine.load(None)
    model, tokenizer = engine._model, engine._tokenizer
    request = msgspec.convert(
        {"messages": PROMPT, "max_tokens": args.max_tokens, "sampling": {"temperature": 0}},
        ChatRequest,
    )
    prompt = engine.prepare(request).prompt
    n = args.max_tokens
    batch = engine.open_batch()
    # The `batched` model's batch on the same engine: 128 sequences, 4 parked sessions.
    engine.parked_bytes = 1 << 30
    wide = msgspec.convert(config | {"concurrency": 128, "prefix_reuse": True}, ModelConfig)
    wide_batch = MLXBatch(engine, model, tokenizer, wide)

    def timed(tokens):
        """Decode tok/s over an iterator of tokens; the time to the first is kept aside."""
        started = time.perf_counter()
        first = last = None
        count = 0
        for _ in tokens:
            last = time.perf_counter()
            first = first or last
            count += 1
        timed.ttft_ms = (first - started) * 1000
        return (count - 1) / (last - first)

    def reference():
        return timed(
            mlx_lm.stream_generate(
                model, tokenizer, mx.array(prompt), max_tokens=n, sampler=make_sampler(temp=0.0)
            )
        )

    def bare():
        steps = generate_step(mx.array(prompt), model, max_tokens=n, sampler=make_sampler(0.0))
        return timed(t for t, _ in steps)

    def solo():
        job = engine.prepare(request)
        s = Solo(model, batch._generator.stream, job.prompt, None, [], job)
        return timed(s.advance() for _ in range(job.max_tokens))

    def engine_batch(batch=batch):
        batch.add("r", request, lambda: False)

        def tokens():  # one per step (a lone request's step decodes one token), not per
            # output: a token that completes no character makes no text output
            while True:
                steps = batch.step()
                yield steps
                if any(isinstance(o, Finished) for _, o in steps):
                    return

        return timed(tokens())

    sides = {"stream_generate": reference, "generate_step": bare, "Solo": solo}
    sides["MLXBatch"] = engine_batch
    sides["MLXBatch c128"] = lambda: engine_batch(wide_batch)
    rates: dict[str, list[float]] = {name: [] for name in sides}
    ttfts = {name: [] for name in sides}
    for round_ in range(args.rounds + 1):  # round 0 warms up
        names = list(sides)
        names = names[round_ % len(names) :] + names[: round_ % len(names)]
        for name in names:
            rate = sides[name]()
            if round_:
                rates[name].append(rate)
                ttfts[name].append(timed.ttft_ms)
            print(
                f"round {round_} {name:16s} {rate:8.1f} tok/s  ttft {timed.ttft_ms:6.1f} ms",
                flush=True,
            )
    medians = {name: statistics.median(r) for name, r in rates.items()}
    ref = medians["stream_generate"]
    first = {name: statistics.median(t) for name, t in ttfts.items()}
    for name, m in medians.items():
        print(f"{name:16s} median {m:8.1f} tok/s  ratio {m / ref:.3f}  ttft {first[name]:.1f} ms")
    print(json.dumps({"model": args.model_dir, "rates": rates, "medians": medians, "ttft": first}))


if __name__ == "__main__":
    main()
