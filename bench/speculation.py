"""Speculation: decode tokens/s with prompt-lookup drafts against plain decoding, on the real
SmolLM2, alone and at 4 and 8 concurrent streams, on three tasks.

    .venv/bin/python bench/speculation.py [--repeats 3] [--max-tokens 160] [--streams 1 4 8]

One gateway serves the model twice: `plain` and `lookup` (`speculation: {kind:
prompt_lookup}`), both `concurrency: 8`, prefix reuse off (every round prefills its prompts
alike). Tasks: (a) a ~60-line Python file and "rename x to total and return the file in
full" (a system prompt asks for the file alone), (b) a summary of a pasted text, (c) free
chat. Each round runs every task and stream count on both models, the order of the two
sides alternating by round, so the noise of a shared CPU hits both; a warm-up burst of each
task on each side comes first. Each stream's prompt is distinct per stream and round.
Decode tok/s = all new tokens / (last token - first token, over the streams): prefill left
out. Greedy: the script asserts that both sides give the same texts. Targets (issue 28):
(a) >= 1.8x alone and >= 1.3x at 4 streams, (b) >= 1.2x, (c) >= 0.97x.
"""

from __future__ import annotations

import argparse
import asyncio
import os

import httpx
from common import (
    SMOLLM2,
    Gateway,
    StreamTiming,
    astream_chat,
    chat_body,
    fmt,
    median,
    report,
    table,
)

CONFIG = """
server: {{host: 127.0.0.1}}
models:
  - id: plain
    source: {source}
    context: {{max: 4096}}
    concurrency: 8
    prefix_reuse: false
  - id: lookup
    source: {source}
    context: {{max: 4096}}
    concurrency: 8
    prefix_reuse: false
    speculation: {{kind: prompt_lookup, tokens: {tokens}, ngram: {ngram}}}
"""

TOPICS = ["invoices", "rainfall", "scores", "orders", "distances", "prices", "votes", "loads"]


def code_file(topic: str) -> str:
    """A ~60-line Python module whose accumulators are all called `x`."""
    blocks = []
    for i, verb in enumerate(["sum", "count", "largest", "average", "spread", "weighted"]):
        blocks.append(
            f"def {verb}_of_{topic}(items):\n"
            f'    """The {verb} of the {topic} in items."""\n'
            "    x = 0\n"
            "    for item in items:\n"
            f"        if item.{topic}_value is None:\n"
            "            continue\n"
            f"        x = x + item.{topic}_value * {i + 1}\n"
            "    return x\n"
        )
    return f"import math\n\n\n{chr(10).join(blocks)}"


def pasted_text(topic: str) -> str:
    sentences = [
        f"The committee met on Tuesday to review the {topic} reported by each district.",
        f"Most districts reported {topic} close to last year's figures, with two exceptions.",
        f"The northern district reported {topic} well above the average, after a new office "
        "opened in the spring.",
        f"The coastal district reported {topic} far below the average, because the storms in "
        "March closed its main office for six weeks.",
        "The committee agreed to send two auditors to the coastal district in the autumn.",
        f"It also agreed to publish the {topic} of every district on the public website "
        "each month, starting in January.",
        "The next meeting will take place on the first Tuesday of the new year.",
    ]
    return " ".join(sentences)


# SmolLM2-135M describes the file unless told to answer with the file alone.
EDITOR = "You are a code editor. Reply with the whole edited file in one code block."
TASKS = {
    "code edit": lambda topic: (
        "Rename the variable x to total in this file and return the "
        f"file in full:\n\n```python\n{code_file(topic)}```"
    ),
    "summary": lambda topic: f"Summarize this text:\n\n{pasted_text(topic)}",
    "free chat": lambda topic: f"Write a short story about a clerk who counts {topic}.",
}
TARGETS = {("code edit", 1): 1.8, ("code edit", 4): 1.3, "summary": 1.2, "free chat": 0.97}


def messages(task: str, round_: int, stream: int) -> list[dict]:
    topic = TOPICS[(stream + round_) % len(TOPICS)]
    system = [{"role": "system", "content": EDITOR}] if task == "code edit" else []
    return [*system, {"role": "user", "content": f"({round_}.{stream}) {TASKS[task](topic)}"}]


