"""Does `mx.clear_cache()` hold the GIL while it frees, and for how long? Run on the GPU machine:

    python3 bench/gpu/clear_cache_gil.py [MODEL_DIR]

A ticker thread sleeps 0.2 ms at a time and records its longest gap (the longest any other
Python thread could not run); the main thread decodes a batch (so MLX's buffer cache fills
as after a burst), then calls `mx.clear_cache()`. Printed: the cache's size before, how long
the call took, and the ticker's longest gap during the call and during an idle stretch of
the same length.
"""

from __future__ import annotations

import functools
import sys
import threading
import time

import mlx.core as mx


class Ticker:
    def __init__(self) -> None:
        self.gap = 0.0
        self.on = True
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        last = time.perf_counter()
        while self.on:
            time.sleep(0.0002)
            now = time.perf_counter()
            self.gap = max(self.gap, now - last)
            last = now

    def longest(self, seconds_of: callable) -> tuple[float, float]:
        self.gap = 0.0
        time.sleep(0.002)
        self.gap = 0.0
        took = seconds_of() or 0.0
        time.sleep(0.002)
        return took, self.gap


def fill_cache(model_dir: str | None) -> None:
    if model_dir:
        from mlx_lm import load
        from mlx_lm.generate import BatchGenerator

        model, tokenizer = load(model_dir)
        prompts = [tokenizer.encode(f"story {i} about a lighthouse") for i in range(128)]
        gen = BatchGenerator(model, completion_batch_size=128, prefill_batch_size=128)
        gen.insert(prompts, max_tokens=[32] * len(prompts))
        while gen.next_generated():
            pass
        gen.close()
        del gen
    else:  # arrays of many shapes, freed
        arrays = [mx.zeros((1024, 1024 + i * 64)) for i in range(200)]
        mx.eval(arrays)
        del arrays


def main() -> None:
    model_dir = sys.argv[1] if len(sys.argv) > 1 else None
    ticker = Ticker()
    for round_ in range(3):
        fill_cache(model_dir)
        cached = mx.get_cache_memory()

        def clear() -> float:
            start = time.perf_counter()
            mx.clear_cache()
            return time.perf_counter() - start

        took, gap = ticker.longest(clear)
        _, idle_gap = ticker.longest(functools.partial(time.sleep, max(took, 0.001)))
        print(
            f"round {round_}: cache {cached / 2**20:.0f} MiB; clear_cache {took * 1e3:.2f} ms; "
            f"longest gap of another thread: during it {gap * 1e3:.2f} ms, "
            f"idle {idle_gap * 1e3:.2f} ms"
        )
    ticker.on = False


if __name__ == "__main__":
    main()
