"""Constrained decoding: its cost per token at 8 concurrent sequences, and what it buys.

    .venv/bin/python bench/constrained.py [--rounds 3] [--tokens 48] [--seeds 50]

Mask share (in-process, on the gateway's platform path): mlx-lm's BatchGenerator decodes 8
sequences, each under a JSON schema through the engine's own mask processor; every step's
wall time is recorded, and so is the time each processor spends on the model's thread
(advancing llguidance's matcher, filling the token mask, building the MLX ops that apply
it). The share is the processors' time per step over the step's time: what the mask adds
to decoding, measured within the same seconds, so the machine's load hits both alike.
Runs alternate free and constrained batches.

Overhead: one gateway on SmolLM2 (`concurrency: 8`); rounds of 8 concurrent requests,
alternating free and constrained, every request running to exactly `--tokens` tokens (the
constrained ones under a schema whose one string must be longer than that, so neither side
stops early). Decode seconds and token counts are the engine's own (`generated` events), so
the ratio is the mask's cost on the model's thread: llguidance's matcher advance and token
mask, and MLX applying it.

Validity: `--seeds` requests at temperature 1.0 asking for a pet as JSON (an enum, an integer
range, a required array), with and without the schema as `response_format`; how many answers
parse and validate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from concurrent.futures import ThreadPoolExecutor

import httpx
import jsonschema
from common import SMOLLM2, Gateway, fmt, report, table

CONFIG = f"""
server: {{host: 127.0.0.1}}
models:
  - id: smollm2
    source: {SMOLLM2}
    concurrency: 8
    prefix_reuse: false
    context: {{max: 2048}}