async def burst(url: str, model: str, task: str, streams: int, round_: int, max_tokens: int):
    limits = httpx.Limits(max_connections=streams + 2, max_keepalive_connections=streams + 2)
    async with httpx.AsyncClient(timeout=1800, limits=limits) as client:
        timings: list[StreamTiming] = await asyncio.gather(
            *(
                astream_chat(client, url, chat_body(model, messages(task, round_, i), max_tokens))
                for i in range(streams)
            )
        )
    tokens = sum(t.new_tokens or 0 for t in timings)
    first = min(t.first_token for t in timings if t.first_token)
    last = max(t.last_token for t in timings if t.last_token)
    return {
        "tps": (tokens - 1) / (last - first),
        "texts": [t.text for t in timings],
        "ids": [t.request_id for t in timings],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--tokens", type=int, default=6, help="speculation.tokens")
    parser.add_argument("--ngram", type=int, default=3, help="speculation.ngram")
    parser.add_argument("--source", default=SMOLLM2)
    args = parser.parse_args()
    load_before = os.getloadavg()
    config = CONFIG.format(source=args.source, tokens=args.tokens, ngram=args.ngram)
    # results[(task, streams)][side] -> per-round figures
    results: dict[tuple[str, int], dict[str, list[dict]]] = {}
    with Gateway(config, "speculation") as gateway:
        # Warm-up: MLX's first forward pass of each new shape (a draft's width) is slow.
        for task in args.tasks:
            for side in ("plain", "lookup"):
                asyncio.run(burst(gateway.url, side, task, 2, -1, 32))
        for round_ in range(args.repeats):
            for task in args.tasks:
                for streams in args.streams:
                    sides = ["plain", "lookup"] if round_ % 2 == 0 else ["lookup", "plain"]
                    runs = {
                        s: asyncio.run(
                            burst(gateway.url, s, task, streams, round_, args.max_tokens)
                        )
                        for s in sides
                    }
                    # Greedy speculation must change nothing but the speed.
                    assert runs["lookup"]["texts"] == runs["plain"]["texts"], (
                        task,
                        streams,
                        round_,
                    )
                    for side, run in runs.items():
                        results.setdefault((task, streams), {}).setdefault(side, []).append(run)
                    print(
                        f"round {round_} {task:9s} x{streams}: plain {runs['plain']['tps']:6.2f}"
                        f" lookup {runs['lookup']['tps']:6.2f} tok/s",
                        flush=True,
                    )
        events = gateway.events("generated")
        platform_path = gateway.platform()
    rows = []
    for (task, streams), sides in results.items():
        ratios = [b["tps"] / a["tps"] for a, b in zip(sides["plain"], sides["lookup"], strict=True)]
        target = TARGETS.get((task, streams), TARGETS.get(task))
        rows.append(
            [
                task,
                streams,
                fmt(median([r["tps"] for r in sides["plain"]])),
                fmt(median([r["tps"] for r in sides["lookup"]])),
                fmt(median(ratios), 2),
                f">= {target}" if target else "-",
            ]
        )
    acceptance = _acceptance(events, results)
    body = table(
        ["task", "streams", "plain tok/s", "lookup tok/s", "ratio (median per round)", "target"],
        rows,
    )
    body += "\n\n" + table(
        ["task", "drafted", "accepted", "acceptance"],
        [[t, d, a, fmt(a / d if d else None, 2)] for t, (d, a) in acceptance.items()],
    )
    notes = (
        f"{args.repeats} rounds; greedy, max_tokens {args.max_tokens}; speculation tokens "
        f"{args.tokens}, ngram {args.ngram}; both models concurrency 8, prefix reuse off; "
        "sides alternate first by round. Decode tok/s = (new tokens - 1) / (last token - first "
        "token) over the streams of a burst; ratio = lookup / plain per round, median. Every "
        "greedy text was identical on both sides (asserted)."
    )
    report(
        "Speculation: prompt lookup vs plain decoding",
        body,
        platform_path=platform_path,
        load_before=load_before,
        notes=notes,
    )


def _acceptance(events: list[dict], results: dict) -> dict[str, tuple[int, int]]:
    """Drafted and accepted tokens of the `lookup` side per task, from its `generated` events."""
    task_of = {
        request_id: task
        for (task, _), sides in results.items()
        for run in sides["lookup"]
        for request_id in run["ids"]
    }
    out: dict[str, tuple[int, int]] = {}
    for event in events:
        task = task_of.get(event.get("request_id"))
        if task is not None:
            d, a = out.get(task, (0, 0))
            out[task] = (d + event["drafted_tokens"], a + event["accepted_tokens"])
    return out


if __name__ == "__main__":
    main()
