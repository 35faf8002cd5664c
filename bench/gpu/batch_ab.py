"""The gateway's batch (`MLXBatch`) against raw `BatchGenerator`, in one process, no HTTP.

    python3 bench/gpu/batch_ab.py MODEL_DIR [--clients 32,128] [--rounds 2] [--max-tokens 128]

Through HTTP the gateway reached 0.33-0.72 x raw `BatchGenerator` at 128 clients on the
H200 once weights were bfloat16, with the model thread waiting in `mx.eval` half of the
time. This tells whether the loss is in the batch itself (how requests join it, what each
step does) or outside it (event loop, HTTP, the GIL): on the same loaded model, greedy,
the same prompts (bench/concurrency.py's), aggregate tok/s of

- `raw`: every prompt inserted at once into a fresh `BatchGenerator` (raw_batch.py);
- `MLXBatch at once`: every request added before the first step, then stepped to the end;
- `MLXBatch staggered`: one request first (it starts alone, on the single-sequence path),
  a step, then the rest in four groups with a step between, as a burst reaches the gateway;
- `MLXBatch thread`: at once, on a thread of its own (as the runner runs it), the main
  thread idle; `thread+spin`: the main thread meanwhile runs Python without pause (an
  event loop that never waits), which takes the GIL from the batch's thread; with
  `--switch-ms`, `thread+spin` again under each of those GIL switch intervals.

Round 0 warms up and is dropped; sides interleaved. Prints medians and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # bench/: the product's prompts
sys.path.insert(0, str(HERE.parents[1]))  # the product


def load_engine(model_dir: str, concurrency: int, **settings):
    """The gateway's MLX engine on `model_dir`, loaded as the gateway loads it (reuse off);
    `settings`: more model keys."""
    import msgspec

    from engines.llm.engine import MLXEngine
    from engines.mlx.platform import detect
    from schemas.config import ModelConfig

    config = {
        "id": "ab",
        "source": model_dir,
        "concurrency": concurrency,
        "prefix_reuse": False,
        "context": {"max": 1024},
        **settings,
    }
    engine = MLXEngine(msgspec.convert(config, ModelConfig), detect(), None)
    info = engine.load(None)
    return engine, info


def requests(round_: int, n: int, n_tokens: int) -> list:
    import msgspec
    from concurrency import prompt

    from schemas.canonical import ChatRequest

    return [
        msgspec.convert(
            {"messages": prompt(round_, i), "max_tokens": n_tokens, "sampling": {"temperature": 0}},
            ChatRequest,
        )
        for i in range(n)
    ]


def through_batch(engine, reqs: list, groups: int, on_step=None) -> float:
    """Aggregate tok/s of `reqs` through one `MLXBatch`: added at once (`groups` 0), or one
    first and the rest in `groups` groups a step apart; `on_step` gets each step's outputs."""
    from schemas.canonical import Finished

    batch = engine.open_batch()
    tokens, done = 0, 0
    started = time.perf_counter()

    def step() -> None:
        nonlocal tokens, done
        outputs = batch.step()
        for _, output in outputs:
            if isinstance(output, Finished):
                tokens += output.new_tokens
                done += 1
        if on_step is not None:
            on_step(outputs)

    if groups:
        batch.add(0, reqs[0], lambda: False)
        step()
        rest = list(enumerate(reqs))[1:]
        size = -(-len(rest) // groups)
        for g in range(0, len(rest), size):
            for i, r in rest[g : g + size]:
                batch.add(i, r, lambda: False)
            step()
    else:
        for i, r in enumerate(reqs):
            batch.add(i, r, lambda: False)
    while done < len(reqs):
        step()
    return tokens / (time.perf_counter() - started)


def process_worker(conn, model_dir: str, concurrency: int, n_tokens: int) -> None:
    """A child process holding its own engine: per `(round, n)` it receives, the batch at
    once, each step's outputs sent back as msgpack `["step", outputs]` (as a model process
    would send them to the HTTP process), then `["rate", tok/s]`; None ends it."""
    import msgspec

    engine, _ = load_engine(model_dir, concurrency)
    conn.send("ready")
    while (order := conn.recv()) is not None:
        round_, n = order
        send = lambda outputs: conn.send_bytes(msgspec.msgpack.encode(["step", outputs]))  # noqa: E731
        rate = through_batch(engine, requests(round_, n, n_tokens), 0, send)
        conn.send_bytes(msgspec.msgpack.encode(["rate", rate]))


def spin_once() -> None:
    """A little Python, as an event loop turning outputs into chunks runs it."""
    json.dumps({"spin": list(range(20))})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("--clients", default="32,128")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument(
        "--switch-ms",
        type=lambda v: [float(x) for x in v.split(",") if x],
        default=[],
        help="GIL switch intervals (ms) to run `thread+spin` under too, e.g. 0.5,0.1",
    )
    parser.add_argument(
        "--process",
        action="store_true",
        help="also `process+spin`: the batch in a child process of its own, sending each "
        "step's outputs to this one, which spins in Python meanwhile",
    )
    args = parser.parse_args()

    import msgspec
    from raw_batch import decode_batch

    counts = [int(c) for c in args.clients.split(",")]
    engine, info = load_engine(args.model_dir, max(counts))
    print(f"weights {info.detail['weights']}", flush=True)
    model, tokenizer = engine._model, engine._tokenizer
    eos = sorted(tokenizer.eos_token_ids)
    n_tokens = args.max_tokens

    def raw(round_: int, n: int) -> float:
        prompts = [engine.prepare(r).prompt for r in requests(round_, n, n_tokens)]
        return decode_batch(model, eos, prompts, n_tokens, n)["aggregate"]

    def in_process(round_: int, n: int, groups: int) -> float:
        return through_batch(engine, requests(round_, n, n_tokens), groups)

    def on_thread(round_: int, n: int, spin: bool, interval: float | None = None) -> float:
        """`MLXBatch at once` on a thread of its own, as the gateway's runner runs it, the
        main thread waiting (idle) or spinning in Python (an event loop that never waits),
        under CPython's GIL switch interval or `interval` seconds."""
        result: list[float] = []
        reqs = requests(round_, n, n_tokens)
        worker = threading.Thread(target=lambda: result.append(through_batch(engine, reqs, 0)))
        default = sys.getswitchinterval()
        sys.setswitchinterval(interval or default)
        worker.start()
        while spin and worker.is_alive():
            spin_once()
        worker.join()
        sys.setswitchinterval(default)
        return result[0]

    child = None
    if args.process:
        context = multiprocessing.get_context("spawn")
        child, theirs = context.Pipe()
        worker = context.Process(
            target=process_worker, args=(theirs, args.model_dir, max(counts), n_tokens)
        )
        worker.start()
        assert child.recv() == "ready"

    def in_child(round_: int, n: int) -> float:
        """The batch in the child; here, every step's outputs decoded, with Python between."""
        child.send((round_, n))
        while True:
            while not child.poll(0):
                spin_once()
            kind, body = msgspec.msgpack.decode(child.recv_bytes())
            if kind == "rate":
                return body

    sides = {
        "raw": raw,
        "MLXBatch at once": lambda r, n: in_process(r, n, 0),
        "MLXBatch staggered": lambda r, n: in_process(r, n, 4),
        "MLXBatch thread": lambda r, n: on_thread(r, n, False),
        "MLXBatch thread+spin": lambda r, n: on_thread(r, n, True),
        **{
            f"thread+spin {ms:g} ms": lambda r, n, s=ms / 1000: on_thread(r, n, True, s)
            for ms in args.switch_ms
        },
        **({"MLXBatch process+spin": in_child} if args.process else {}),
    }
    rates: dict = {f"{name} {n}": [] for n in counts for name in sides}
    for round_ in range(args.rounds + 1):
        for n in counts:
            names = list(sides)
            names = names[round_ % len(names) :] + names[: round_ % len(names)]
            for name in names:
                rate = sides[name](round_, n)
                if round_:
                    rates[f"{name} {n}"].append(rate)
                print(f"round {round_} {n:4d} clients {name:24s} {rate:9.1f} tok/s", flush=True)
    if child is not None:
        child.send(None)
    medians = {k: statistics.median(v) for k, v in rates.items()}
    for n in counts:
        ref = medians[f"raw {n}"]
        for name in sides:
            m = medians[f"{name} {n}"]
            print(f"{n:4d} clients {name:20s} median {m:9.1f} tok/s  x raw {m / ref:.3f}")
    print(json.dumps({"model": args.model_dir, "rates": rates, "medians": medians}))


if __name__ == "__main__":
    main()
