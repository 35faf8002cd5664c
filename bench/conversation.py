"""A 10-turn conversation: time-to-first-token per turn with prefix reuse on and off.

    .venv/bin/python bench/conversation.py [--repeats 3] [--turns 10] [--max-tokens 32]

One gateway serves the same model twice: `reuse` (`prefix_reuse: true`) and `fresh`
(`prefix_reuse: false`). Each repeat holds one conversation per model id — a long system
prompt (so prefill matters), then turns that append the model's answer and a new user
message — and runs turn k on both ids before turn k+1 (the order alternating), so noise
hits both. Each repeat's system prompt starts with its own number, so no conversation
reuses another's prefix. `reused_prefix_tokens` comes from the `generated` events.
Target (issue 5): turn 10 TTFT with reuse <= 0.2 x without.
"""

from __future__ import annotations

import argparse
import os

import httpx
from common import (
    SMOLLM2,
    Gateway,
    chat_body,
    fmt,
    median,
    report,
    stream_chat,
    table,
)

RULES = [
    "Answer in plain English and keep every answer short and concrete.",
    "When a question is ambiguous, state the reading you chose before answering.",
    "Never invent file names, commands or numbers you have not been given.",
    "Prefer standard library tools over third-party packages when both would do.",
    "When you show code, show the smallest complete piece that runs.",
    "Say so plainly when you do not know something instead of guessing.",
    "Keep the user's own words for names of things they defined.",
    "When asked for a list, give at most five items, most important first.",
    "Do not repeat the question back to the user before answering it.",
    "If a request could damage data, say what it would change before doing it.",
    "Use metric units unless the user used other units first.",
    "Write dates as year, month and day, and times in twenty-four hours.",
]
TOPIC = (
    "You are the assistant of a small team that runs a harbour on a windy coast. The team "
    "keeps boats, nets, engines and a small weather station, and writes short notes about "
    "each day's work. They ask about tides, repairs, supplies, schedules and the weather. "
)
QUESTIONS = [
    "What should we check on the boats before a storm?",
    "How often should the nets be repaired?",
    "Which supplies run out first in winter?",
    "How do we read the barometer on the weather station?",
    "What is a good schedule for engine maintenance?",
    "How should we store fuel safely?",
    "What do we write in the daily notes?",
    "How do we know when the tide turns?",
    "What should a new team member learn first?",
    "Summarise the most important safety rule in one sentence.",
    "Which tools should always be on board?",
    "How do we plan work for a week of bad weather?",
]

CONFIG = f"""
server: {{host: 127.0.0.1}}
models:
  - id: reuse
    engine: mlx
    source: {SMOLLM2}
    context: {{max: 4096}}
    concurrency: {{concurrency}}
    prefix_reuse: true
    session_slots: 4
  - id: fresh
    engine: mlx
    source: {SMOLLM2}
    context: {{max: 4096}}
    concurrency: {{concurrency}}
    prefix_reuse: false
"""