"""
# Both sides count, which SmolLM2 keeps doing well past the budget; the schema asks for more
# numbers than the budget holds, so the constrained side cannot finish early either.
COUNT = "Count from {start} to 500, separated by commas."
LONG = {
    "type": "object",
    "properties": {"numbers": {"type": "array", "items": {"type": "integer"}, "minItems": 300}},
    "required": ["numbers"],
}
PET = {
    "type": "object",
    "properties": {
        "kind": {"enum": ["cat", "dog", "parrot"]},
        "age": {"type": "integer", "minimum": 1, "maximum": 30},
        "toys": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
    },
    "required": ["kind", "age", "toys"],
    "additionalProperties": False,
}
PET_ASK = [{"role": "user", "content": "Invent a pet. Answer with JSON: kind, age, toys."}]


def schema_format(name: str, schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}


def one(gateway: Gateway, body: dict) -> tuple[dict, str]:
    response = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=900)
    response.raise_for_status()
    event = gateway.generated(response.headers["x-request-id"])
    return event, response.json()["choices"][0]["message"]["content"]


def overhead_round(gateway: Gateway, constrained: bool, tokens: int, salt: int) -> float:
    """Decode seconds per batch step with 8 concurrent sequences (the engines' decode_s:
    all 8 decode together, so a sequence's seconds per token is the step time)."""
    bodies = []
    for i in range(8):
        ask = COUNT.format(start=salt * 8 + i + 1)
        body = {"model": "smollm2", "messages": [{"role": "user", "content": ask}]}
        body |= {"max_tokens": tokens, "temperature": 0.0}
        if constrained:
            body["response_format"] = schema_format("numbers", LONG)
        bodies.append(body)
    with ThreadPoolExecutor(8) as pool:
        events = [event for event, _ in pool.map(lambda b: one(gateway, b), bodies)]
    SHORT.extend(e["new_tokens"] for e in events if e["new_tokens"] < tokens)
    return statistics.median(e["decode_s"] / max(1, e["new_tokens"] - 1) for e in events)


SHORT: list[int] = []  # sequences that ended before the budget (reported, not hidden)


def validity(gateway: Gateway, seeds: int, constrained: bool) -> int:
    def ask(seed: int) -> bool:
        body = {"model": "smollm2", "messages": PET_ASK, "temperature": 1.0, "seed": seed}
        body["max_tokens"] = 120
        if constrained:
            body["response_format"] = schema_format("pet", PET)
        _, text = one(gateway, body)
        try:
            jsonschema.validate(json.loads(text), PET)
        except (ValueError, jsonschema.ValidationError):
            return False
        return True

    with ThreadPoolExecutor(8) as pool:
        return sum(pool.map(ask, range(seeds)))


def mask_share_child(rounds: int, tokens: int) -> None:
    """In-process: print {"free": [step s], "held": [step s], "mask": [mask s per step]}."""
    import time

    from mlx_lm.generate import BatchGenerator
    from mlx_lm.sample_utils import make_sampler

    from engines.mlx.grammar import Grammar, MaskProcessor
    from engines.mlx.load import load_as_platform
    from engines.mlx.platform import detect
    from engines.sources.resolve import resolve_source
    from engines.text.output import load_tool_format
    from engines.text.reasoning import thinking_markers
    from schemas.canonical import ChatRequest, Message, OutputFormat

    model, tokenizer, _ = load_as_platform(resolve_source("bench", SMOLLM2), detect())
    grammar = Grammar(model, tokenizer, thinking_markers(tokenizer), load_tool_format("json_tools"))
    spent = [0.0]

    class Timed(MaskProcessor):
        def apply(self, token, logits):
            started = time.perf_counter()
            out = super().apply(token, logits)
            spent[0] += time.perf_counter() - started
            return out

    def batch(held: bool, salt: int) -> list[float]:
        eos = sorted(tokenizer.eos_token_ids)
        generator = BatchGenerator(
            model, stop_tokens=[[t] for t in eos], completion_batch_size=8, prefill_batch_size=8
        )
        prompts, processors = [], []
        for i in range(8):
            ask = [{"role": "user", "content": f"Write story {salt * 8 + i} about a lighthouse."}]
            text = tokenizer.apply_chat_template(ask, add_generation_prompt=True, tokenize=False)
            prompts.append(tokenizer.encode(text, add_special_tokens=False))
            request = ChatRequest(
                messages=[Message(role="user", content="x")],
                max_tokens=tokens,
                format=OutputFormat(schema=LONG_STORY),
            )
            made = grammar.processors(request, "") if held else []
            processors.append([Timed(p._state, model.args.vocab_size) for p in made])
        generator.insert(
            prompts,
            max_tokens=[tokens] * 8,
            samplers=[make_sampler(temp=0.8)] * 8,
            logits_processors=processors,
        )
        steps, live = [], 8
        spent[0] = 0.0
        while live:
            started = time.perf_counter()
            responses = generator.next_generated()
            steps.append(time.perf_counter() - started)
            live -= sum(r.finish_reason is not None for r in responses)
        generator.close()
        return steps[2:]  # the first steps include prefill

    result = {"free": [], "held": [], "mask": []}
    batch(False, 99)  # warm-up
    batch(True, 99)
    for r in range(rounds):
        result["free"] += batch(False, r)
        held = batch(True, r)
        result["held"] += held
        result["mask"].append(spent[0] / max(1, len(held) + 2))
    print(json.dumps(result))


def mask_share(rounds: int, tokens: int) -> dict:
    """The in-process measurement, in a child on the gateway's platform path."""
    import subprocess
    import sys

    from common import REPO, platform_env

    env = platform_env()
    done = subprocess.run(
        [sys.executable, __file__, "--mask-share-child", "--rounds", str(rounds)]
        + ["--tokens", str(tokens)],
        cwd=REPO,
        env=env | {"PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


# The in-process batches' schema: one long string, so no sequence ends before the budget.
LONG_STORY = {
    "type": "object",
    "properties": {"story": {"type": "string", "minLength": 3000}},
    "required": ["story"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mask-share-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--seeds", type=int, default=50)
    args = parser.parse_args()
    if args.mask_share_child:
        return mask_share_child(args.rounds, args.tokens)
    load_before = os.getloadavg()
    share = mask_share(args.rounds, args.tokens)
    with Gateway(CONFIG, "constrained") as gateway:
        overhead_round(gateway, False, 8, 99)  # warm-up: first-use costs out of the timing
        overhead_round(gateway, True, 8, 99)
        free, held = [], []
        for r in range(args.rounds):
            free.append(overhead_round(gateway, False, args.tokens, r))
            held.append(overhead_round(gateway, True, args.tokens, r))
        valid_free = validity(gateway, args.seeds, False)
        valid_held = validity(gateway, args.seeds, True)
        platform_path = gateway.platform()
    f, h = statistics.median(free), statistics.median(held)
    rows = [
        ["free", fmt(f * 1000), fmt(1 / f * 8, 1), "—"],
        ["json_schema", fmt(h * 1000), fmt(1 / h * 8, 1), f"{(h / f - 1) * 100:+.1f}%"],
    ]
    step_free, step_held = statistics.median(share["free"]), statistics.median(share["held"])
    mask = statistics.median(share["mask"])
    body = (
        f"### Mask share, in-process: 8 sequences x {args.tokens} tokens, {args.rounds} "
        "rounds each way\n\n"
        + table(
            ["measure", "median"],
            [
                ["batch step, free (ms)", fmt(step_free * 1000)],
                ["batch step, all 8 under a json_schema (ms)", fmt(step_held * 1000)],
                ["mask processors' time per step, 8 sequences (ms)", fmt(mask * 1000)],
                ["mask time / free step time", f"{mask / step_free * 100:.1f}%"],
                ["constrained step / free step", f"{(step_held / step_free - 1) * 100:+.1f}%"],
            ],
        )
        + "\n\n"
        f"### Overhead: 8 concurrent sequences x {args.tokens} tokens, "
        f"median of {args.rounds} rounds\n\n"
        + table(["decoding", "ms per batch step", "tokens/s (8 seqs)", "vs free"], rows)
        + f"\n\nper round (ms per step): free {[fmt(x * 1000) for x in free]}, "
        f"json_schema {[fmt(x * 1000) for x in held]}; sequences that ended before "
        f"{args.tokens} tokens: {SHORT or 'none'}\n\n"
        f"### Validity: {args.seeds} seeds at temperature 1.0 (enum, integer range, "
        "required array)\n\n"
        + table(
            ["decoding", "answers that parse and validate"],
            [
                ["free (the prompt names the fields)", f"{valid_free}/{args.seeds}"],
                ["response_format json_schema", f"{valid_held}/{args.seeds}"],
            ],
        )
    )
    report("Constrained decoding", body, platform_path=platform_path, load_before=load_before)


if __name__ == "__main__":
    main()
