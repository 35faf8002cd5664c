"""Single-sequence decode paths side by side in one process, on one loaded model.

    python3 bench/gpu/solo_ab.py MODEL_DIR [--rounds 8] [--max-tokens 128]

Where the gateway's single stream trails in-process `mlx_lm.stream_generate`, this tells
which layer costs it, with nothing else running (no HTTP, no other process): the same
model object decodes the same prompt, greedy, through, in turn,

- `stream_generate`: the reference (detokenizer, GenerationResponse per token);
- `generate_step`: mlx-lm's bare loop, no detokenizer;
- `Solo`: the gateway's single-sequence loop (engines/llm/single.py), tokens only;
- `MLXBatch`: the engine's batch stepping a lone request (Solo + detokenizer + parser);
- `MLXBatch c128`: the same, the batch made as for `concurrency: 128` with prefix reuse on
  (the GPU kit's `batched` model, which decoded a lone stream ~10% slower than `serial`);
- `c128 after a burst`: that batch again, right after it decoded `--burst` requests at once
  (untimed; their caches parked, MLX's buffer cache as the burst left it), as the gateway's
  `batched` model meets the single stream that follows a burst in `bench/timeline.py`;
- `... cache cleared`: the same, with `mx.clear_cache()` between the burst and the stream.

Prints decode tok/s (and time to first token) per round and side, and the medians; then how
long the lone request's prompt took to encode (`prepare`) on each side; one JSON line at the
end.
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
    parser.add_argument("--burst", type=int, default=128)
    args = parser.parse_args()

    import mlx.core as mx
    import mlx_lm
    import msgspec
    from mlx_lm.generate import generate_step
    from mlx_lm.sample_utils import make_sampler
    from single_stream import PROMPT

    from engines.llm.batch import MLXBatch
    from engines.llm.engine import MLXEngine
    from engines.llm.single import Solo
    from engines.mlx.platform import detect
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
    burst_batch = MLXBatch(engine, model, tokenizer, wide)
    readers = [
        msgspec.convert(
            {
                "messages": [{"role": "user", "content": f"{PROMPT[0]['content']} Reader {i}."}],
                "max_tokens": args.max_tokens,
                "sampling": {"temperature": 0},
            },
            ChatRequest,
        )
        for i in range(args.burst)
    ]
    encode_ms: dict[str, list[float]] = {}  # per side, one a round (round 0 warms up)

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

    def engine_batch(batch=batch, name="MLXBatch"):
        # The lone request's encode, as the model thread does it on arrival (batch.add).
        started = time.perf_counter()
        job = engine.prepare(request)
        encode_ms.setdefault(name, []).append((time.perf_counter() - started) * 1000)
        batch.add("r", request, lambda: False, job)

        def tokens():  # one per step (a lone request's step decodes one token), not per
            # output: a token that completes no character makes no text output
            while True:
                steps = batch.step()
                yield steps
                if any(isinstance(o, Finished) for _, o in steps):
                    return

        return timed(tokens())

    def after_burst(clear: bool, name: str):
        for i, reader in enumerate(readers):
            burst_batch.add(f"b{i}", reader, lambda: False)
        finished = 0
        while finished < len(readers):
            finished += sum(isinstance(o, Finished) for _, o in burst_batch.step())
        if clear:
            mx.clear_cache()
        return engine_batch(burst_batch, name)

    sides = {"stream_generate": reference, "generate_step": bare, "Solo": solo}
    sides["MLXBatch"] = engine_batch
    sides["MLXBatch c128"] = lambda: engine_batch(wide_batch, "MLXBatch c128")
    sides["c128 after a burst"] = lambda: after_burst(False, "c128 after a burst")
    sides["... cache cleared"] = lambda: after_burst(True, "... cache cleared")
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
                f"round {round_} {name:18s} {rate:8.1f} tok/s  ttft {timed.ttft_ms:6.1f} ms",
                flush=True,
            )
    medians = {name: statistics.median(r) for name, r in rates.items()}
    ref = medians["stream_generate"]
    first = {name: statistics.median(t) for name, t in ttfts.items()}
    for name, m in medians.items():
        print(f"{name:18s} median {m:8.1f} tok/s  ratio {m / ref:.3f}  ttft {first[name]:.1f} ms")
    encode_ms = {name: times[1:] for name, times in encode_ms.items()}  # after the warm-up
    for name, times in encode_ms.items():
        print(f"{name:18s} prompt encoded (prepare) in {statistics.median(times):.3f} ms, median")
    print(
        json.dumps(
            {
                "model": args.model_dir,
                "rates": rates,
                "medians": medians,
                "ttft": first,
                "encode_ms": encode_ms,
            }
        )
    )


if __name__ == "__main__":
    main()