def system_prompt(session: int) -> str:
    """A long system prompt (~600 tokens), its first words unique to the session."""
    rules = "\n".join(
        f"Rule {i + 1}.{j + 1}: {rule}" for i in range(2) for j, rule in enumerate(RULES)
    )
    return f"Session {session}. {TOPIC}\nFollow these rules.\n{rules}\n{TOPIC}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument(
        "--concurrency", type=int, default=4, help="both model ids' setting (shipped: 4)"
    )
    args = parser.parse_args()
    load_before = os.getloadavg()
    config = CONFIG.replace("{concurrency}", str(args.concurrency))

    # per (side, turn): client TTFT, engine TTFT, prompt tokens, reused prefix tokens
    seen: dict[tuple[str, int], list[dict]] = {}
    identical = True
    with Gateway(config, "conversation") as gateway, httpx.Client(timeout=600) as client:
        # Warm-up on an unrelated short prompt, so turn 1 of repeat 1 is not a cold start.
        for side in ("reuse", "fresh"):
            stream_chat(
                client, gateway.url, chat_body(side, [{"role": "user", "content": "Hi"}], 4)
            )
        for repeat in range(args.repeats):
            system = {"role": "system", "content": system_prompt(repeat)}
            history = {"reuse": [system], "fresh": [system]}
            for turn in range(1, args.turns + 1):
                question = {"role": "user", "content": QUESTIONS[(turn - 1) % len(QUESTIONS)]}
                order = ("reuse", "fresh") if turn % 2 else ("fresh", "reuse")
                answers = {}
                for side in order:
                    messages = [*history[side], question]
                    timing = stream_chat(
                        client, gateway.url, chat_body(side, messages, args.max_tokens)
                    )
                    event = gateway.generated(timing.request_id)
                    seen.setdefault((side, turn), []).append(
                        {
                            "ttft": timing.ttft,
                            "engine_ttft": event.get("ttft_s"),
                            "prompt": timing.prompt_tokens,
                            "reused": event.get("reused_prefix_tokens", 0),
                            "evicted": event.get("session_evicted", False),
                        }
                    )
                    answers[side] = timing.text
                    history[side] = [*messages, {"role": "assistant", "content": timing.text}]
                identical &= answers["reuse"] == answers["fresh"]
                print(
                    f"repeat {repeat} turn {turn:2d}: prompt {seen[('reuse', turn)][-1]['prompt']}"
                    f" tokens, TTFT reuse {seen[('reuse', turn)][-1]['ttft'] * 1000:7.1f} ms "
                    f"(reused {seen[('reuse', turn)][-1]['reused']}, "
                    f"evicted {seen[('reuse', turn)][-1]['evicted']}), "
                    f"fresh {seen[('fresh', turn)][-1]['ttft'] * 1000:7.1f} ms",
                    flush=True,
                )
        platform_path = gateway.platform()
        decoding = gateway.decoding()

    rows = []
    for turn in range(1, args.turns + 1):
        on, off = seen[("reuse", turn)], seen[("fresh", turn)]
        ratios = [a["ttft"] / b["ttft"] for a, b in zip(on, off, strict=True)]
        rows.append(
            [
                turn,
                median([r["prompt"] for r in on]),
                fmt(median([r["ttft"] * 1000 for r in on]), 1),
                fmt(median([r["ttft"] * 1000 for r in off]), 1),
                fmt(median(ratios), 3),
                median([r["reused"] for r in on]),
                sum(r["evicted"] for r in on),
                fmt(median([(r["engine_ttft"] or 0) * 1000 for r in on]), 1),
                fmt(median([(r["engine_ttft"] or 0) * 1000 for r in off]), 1),
            ]
        )
    body = table(
        [
            "turn",
            "prompt tokens",
            "TTFT ms, reuse on",
            "TTFT ms, reuse off",
            "on/off (median of per-repeat ratios)",
            "reused_prefix_tokens",
            "session_evicted (repeats with true)",
            "engine ttft_s ms, on",
            "engine ttft_s ms, off",
        ],
        rows,
    )
    last = rows[-1]
    notes = (
        f"Gateway models as attached: {decoding}. "
        f"{args.repeats} conversations of {args.turns} turns per side, turn k run on both "
        f"sides before turn k+1; max_tokens {args.max_tokens}, greedy, concurrency "
        f"{args.concurrency}; TTFT is the client's (request sent to first content chunk), "
        "medians over the repeats; the engine's own ttft_s (from the `generated` event) "
        f"beside it. Target: turn {args.turns} on/off <= 0.2 (measured {last[4]}). "
        f"Answers identical with and without reuse: {'yes' if identical else 'NO'}."
    )
    report(
        "Conversation: time-to-first-token per turn, prefix reuse on vs off",
        body,
        platform_path=platform_path,
        load_before=load_before,
        notes=notes,
    )


if __name__ == "__main__":
    main()
