"""A quantized model as stored against the same model expanded to bfloat16, in one process.

    python3 bench/gpu/weights_ab.py MODEL_DIR [--clients 8,64] [--rounds 2] [--max-tokens 32]

Which weights should the gateway run on a GPU? On the H200, raw `BatchGenerator` on 4-bit
models slowed down about in proportion to the batch (8B: ~6 ms a token alone, ~200 ms a
step at 64 sequences), which is what a matrix-vector kernel run once per row looks like.
This loads the model twice, once as stored and once with every quantized layer expanded to
bfloat16 (`mlx_lm.utils.dequantize_model`), and measures both, interleaved round by round:

- single stream: `stream_generate` on bench/single_stream.py's prompt, 128 new tokens,
  decode tok/s = (tokens - 1) / (last - first) and TTFT;
- batches: raw `BatchGenerator` (raw_batch.py's `decode_batch`, prefill = clients) on
  bench/concurrency.py's prompts, aggregate tok/s.

Greedy; round 0 warms up and is dropped. Prints per-round lines, medians, one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # bench/: the product's prompts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("--clients", default="8,64")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=32, help="new tokens per batch stream")
    args = parser.parse_args()

    import mlx.core as mx
    import mlx_lm
    from concurrency import prompt
    from mlx.utils import tree_flatten
    from mlx_lm.sample_utils import make_sampler
    from mlx_lm.utils import dequantize_model
    from raw_batch import decode_batch, encoder
    from single_stream import PROMPT

    models = {}
    for label in ("as stored", "bfloat16"):
        model, tokenizer = mlx_lm.load(args.model_dir)
        if label == "bfloat16":
            model = dequantize_model(model)
        mx.eval(model.parameters())
        size = sum(v.nbytes for _, v in tree_flatten(model.parameters()))
        print(f"{label}: {size / 1e9:.2f} GB of weights", flush=True)
        models[label] = model
    eos = sorted(tokenizer.eos_token_ids)
    encode = encoder(tokenizer)
    single_prompt = encode(PROMPT)
    clients = [int(c) for c in args.clients.split(",")]

    def single(model) -> dict:
        started = time.perf_counter()
        first = last = None
        count = 0
        for _ in mlx_lm.stream_generate(
            model, tokenizer, mx.array(single_prompt), max_tokens=128, sampler=make_sampler(0.0)
        ):
            last = time.perf_counter()
            first = first or last
            count += 1
        return {"decode_tps": (count - 1) / (last - first), "ttft_ms": (first - started) * 1000}

    results: dict = {label: {"single": [], **{str(n): [] for n in clients}} for label in models}
    for round_ in range(args.rounds + 1):
        labels = list(models) if round_ % 2 == 0 else list(models)[::-1]
        for label in labels:
            model = models[label]
            s = single(model)
            line = f"round {round_} {label:9s} single {s['decode_tps']:7.1f} tok/s "
            line += f"ttft {s['ttft_ms']:6.1f} ms"
            if round_:
                results[label]["single"].append(s)
            for n in clients:
                prompts = [encode(prompt(round_, i)) for i in range(n)]
                b = decode_batch(model, eos, prompts, args.max_tokens, n)
                line += f" | {n}: {b['aggregate']:8.1f} tok/s"
                if round_:
                    results[label][str(n)].append(b["aggregate"])
            print(line, flush=True)
            mx.clear_cache()

    def med(values):
        return round(statistics.median(values), 1)

    summary = {}
    for label, r in results.items():
        summary[label] = {
            "single_tps": med([s["decode_tps"] for s in r["single"]]),
            "single_ttft_ms": med([s["ttft_ms"] for s in r["single"]]),
            **{f"{n}_clients_tps": med(r[str(n)]) for n in clients},
        }
        print(label, summary[label], flush=True)
    print(json.dumps({"model": args.model_dir, "max_tokens": args.max_tokens, **summary}))


if __name__ == "__main__":
    main()
