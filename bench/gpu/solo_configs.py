"""A lone stream on differently configured models of one weights directory, in one process.

Through the gateway a lone stream on `bench_gateway.py`'s `batched` model (`concurrency:
128`, prefix reuse on, context 1024) decodes slower than on its `serial` model
(`concurrency: 1`, reuse off, context 4096): 0.81 and 0.87 x per round on two H200s,
in the model thread's own `decode_s` (bench/RESULTS.md, runs 34-35). This asks whether the
engine makes that difference: one `MLXEngine` per configuration below, all loaded in this
process (no HTTP, no runner thread), one request at a time, the sides rotating each round,
and per side the median over rounds of a request's median `MLXBatch.step()` (wall and this
thread's CPU time; a step is one token on the single-sequence path).

    python3 bench/gpu/solo_configs.py MODEL_DIR [--product .] [--rounds 8] [--gc-freeze]

`--gc-freeze` moves everything loaded into the collector's permanent generation first
(`gc.freeze()`), so collections stop walking the models' objects.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time

# Each side: the model settings that differ, over `id` and `source`.
CONFIGS = {
    "serial": {"concurrency": 1, "prefix_reuse": False, "context": {"max": 4096}},
    "batched": {"concurrency": 128, "context": {"max": 1024}},
    "batched-noreuse": {"concurrency": 128, "prefix_reuse": False, "context": {"max": 1024}},
    "c128-ctx4096-noreuse": {"concurrency": 128, "prefix_reuse": False, "context": {"max": 4096}},
    "c1-reuse": {"concurrency": 1, "context": {"max": 4096}},
}
SKIPPED_STEPS = 2  # the prefill's step and the first decode step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir")
    parser.add_argument("--product", default=".", help="the product checkout")
    parser.add_argument("--rounds", type=int, default=8, help="measured rounds, after a warm-up")
    parser.add_argument("--gc-freeze", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, args.product)
    import msgspec

    from engines.llm.engine import MLXEngine
    from engines.mlx.platform import detect
    from schemas.config import ModelConfig

    path = detect()
    batches = {}
    for name, settings in CONFIGS.items():
        config = {"id": name, "source": args.model_dir} | settings
        engine = MLXEngine(msgspec.convert(config, ModelConfig), path, None)
        engine.load(None)
        batches[name] = engine.open_batch()
    if args.gc_freeze:
        gc.collect()
        gc.freeze()
    steps: dict[str, list[tuple[float, float]]] = {name: [] for name in CONFIGS}
    for round_ in range(args.rounds + 1):  # round 0 warms up
        names = list(CONFIGS)
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            measured = one_request(batches[name], f"Tell me story {round_} about {name}.")
            if round_:
                steps[name].append(measured)
    for name, rows in steps.items():
        record = {
            "side": name,
            "step_ms": round(statistics.median(wall for wall, _ in rows), 3),
            "cpu_ms": round(statistics.median(cpu for _, cpu in rows), 3),
            "per_round": [round(wall, 3) for wall, _ in rows],
        }
        print(json.dumps(record), flush=True)


def one_request(batch, prompt: str) -> tuple[float, float]:
    """One greedy 128-token request alone on `batch`: its median step, wall and CPU ms."""
    import msgspec

    from schemas.canonical import ChatRequest, Finished

    body = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 128,
        "sampling": {"temperature": 0},
    }
    batch.add("r", msgspec.convert(body, ChatRequest), lambda: False)
    walls, cpus, done = [], [], False
    while not done:
        wall, cpu = time.perf_counter(), time.thread_time()
        outputs = batch.step()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.thread_time() - cpu)
        done = any(isinstance(output, Finished) for _, output in outputs)
    walls, cpus = walls[SKIPPED_STEPS:], cpus[SKIPPED_STEPS:]
    return 1e3 * statistics.median(walls), 1e3 * statistics.median(cpus)


if __name__ == "__main__":
    main()
