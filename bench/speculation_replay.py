"""Why prompt lookup gains what it gains on the CPU: the cost of a verifying pass per width,
and the bench's greedy answers replayed through the real drafter under each length policy.

    .venv/bin/python bench/speculation_replay.py [--max-tokens 64 160] [--answers 3]

In-process, the real SmolLM2 as the gateway holds it (float32 on the CPU). For each task of
bench/speculation.py the single-stream prompts of its first rounds are decoded greedily
(plain, batched: the texts are plain decoding's); then each answer is replayed through
`Drafter` (engines/mlx/lookup.py) as `Solo.advance_run` drives it: a step drafts what
the look-up proposes, the answer says how much of it the model keeps (greedy: exactly). The
replay counts the forward passes and their widths; the measured CPU seconds of a pass of
each width (process time, median: a shared CPU's other work is not counted) turn them into
a predicted decode speed-up, for the drafter's length policy as it is (`cheap`) and as it
was (`+1`: one more after a draft kept whole, what was kept plus one after a partial one).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from common import REPO, SMOLLM2, fmt, platform_env, report, table

if os.environ.get("PYTHONPATH") != str(REPO):  # this checkout's engines, as the gateway runs
    os.execve(
        sys.executable, [sys.executable, *sys.argv], platform_env() | {"PYTHONPATH": str(REPO)}
    )

import msgspec  # noqa: E402
from speculation import TASKS, messages  # noqa: E402

from engines.llm.engine import MLXEngine  # noqa: E402
from engines.mlx import lookup  # noqa: E402
from engines.mlx.platform import detect  # noqa: E402
from schemas.canonical import ChatRequest  # noqa: E402
from schemas.config import ModelConfig  # noqa: E402

WIDTHS = (1, 2, 3, 4, 5, 7, 9, 13)


def load() -> MLXEngine:
    config = {"id": "m", "source": SMOLLM2, "context": {"max": 4096}, "concurrency": 8}
    engine = MLXEngine(
        msgspec.convert(config | {"prefix_reuse": False}, ModelConfig), detect(), None
    )
    engine.load(None)
    return engine


def answers(engine: MLXEngine, task: str, count: int, max_tokens: int) -> list[tuple]:
    """(prompt, greedy answer tokens) of rounds 0..count-1, stream 0, decoded together."""
    batch, tokens, prompts = engine.open_batch(), {}, {}
    emit = batch._emit

    def recorded(uid, token, reason, parked, row=None):
        tokens.setdefault(batch._sequences[uid][0], []).append(token)
        return emit(uid, token, reason, parked, row)

    batch._emit = recorded
    for r in range(count):
        body = {"messages": messages(task, r, 0), "max_tokens": max_tokens}
        request = msgspec.convert(body | {"sampling": {"temperature": 0}}, ChatRequest)
        prompts[r] = engine.prepare(request).prompt
        batch.add(r, request, lambda: False)
    while batch.active:
        batch.step()
    return [(prompts[r], tokens[r]) for r in range(count)]


def pass_costs(model, rows: int, widths) -> dict[int, float]:
    """CPU seconds of one forward pass of rows x width tokens after a 450-token prompt."""
    import mlx.core as mx
    from mlx_lm.models.cache import BatchKVCache, make_prompt_cache

    if rows == 1:
        cache = make_prompt_cache(model)
    else:
        cache = [BatchKVCache([0] * rows) for _ in model.layers]
    model(mx.array([list(range(100, 550))] * rows), cache=cache)
    mx.eval([c.state for c in cache])
    samples = {w: [] for w in widths}
    for _ in range(9):
        for w in widths:
            start = time.process_time()
            mx.eval(mx.argmax(model(mx.array([[7] * w] * rows), cache=cache), axis=-1))
            samples[w].append(time.process_time() - start)
            for layer in cache:
                layer.trim(w)
    return {w: statistics.median(s[2:]) for w, s in samples.items()}


def replay(prompt: list[int], answer: list[int], tokens: int, ngram: int, cheap: bool):
    """The widths of the passes that decode `answer` with drafts, and the drafter."""
    drafter = lookup.Drafter(prompt, tokens, ngram)
    drafter._length = lookup.DraftLength(tokens, cheap=cheap)
    widths, i = [], 0
    while i < len(answer) - 1:
        wanted = drafter.wanted() if i else 0  # the first token comes from the prefill
        draft = drafter.propose(min(len(answer) - i - 1, wanted), answer[i]) if wanted else []
        kept = 0
        while kept < len(draft) and draft[kept] == answer[i + 1 + kept]:
            kept += 1
        if draft:
            drafter.record(len(draft), kept)
        widths.append(1 + len(draft))
        drafter.extend(answer[i : i + 1 + kept])
        i += 1 + kept
    return widths, drafter


def cost_of(width: int, costs: dict[int, float]) -> float:
    """A pass's cost, interpolated linearly between the widths measured."""
    below = max(w for w in costs if w <= width)
    above = min((w for w in costs if w >= width), default=below)
    if above == below:
        return costs[below]
    share = (width - below) / (above - below)
    return costs[below] + share * (costs[above] - costs[below])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-tokens", type=int, nargs="+", default=[64, 160])
    parser.add_argument("--answers", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=6)
    parser.add_argument("--ngram", type=int, default=3)
    args = parser.parse_args()
    load_before = os.getloadavg()
    engine = load()
    costs = {rows: pass_costs(engine._model, rows, WIDTHS) for rows in (1, 4)}
    body = table(
        ["width (1 + drafted)", *[str(w) for w in WIDTHS]],
        [
            [f"{rows} row(s): CPU ms / pass ({fmt(1000 * c[1], 1)} = 1)"]
            + [fmt(c[w] / c[1], 2) for w in WIDTHS]
            for rows, c in costs.items()
        ],
    )
    rows = []
    for task in TASKS:
        decoded = answers(engine, task, args.answers, max(args.max_tokens))
        for limit in args.max_tokens:
            for cheap in (False, True):
                ratios, drafted, accepted, passes, tokens = [], 0, 0, 0, 0
                for prompt, answer in decoded:
                    answer = answer[:limit]
                    widths, drafter = replay(prompt, answer, args.tokens, args.ngram, cheap)
                    cost = sum(cost_of(w, costs[1]) for w in widths)
                    ratios.append((len(answer) - 1) * costs[1][1] / cost)
                    drafted, accepted = drafted + drafter.drafted, accepted + drafter.accepted
                    passes, tokens = passes + len(widths), tokens + len(answer) - 1
                rows.append(
                    [
                        task,
                        limit,
                        "cheap (now)" if cheap else "+1 (before)",
                        fmt(accepted / drafted if drafted else None, 2),
                        fmt(tokens / passes, 2),
                        " ".join(fmt(r, 2) for r in ratios),
                        fmt(statistics.median(ratios), 2),
                    ]
                )
    body += "\n\n" + table(
        [
            "task",
            "max_tokens",
            "length policy",
            "acceptance",
            "tokens / pass",
            "predicted ratio per answer",
            "median",
        ],
        rows,
    )
    notes = (
        f"Answers: rounds 0-{args.answers - 1}, stream 0 of bench/speculation.py, greedy; "
        f"speculation tokens {args.tokens}, ngram {args.ngram}. Predicted ratio = plain cost "
        "(one 1-wide pass per token) / the replay's passes at the measured CPU cost per "
        "width; host work and the lost pipelining of a drafted step are not counted."
    )
    report(
        "Speculation on the CPU: cost per width and replayed acceptance",
        body,
        platform_path=None,
        load_before=load_before,
        notes=notes,
    )


if __name__ == "__main__":
    main()
