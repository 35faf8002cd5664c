"""What the gateway adds in front of an upstream (`engine: upstream`), beside LiteLLM's proxy.

    .venv/bin/python bench/upstream_overhead.py [--requests 400] [--rounds 4]
        [--litellm /path/to/litellm] [--tokens 300]

The upstream is a scripted-engine gateway (`reply: "ok"`, concurrency 8). In front of it,
in the same run: a second gateway whose model is `engine: upstream` to it, and (when
`--litellm` names LiteLLM's `litellm` command) LiteLLM's proxy with one `openai/` model to
it. Non-streamed chat completions with max_tokens 1 at 1 and 8 clients in flight, the
three targets interleaved round by round, so noise hits each alike; added latency is a
proxy's percentile minus the upstream's own. Then the decode ratio: one long streamed
answer (`--tokens` words at 5 ms each, one chunk each) timed straight from the upstream and
through the gateway, alternating: chunks per second after the first tenth of the stream
(the ratio of the medians).

`--mlx-lm` adds the decode ratio on a real model: mlx-lm's own server on SmolLM2 (the
float32 copy bench/concurrency.py makes) as the upstream, 64 tokens at temperature 0, the
decode rate from its usage and the first and last chunk, straight and through the gateway.

LiteLLM is installed in a virtual environment of its own (it pins huggingface_hub and rich
to versions that mlx-lm's stack does not use): `python3 -m venv /tmp/litellm && \
/tmp/litellm/bin/pip install 'litellm[proxy]'`, then `--litellm /tmp/litellm/bin/litellm`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
from common import (
    Gateway,
    chat_body,
    fmt,
    free_port,
    median,
    percentile,
    report,
    stop_process,
    stream_chat,
    table,
)
from overhead import run_round

WORDS = 300
UPSTREAM = """
server: {host: 127.0.0.1}
models:
  - {id: ok, engine: scripted, concurrency: 8, script: {reply: "ok"}, queue: {max_depth: 64}}
  - id: long
    engine: scripted
    concurrency: 8
    script: {reply: "REPLY", token_delay: 0.005}
"""
FRONT = """
server: {host: 127.0.0.1}
models:
  - id: ok
    engine: upstream
    queue: {max_depth: 64}
    upstream: {urls: ["URL"], model: ok, max_in_flight: 8}
  - {id: long, engine: upstream, upstream: {urls: ["URL"], model: long}}
"""
LITELLM = """
model_list:
  - model_name: ok
    litellm_params: {model: openai/ok, api_base: "URL", api_key: unused}
