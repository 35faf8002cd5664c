"""Would uvloop pay as the gateway's event loop? It against asyncio's own, side by side.

    .venv/bin/pip install uvloop   # not a dependency: this measures whether it should be
    .venv/bin/python bench/event_loop.py [--requests 200] [--rounds 5] [--words 400]

Two gateways on the same scripted model, one as installed (uvicorn's `loop: auto` picks
uvloop when it is importable) and one with `import uvloop` made to fail (a stand-in package
first on its PYTHONPATH), so uvicorn falls back to asyncio's selector loop. Each round, in
turn on both: `--requests` sequential streamed requests with
`max_tokens: 1` on one keep-alive connection (time to first content chunk: HTTP, checks,
routing, queue, the model thread's hop, events, the first frame), then one streamed answer of
`--words` words with no delay between them (content chunks per second: the loop's cost per
token). The scripted engine does no model work, so only the gateway is measured.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import httpx
from common import Gateway, fmt, is_content_frame, median, percentile, report, table

CONFIG = """
server: {{host: 127.0.0.1}}
models:
  - id: echo
    engine: scripted
    script: {{reply: "{reply}", token_delay: 0}}
"""


def first_chunk_ms(client: httpx.Client, url: str, max_tokens: int) -> tuple[float, int]:
    """One streamed request: ms to its first content chunk, and how many chunks came."""
    body = {
        "model": "echo",
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": max_tokens,
        "stream": True,
    }
    sent = time.perf_counter()
    first, chunks = None, 0
    with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if is_content_frame(line):
                first = first or time.perf_counter()
                chunks += 1
    return (first - sent) * 1000, chunks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--words", type=int, default=400)
    args = parser.parse_args()
    try:
        import uvloop  # noqa: F401
    except ImportError:
        raise SystemExit("uvloop is not installed: `.venv/bin/pip install uvloop` first") from None
    load_before = os.getloadavg()
    blocked = Path(tempfile.mkdtemp(prefix="bench-no-uvloop-")) / "uvloop"
    blocked.mkdir()
    (blocked / "__init__.py").write_text(
        "raise ImportError('uvloop blocked by bench/event_loop.py: asyncio side')\n"
    )
    no_uvloop = dict(os.environ)
    no_uvloop["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(blocked.parent), os.environ.get("PYTHONPATH")])
    )
    reply = " ".join(f"w{i}" for i in range(args.words))
    config = CONFIG.format(reply=reply)
    sides = {
        "uvloop (as installed)": Gateway(config, "uvloop"),
        "asyncio (uvloop blocked)": Gateway(config, "asyncio", env=no_uvloop),
    }
    ttft: dict[str, list[float]] = {side: [] for side in sides}
    rates: dict[str, list[float]] = {side: [] for side in sides}
    try:
        for gateway in sides.values():
            gateway.wait_ready()
        platform = next(iter(sides.values())).platform()
        for round_ in range(args.rounds + 1):  # round 0 warms both up
            order = list(sides.items())[:: 1 if round_ % 2 else -1]
            for side, gateway in order:
                with httpx.Client(timeout=60) as client:
                    firsts = [
                        first_chunk_ms(client, gateway.url, 1)[0] for _ in range(args.requests)
                    ]
                    started = time.perf_counter()
                    _, chunks = first_chunk_ms(client, gateway.url, args.words)
                    rate = chunks / (time.perf_counter() - started)
                if round_:
                    ttft[side].extend(firsts)
                    rates[side].append(rate)
    finally:
        for gateway in sides.values():
            gateway.stop()
    rows = [
        [
            side,
            len(ttft[side]),
            fmt(median(ttft[side]), 2),
            fmt(percentile(ttft[side], 10), 2),
            fmt(percentile(ttft[side], 90), 2),
            fmt(median(rates[side]), 0),
            f"{fmt(min(rates[side]), 0)}-{fmt(max(rates[side]), 0)}",
        ]
        for side in sides
    ]
    ours, theirs = sides
    body = table(
        [
            "event loop",
            "requests",
            "TTFT ms (median)",
            "p10",
            "p90",
            f"chunks/s of a {args.words}-word answer (median)",
            "spread over rounds",
        ],
        rows,
    )
    body += (
        f"\n\nuvloop / asyncio: TTFT {fmt(median(ttft[ours]) / median(ttft[theirs]), 3)}x, "
        f"chunks/s {fmt(median(rates[ours]) / median(rates[theirs]), 3)}x"
    )
    notes = (
        f"{args.rounds} rounds after a warm-up, the sides alternating first; per round and side "
        f"{args.requests} sequential streamed requests (max_tokens 1) on one keep-alive "
        f"connection, then one streamed {args.words}-word answer. Scripted engine, so no model "
        "work: the gateway alone."
    )
    report(
        "Event loop: uvloop vs asyncio",
        body,
        platform_path=platform,
        load_before=load_before,
        notes=notes,
    )


if __name__ == "__main__":
    main()
