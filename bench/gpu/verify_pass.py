"""What a speculative verify pass costs on MLX's CUDA backend (issue 59, point 5): a k-token
forward pass over the KV cache against a 1-token decode step, with the cache's key length
growing every pass (as speculation grows it) or held (the pass's tokens trimmed off again,
so every pass has the same shapes).

    python3 bench/gpu/verify_pass.py MODEL_DIR [--k 2,4,8,16] [--passes 48] [--context 512]

Run it twice, with and without `MLX_CUDA_USE_CUDNN_SDPA=0` (read once by MLX, so a process
each): a multi-row attention call is eligible for cuDNN's SDPA, whose execution plans are
cached by exact shapes, key length included; a pass at a new key length then pays for a new
plan. If so, `growing` is much slower than `held` with cuDNN on, and the two agree with it
off. The first 8 passes of each case warm up and are dropped; figures are medians (ms).
Also times a 512-token prefill both ways (cuDNN's SDPA is there for long queries). Prints
one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def passes(model, cache, tokens: int, count: int, hold: bool) -> list[float]:
    import mlx.core as mx
    from mlx_lm.models.cache import trim_prompt_cache

    times = []
    for i in range(count):
        inputs = mx.array([[(7 * i + j) % 1000 + 10 for j in range(tokens)]])
        started = time.perf_counter()
        mx.eval(model(inputs, cache=cache))
        times.append((time.perf_counter() - started) * 1000)
        if hold:
            trim_prompt_cache(cache, tokens)
    return times[8:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir")
    parser.add_argument("--k", default="2,4,8,16")
    parser.add_argument("--passes", type=int, default=48)
    parser.add_argument("--context", type=int, default=512)
    args = parser.parse_args()
    import mlx.core as mx
    from mlx_lm import load
    from mlx_lm.models.cache import make_prompt_cache

    model, _ = load(args.model_dir)
    prompt = mx.array([[(3 * i) % 1000 + 10 for i in range(args.context)]])

    def fresh():
        cache = make_prompt_cache(model)
        started = time.perf_counter()
        mx.eval(model(prompt, cache=cache))
        return cache, (time.perf_counter() - started) * 1000

    prefill = [fresh()[1] for _ in range(4)][1:]
    result = {
        "cudnn_sdpa": os.environ.get("MLX_CUDA_USE_CUDNN_SDPA", "1") != "0",
        "device": str(mx.default_device()),
        "prefill_ms": round(statistics.median(prefill), 2),
        "passes": {},
    }
    for tokens in [1] + [int(k) for k in args.k.split(",")]:
        row = {}
        for case, hold in (("growing", False), ("held", True)):
            cache, _ = fresh()
            row[case] = round(statistics.median(passes(model, cache, tokens, args.passes, hold)), 3)
        result["passes"][tokens] = row
        print(f"k={tokens:2d}: growing {row['growing']:8.3f} ms  held {row['held']:8.3f} ms",
              flush=True)  # fmt: skip
    print(json.dumps({"verify_pass": result}))


if __name__ == "__main__":
    main()
