"""Does the thread that decodes first in a process keep a lead over other threads?

Through the gateway, the model that served the first request decodes a lone stream 4-25 %
faster than every other model, whatever the settings (bench/RESULTS.md, runs 38-41); the CPU
shows no such lead. Every model has its own thread, so its own MLX streams. MLX's CUDA
backend keeps one process-wide cache of CUDA events that only the thread which created it
uses (`CudaEventPool`, `on_creation_thread()` in mlx/backend/cuda/event.cu); any other
thread creates and destroys an event each time it needs one. This script asks the question
without the gateway: one model, loaded by a thread that never decodes, then `--threads`
threads decoding the same greedy prompt in turn with mlx-lm's `generate_step` (each on its
own thread-local generation stream), thread `--first` decoding first of all. Per thread: the
decode tok/s and the thread's CPU time per token, medians over rounds after a warm-up, and
the median per-round ratio to thread `--first`.

    python3 bench/gpu/thread_lead.py MODEL_DIR [--threads 3] [--rounds 15] [--first 0]
        [--main-first]   # the main thread decodes a few tokens before any decoding thread

Run it once per setting, each in a fresh process: what the first decode leaves behind is
process-wide. A lead that follows `--first` and disappears with `--main-first` belongs to the
first thread to decode; one that stays with thread 0 belongs to the order of starting.
"""

from __future__ import annotations

import argparse
import json
import queue
import statistics
import sys
import threading
import time
from pathlib import Path

PROMPT = "Write a long story about a lighthouse keeper and the sea, in plain words."


class Worker:
    """A thread that runs the calls it is given, one at a time, and hands back their results."""

    def __init__(self, name: str):
        self._calls: queue.Queue = queue.Queue()
        self._results: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (call := self._calls.get()) is not None:
            try:
                self._results.put((call(), None))
            except Exception as error:  # handed back to the caller
                self._results.put((None, error))

    def call(self, fn):
        self._calls.put(fn)
        result, error = self._results.get()
        if error is not None:
            raise error
        return result

    def stop(self) -> None:
        """End the thread and wait for it: one ending while the interpreter exits aborts it."""
        self._calls.put(None)
        self._thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir")
    parser.add_argument("--threads", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=15, help="measured rounds, after a warm-up")
    parser.add_argument("--first", type=int, default=0, help="the thread that decodes first")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--main-first", action="store_true", help="the main thread decodes first")
    args = parser.parse_args()

    import mlx.core as mx
    from mlx_lm.generate import generate_step

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the product checkout
    from engines.mlx.load import load_as_platform
    from engines.mlx.platform import detect

    def load():
        """The weights as the gateway holds them (on CUDA, 4-bit layers become bfloat16)."""
        return load_as_platform(args.model_dir, detect())

    loader = Worker("loader")
    model, tokenizer, held = loader.call(load)
    messages = [{"role": "user", "content": PROMPT}]
    tokens = tokenizer.apply_chat_template(messages, add_generation_prompt=True)

    def greedy(logprobs):
        return mx.argmax(logprobs, axis=-1)

    def decode(max_tokens: int) -> dict:
        """One greedy stream on this thread: decode tok/s after the first token, CPU per token."""
        prompt = mx.array(tokens)
        start = cpu_start = None
        count = 0
        for _ in generate_step(prompt, model, max_tokens=max_tokens, sampler=greedy):
            count += 1
            if start is None:  # the first token carries the prefill: the clock starts after it
                start, cpu_start = time.perf_counter(), time.thread_time()
        wall, cpu = time.perf_counter() - start, time.thread_time() - cpu_start
        return {"tok_s": (count - 1) / wall, "cpu_ms": 1000 * cpu / (count - 1)}

    if args.main_first:
        decode(4)
    workers = [Worker(f"decoder-{i}") for i in range(args.threads)]
    order = list(range(args.threads))
    runs: dict[int, list[dict]] = {i: [] for i in order}
    for round_ in range(args.rounds + 1):  # round 0 warms up, thread `first` before the rest
        shift = (round_ + args.first) % args.threads
        for i in order[shift:] + order[:shift]:
            result = workers[i].call(lambda: decode(args.max_tokens))
            if round_:
                runs[i].append(result)
    for worker in workers + [loader]:
        worker.stop()
    first = runs[args.first]
    setting = {"first": args.first, "main_first": args.main_first, "rounds": args.rounds}
    print(json.dumps(setting | {"device": str(mx.default_device()), "weights": held}))
    for i, rows in runs.items():
        ratios = [r["tok_s"] / f["tok_s"] for r, f in zip(rows, first, strict=True)]
        record = {
            "thread": i,
            "decode_tok_s": round(statistics.median(r["tok_s"] for r in rows), 1),
            "cpu_ms_per_token": round(statistics.median(r["cpu_ms"] for r in rows), 3),
            "vs_first": round(statistics.median(ratios), 3),
            "spread": [round(min(ratios), 3), round(max(ratios), 3)],
            "per_round": [round(r["tok_s"]) for r in rows],
        }
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