litellm_settings: {drop_params: true}
"""
LEVELS = (1, 8)


class LiteLLM:
    """LiteLLM's proxy (`litellm --config`), one model to the upstream."""

    def __init__(self, command: str, upstream: str) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="bench-litellm-")
        config = Path(self._dir.name) / "litellm.yaml"
        config.write_text(LITELLM.replace("URL", upstream))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = (Path(self._dir.name) / "litellm.log").open("w")
        # No key on either proxy (the gateway here has no api_keys): no auth work on either.
        env = {
            **os.environ,
            "LITELLM_LOG": "ERROR",
            "LITELLM_TELEMETRY": "False",
            "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
        }
        self.process = subprocess.Popen(
            [command, "--config", str(config), "--host", "127.0.0.1", "--port", str(self.port)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        deadline = time.monotonic() + 180
        while True:
            assert self.process.poll() is None, Path(self._log.name).read_text()[-3000:]
            assert time.monotonic() < deadline, "litellm did not start"
            try:
                body = {"model": "ok", "messages": [{"role": "user", "content": "hi"}]}
                if httpx.post(f"{self.url}/v1/chat/completions", json=body).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)

    def version(self) -> str:
        out = subprocess.run([self.process.args[0], "--version"], capture_output=True, text=True)
        return (out.stdout or out.stderr).strip().splitlines()[-1] if out.returncode == 0 else "?"

    def stop(self) -> None:
        stop_process(self.process)
        self._log.close()
        self._dir.cleanup()


def overhead(targets: dict[str, str], requests: int, rounds: int) -> str:
    per_round = max(1, requests // rounds)
    rates = {(t, n): [] for t in targets for n in LEVELS}
    latencies = {(t, n): [] for t in targets for n in LEVELS}
    for url in targets.values():
        asyncio.run(run_round(url, 1, 20))  # warm-up
    for round_ in range(rounds):
        for level in LEVELS:
            for name, url in targets.items():
                wall, got = asyncio.run(run_round(url, level, per_round))
                rates[name, level].append(len(got) / wall)
                latencies[name, level] += [s[0] * 1000 for s in got]
                print(f"round {round_} {name} x{level}: {len(got) / wall:7.1f} req/s", flush=True)
    rows = []
    for level in LEVELS:
        base50 = percentile(latencies["upstream", level], 50)
        base99 = percentile(latencies["upstream", level], 99)
        for name in targets:
            p50 = percentile(latencies[name, level], 50)
            p99 = percentile(latencies[name, level], 99)
            added = name != "upstream"
            rows.append(
                [
                    level,
                    name,
                    fmt(median(rates[name, level]), 0),
                    fmt(p50),
                    fmt(p99),
                    f"+{fmt(p50 - base50)}" if added else "—",
                    f"+{fmt(p99 - base99)}" if added else "—",
                ]
            )
    header = ["clients", "target", "req/s (median of rounds)", "p50 ms", "p99 ms"]
    return table([*header, "added p50 ms", "added p99 ms"], rows)


def decode_ratio(upstream: str, front: str, words: int, runs: int) -> tuple[str, float]:
    """Steady-state chunk rate on each path, in back-to-back pairs; the first tenth of each
    stream (start-up, where a proxy's first chunks may bunch) is left out of the span. The
    ratio is the median of the pairs' ratios, so load that drifts between pairs cancels."""
    rates: dict[str, list[float]] = {"upstream": [], "through the gateway": []}
    body = chat_body("long", [{"role": "user", "content": "go"}], max_tokens=words * 8)
    with httpx.Client(timeout=120) as client:
        stream_chat(client, upstream, body)  # warm-up
        for _ in range(runs):
            for name, url in (("upstream", upstream), ("through the gateway", front)):
                # When each content chunk arrived (client clock).
                times = stream_chat(client, url, body).arrivals
                assert len(times) == words, f"{name}: {len(times)} of {words} chunks"
                skip = words // 10
                rates[name].append((words - 1 - skip) / (times[-1] - times[skip]))
    pairs = [t / d for d, t in zip(rates["upstream"], rates["through the gateway"], strict=True)]
    rows = [[name, len(r), fmt(median(r), 1)] for name, r in rates.items()]
    spread = f"pairs' ratios {min(pairs):.3f}–{max(pairs):.3f}"
    return table(["path", "runs", "chunks/s, steady state (median)"], rows) + f"\n\n{spread}", (
        median(pairs)
    )


FRONT_MLX = """
server: {host: 127.0.0.1}
models:
  - {id: smol, engine: upstream, upstream: {urls: ["URL"], model: default_model, timeout: 300s}}
"""


def mlx_lm_ratio(runs: int) -> tuple[str, float]:
    """Decode tokens/s of mlx-lm's server on SmolLM2, straight and through the gateway."""
    from common import MlxLmServer
    from concurrency import float32_dir

    question = [{"role": "user", "content": "Write a short story about a lighthouse keeper."}]
    rates: dict[str, list[float]] = {"mlx-lm server": [], "through the gateway": []}
    with (
        MlxLmServer(float32_dir(), "mlx-lm-upstream") as server,
        Gateway(FRONT_MLX.replace("URL", f"{server.url}/v1"), "front-mlx") as front,
        httpx.Client(timeout=600) as client,
    ):
        paths = {
            "mlx-lm server": (server.url, "default_model"),
            "through the gateway": (front.url, "smol"),
        }
        stream_chat(client, server.url, chat_body("default_model", question, 8))  # warm-up
        for _ in range(runs):
            for name, (url, model) in paths.items():
                timing = stream_chat(client, url, chat_body(model, question, 64))
                rates[name].append(timing.decode_tps)
    pairs = [
        t / d for d, t in zip(rates["mlx-lm server"], rates["through the gateway"], strict=True)
    ]
    rows = [[name, len(r), fmt(median(r), 2)] for name, r in rates.items()]
    spread = f"pairs' ratios {min(pairs):.3f}–{max(pairs):.3f}"
    body = table(["path", "runs", "decode tokens/s (median)"], rows) + f"\n\n{spread}"
    return body, median(pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=400, help="per target and level")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--litellm", help="LiteLLM's `litellm` command (its own venv)")
    parser.add_argument("--tokens", type=int, default=WORDS, help="words of the long answer")
    parser.add_argument("--runs", type=int, default=9, help="long answers per path")
    parser.add_argument("--mlx-lm", action="store_true", help="also on mlx-lm's server")
    args = parser.parse_args()
    load_before = os.getloadavg()
    reply = " ".join(f"w{i}" for i in range(args.tokens))
    litellm = None
    with Gateway(UPSTREAM.replace("REPLY", reply), "upstream") as upstream:
        base = f"{upstream.url}/v1"
        with Gateway(FRONT.replace("URL", base), "front") as front:
            targets = {"upstream": upstream.url, "gateway (engine: upstream)": front.url}
            try:
                if args.litellm:
                    litellm = LiteLLM(args.litellm, base)
                    targets["LiteLLM proxy"] = litellm.url
                latency = overhead(targets, args.requests, args.rounds)
                litellm_version = litellm.version() if litellm else None
            finally:
                if litellm:
                    litellm.stop()
            decode, ratio = decode_ratio(upstream.url, front.url, args.tokens, args.runs)
            platform_path = front.platform()
    real = mlx_lm_ratio(max(3, args.runs // 2)) if args.mlx_lm else None
    per_round = max(1, args.requests // args.rounds)
    notes = (
        f"{args.rounds} rounds of {per_round} requests per target and level, interleaved; "
        'non-streamed chat completions, max_tokens 1, scripted reply "ok"; async httpx '
        "clients on the same machine (they share the cores with every server). Added = the "
        "proxy's percentile minus the upstream's own at the same level. "
        + (
            f"{litellm_version}, `litellm --config` (one worker), log level ERROR."
            if args.litellm
            else "LiteLLM not run (no --litellm)."
        )
        + f"\n\nDecode ratio through the gateway / straight to the upstream: **{ratio:.3f}** "
        f"(median of {args.runs} back-to-back pairs; target ≥ 0.98); {args.tokens} words at "
        "5 ms each, one chunk per word: far faster than a model decodes, so any per-chunk "
        "cost of the proxy shows."
        + (
            f"\n\nOn a real model (mlx-lm's server on SmolLM2, float32 copy, 64 tokens at "
            f"temperature 0): decode ratio **{real[1]:.3f}** (median of pairs)."
            if real
            else ""
        )
    )
    report(
        "Upstream overhead: engine upstream vs LiteLLM's proxy",
        latency + "\n\n" + decode + (f"\n\n{real[0]}" if real else ""),
        platform_path=platform_path,
        load_before=load_before,
        notes=notes,
    )


if __name__ == "__main__":
    main()
