"""Beside vllm-mlx: the gateway and vllm-mlx (and, with `--mlx-lm`, mlx-lm's own server) on
the same model directory in one run, the sides alternating, medians and spreads per row.

    .venv/bin/python bench/peers/vllm_mlx.py --vllm /path/to/venv/bin/vllm-mlx \
        [--model DIR] [--rounds 3] [--clients 1 4 8] [--mlx-lm] [--rows decode ttft ...]

vllm-mlx lives in a virtual environment of its own (it pins `mlx-lm<0.32`); docs/peers.md
says how to make it. Without `--model` both serve the float32 copy of the embedded SmolLM2
(what the gateway runs on the CPU; bench/float32_copy.py), so neither converts anything.

Each side runs as a new user would run it, stated in the result:
- the gateway: `engine: mlx`, `source: DIR` and nothing else (so `concurrency: auto`, the
  prefix reuse and the disk tier as shipped), `server.cache.dir` in a temporary directory;
- vllm-mlx: `serve DIR --continuous-batching --enable-prefix-cache --ssd-cache-dir D`, its
  best flags for these rows (`--use-paged-cache` with `--paged` instead of the memory-aware
  prefix cache);
- mlx-lm: `python -m mlx_lm server --model DIR` (no disk tier: no restart row).

Rows, each round running every side in turn (the order flipping every round), after one
warm-up request per side and `--warmup-rounds` (1) rounds that are not counted:
- decode: one stream of `--decode-tokens`, (tokens - 1) / (last token - first token);
- ttft cold / warm: a ~400-token prompt never seen (per round and side), then the same again;
- aggregate at each `--clients` count: concurrent streams of `--max-tokens`, all new tokens /
  (last stream end - first request sent), every client its own prompt;
- agent turn 10: a 10-turn conversation on a ~600-token system prompt, turn 10's TTFT;
- restart: a Claude-Code-shaped ~`--prefix-tokens` system prompt answered cold, the server
  stopped and started again on the same cache directory, the same prompt's TTFT after it
  (and how long the start took);
- memory: peak RSS of the server's processes (VmHWM, children included) at the end;
- dropped: requests that failed or ended without `[DONE]`, over the whole run.
Ratios are ours / peer's, oriented so that above 1.0 means the gateway is ahead (rates ours /
theirs; times and memory theirs / ours).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402
from common import (  # noqa: E402
    LOAD_TIMEOUT_S,
    Gateway,
    astream_chat,
    chat_body,
    fmt,
    free_port,
    median,
    platform_env,
    report,
    stop_process,
    stream_chat,
    table,
)
from concurrency import float32_dir, prompt  # noqa: E402
from conversation import QUESTIONS  # noqa: E402
from conversation import system_prompt as agent_prompt  # noqa: E402
from disk_cache import system_prompt as claude_code_prompt  # noqa: E402

MODEL = "smollm2"
GATEWAY_CONFIG = """
server: {{host: 127.0.0.1, cache: {{dir: {cache}}}}}
models:
  - id: smollm2
    engine: mlx
    source: {source}
"""
# Higher is better for these rows; for the others (times, memory) lower is.
RATES = ("decode", "aggregate")


class Side:
    """One server under test: how to start it (again, on the same cache directory), its
    URL, the pids whose memory counts, and the requests that failed on it."""

    label = ""
    restartable = True

    def __init__(self) -> None:
        self.cache = tempfile.mkdtemp(prefix=f"peer-{self.label}-cache-")
        self.dropped = 0
        self.requests = 0
        self.start_s = 0.0

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    @property
    def pid(self) -> int:
        raise NotImplementedError

    def restart(self) -> None:
        self.stop()
        self.start()

    def pids(self) -> list[int]:
        return [self.pid, *_children(self.pid)]

    def peak_rss(self) -> int:
        """Peak resident bytes of the server's process and its children (Linux's /proc)."""
        return sum(_hwm(pid) for pid in self.pids())


class Ours(Side):
    label = "gateway"

    def __init__(self, model_dir: Path) -> None:
        super().__init__()
        self.config = GATEWAY_CONFIG.format(cache=self.cache, source=model_dir)
        self.gateway: Gateway | None = None

    def start(self) -> None:
        started = time.perf_counter()
        self.gateway = Gateway(self.config, "peer-gateway").__enter__()
        self.start_s = time.perf_counter() - started
        self.url = self.gateway.url
        self.platform = self.gateway.platform()
        self.decoding = self.gateway.decoding()

    def stop(self) -> None:
        if self.gateway:
            self.gateway.__exit__(None, None, None)
            self.gateway = None

    @property
    def pid(self) -> int:
        return self.gateway.process.pid

    def settings(self) -> str:
        return (
            "`engine: mlx`, `source: DIR`, nothing else (so `concurrency: auto`, prefix "
            f"reuse and the disk tier as shipped); it said: {self.decoding}"
        )


class Process(Side):
    """A peer server started from a command line; ready once /v1/models answers and one
    request came back (both peers load or compile lazily)."""

    def __init__(self, command: list[str], env: dict | None = None) -> None:
        super().__init__()
        self.command, self.env = command, env
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        started = time.perf_counter()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = tempfile.NamedTemporaryFile(prefix=f"peer-{self.label}-", suffix=".log")  # noqa: SIM115
        self.process = subprocess.Popen(
            [*self.command, "--host", "127.0.0.1", "--port", str(self.port)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self.env or platform_env(),
        )
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.label} exited: {Path(self._log.name).read_text()}")
            try:
                if httpx.get(f"{self.url}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        else:
            raise TimeoutError(f"{self.label} did not start")
        self.start_s = time.perf_counter() - started

    def stop(self) -> None:
        if self.process:
            stop_process(self.process)
            self.process = None
            self._log.close()

    @property
    def pid(self) -> int:
        return self.process.pid


class VllmMlx(Process):
    label = "vllm-mlx"

    def __init__(self, binary: str, model_dir: Path, paged: bool) -> None:
        self.flags = ["--continuous-batching", "--enable-prefix-cache"]
        if paged:
            self.flags.append("--use-paged-cache")
        super().__init__([])
        self.flags += ["--ssd-cache-dir", self.cache]
        self.command = [binary, "serve", str(model_dir), "--served-model-name", MODEL, *self.flags]

    def settings(self) -> str:
        return "`serve DIR " + " ".join(self.flags[:-1]) + " D`"


class MlxLm(Process):
    label = "mlx-lm"
    restartable = False

    def __init__(self, model_dir: Path) -> None:
        super().__init__([sys.executable, "-m", "mlx_lm", "server", "--model", str(model_dir)])

    def settings(self) -> str:
        return "`python -m mlx_lm server --model DIR` (no disk tier)"


def _children(pid: int) -> list[int]:
    try:
        found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    kids = [int(p) for p in found]
    return kids + [g for k in kids for g in _children(k)]


def _hwm(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def gpu_bytes(pids: list[int]) -> int | None:
    """GPU memory the processes hold now, as nvidia-smi reports it; None without a GPU."""
    try:
        listed = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    used = {
        int(pid): int(mib)
        for pid, mib in (line.split(",") for line in listed.splitlines() if "," in line)
    }
    return sum(used.get(pid, 0) for pid in pids) * 2**20


def model_name(side: Side) -> str:
    # mlx-lm's server names a model by its path; the others by the name given.
    return "default_model" if isinstance(side, MlxLm) else MODEL


def ask(side: Side, messages: list[dict], max_tokens: int):
    """One streamed request; None (counted as dropped) when it failed or never finished."""
    side.requests += 1
    try:
        with httpx.Client(timeout=900) as client:
            timing = stream_chat(
                client, side.url, chat_body(model_name(side), messages, max_tokens)
            )
    except (httpx.HTTPError, ValueError):
        side.dropped += 1
        return None
    if timing.new_tokens is None:
        side.dropped += 1
        return None
    return timing


def burst(side: Side, clients: int, round_: int, max_tokens: int) -> float | None:
    """`clients` concurrent streams: the aggregate tokens/s."""

    async def run():
        limits = httpx.Limits(max_connections=clients + 2, max_keepalive_connections=clients + 2)
        async with httpx.AsyncClient(timeout=900, limits=limits) as client:
            bodies = [
                chat_body(model_name(side), prompt(round_, i), max_tokens) for i in range(clients)
            ]
            return await asyncio.gather(
                *(astream_chat(client, side.url, body) for body in bodies), return_exceptions=True
            )

    side.requests += clients
    timings = asyncio.run(run())
    good = [t for t in timings if not isinstance(t, BaseException) and t.new_tokens is not None]
    side.dropped += clients - len(good)
    if not good:
        return None
    wall = max(t.ended for t in good) - min(t.started for t in good)
    return sum(t.new_tokens for t in good) / wall


def fresh_prompt(round_: int, side: Side) -> list[dict]:
    """~400 tokens no side has seen: the round and the side in its first words."""
    text = agent_prompt(1000 * round_ + hash(side.label) % 997)[:1600]
    return [{"role": "system", "content": text}, {"role": "user", "content": QUESTIONS[0]}]


def agent_turn10(side: Side, round_: int, max_tokens: int) -> float | None:
    system = {"role": "system", "content": agent_prompt(5000 + 100 * round_ + len(side.label))}
    history = [system]
    for turn in range(10):
        messages = [*history, {"role": "user", "content": QUESTIONS[turn % len(QUESTIONS)]}]
        timing = ask(side, messages, max_tokens)
        if timing is None:
            return None
        history = [*messages, {"role": "assistant", "content": timing.text}]
    return timing.ttft


def restart_row(side: Side, round_: int, tokens: int) -> dict:
    """Cold TTFT of a long agent prefix, then the same after a restart on the same cache."""
    messages = [
        {
            "role": "system",
            "content": claude_code_prompt(9000 + 10 * round_ + len(side.label), tokens),
        },
        {"role": "user", "content": "List the files in the current directory."},
    ]
    cold = ask(side, messages, 16)
    side.restart()
    ask(side, [{"role": "user", "content": "Hi"}], 2)  # the peers load lazily
    after = ask(side, messages, 16)
    return {
        "cold": cold.ttft if cold else None,
        "after": after.ttft if after else None,
        "start": side.start_s,
        "prompt": cold.prompt_tokens if cold else None,
    }


def spread(values: list[float | None]) -> str:
    good = [v for v in values if v is not None]
    if not good:
        return "—"
    return f"{fmt(median(good))} ({fmt(min(good))}–{fmt(max(good))})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm", required=True, help="the vllm-mlx executable of its own venv")
    parser.add_argument(
        "--model", type=Path, help="an MLX model directory (default: SmolLM2 float32)"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--warmup-rounds", type=int, default=1, help="rounds run first and not counted"
    )
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--decode-tokens", type=int, default=96)
    parser.add_argument("--prefix-tokens", type=int, default=5000)
    parser.add_argument(
        "--restart-rounds", type=int, help="rounds of the restart row (default: --rounds)"
    )
    parser.add_argument("--paged", action="store_true", help="vllm-mlx with --use-paged-cache")
    parser.add_argument("--mlx-lm", action="store_true", help="mlx-lm's server as a third column")
    parser.add_argument(
        "--rows",
        nargs="+",
        default=["decode", "ttft", "aggregate", "agent", "restart"],
        choices=["decode", "ttft", "aggregate", "agent", "restart"],
    )
    args = parser.parse_args()
    load_before = os.getloadavg()
    model_dir = args.model or float32_dir()

    sides: list[Side] = [Ours(model_dir), VllmMlx(args.vllm, model_dir, args.paged)]
    if args.mlx_lm:
        sides.append(MlxLm(model_dir))
    rows: dict[tuple[str, str], list] = {}

    measuring = False

    def record(row: str, side: Side, value) -> None:
        if measuring:
            rows.setdefault((row, side.label), []).append(value)
        print(f"  {row:22s} {side.label:9s} {fmt(value, 3)}", flush=True)

    try:
        for side in sides:
            side.start()
            ask(side, [{"role": "user", "content": "Hi"}], 4)  # warm-up
        restarts = args.restart_rounds if args.restart_rounds is not None else args.rounds
        for round_ in range(args.warmup_rounds + args.rounds):
            # Warm-up rounds meet every shape first (MLX compiles kernels per shape on a GPU).
            measuring = round_ >= args.warmup_rounds
            order = sides if round_ % 2 == 0 else sides[::-1]
            print(f"round {round_}{'' if measuring else ' (warm-up, not counted)'}", flush=True)
            for side in order:
                if "decode" in args.rows:
                    timing = ask(side, prompt(round_, 100), args.decode_tokens)
                    record("decode tok/s", side, timing and timing.decode_tps)
                if "ttft" in args.rows:
                    messages = fresh_prompt(round_, side)
                    cold, warm = ask(side, messages, 8), ask(side, messages, 8)
                    record("TTFT cold s", side, cold and cold.ttft)
                    record("TTFT warm s", side, warm and warm.ttft)
                if "aggregate" in args.rows:
                    for n in args.clients:
                        record(
                            f"aggregate x{n} tok/s", side, burst(side, n, round_, args.max_tokens)
                        )
                if "agent" in args.rows:
                    record("agent turn 10 TTFT s", side, agent_turn10(side, round_, 24))
            for side in order:
                measured = round_ - args.warmup_rounds
                if "restart" in args.rows and side.restartable and 0 <= measured < restarts:
                    result = restart_row(side, round_, args.prefix_tokens)
                    record("long prefix cold TTFT s", side, result["cold"])
                    record("same after restart s", side, result["after"])
                    record("start to ready s", side, result["start"])
        memory = {side.label: side.peak_rss() for side in sides}
        gpu = {side.label: gpu_bytes(side.pids()) for side in sides}
    finally:
        for side in sides:
            side.stop()

    labels = [side.label for side in sides]
    names = list(dict.fromkeys(row for row, _ in rows))
    body_rows = []
    for name in names:
        cells = [spread(rows.get((name, label), [])) for label in labels]
        ours = median([v for v in rows.get((name, labels[0]), []) if v is not None])
        ratios = []
        for label in labels[1:]:
            theirs = median([v for v in rows.get((name, label), []) if v is not None])
            if ours and theirs:
                ratio = ours / theirs if name.split()[0] in RATES else theirs / ours
                ratios.append(fmt(ratio))
            else:
                ratios.append("—")
        body_rows.append([name, *cells, *ratios])
    gib = 1024**3
    body_rows.append(
        ["peak RSS GiB", *(fmt(memory[label] / gib) for label in labels)]
        + [fmt(memory[label] / memory[labels[0]]) for label in labels[1:]]
    )
    if all(gpu.values()):
        body_rows.append(
            ["GPU memory GiB", *(fmt(gpu[label] / gib) for label in labels)]
            + [fmt(gpu[label] / gpu[labels[0]]) for label in labels[1:]]
        )
    body_rows.append(
        ["dropped / requests", *(f"{s.dropped} / {s.requests}" for s in sides)]
        + ["—"] * (len(sides) - 1)
    )
    header = ["row", *labels, *(f"ours vs {label}" for label in labels[1:])]
    aggregate = {
        n: median(rows.get((f"aggregate x{n} tok/s", "gateway"), [None])) for n in args.clients
    }
    one = aggregate.get(1)
    scaling = (
        ", ".join(f"x{n}: {fmt(aggregate[n] / one)} x one client" for n in args.clients if n != 1)
        if one and all(aggregate.values())
        else "—"
    )
    notes = "\n".join(
        [
            f"- model: `{model_dir.name}`; {args.rounds} rounds after {args.warmup_rounds} "
            "warm-up round(s), median (min–max); the ratio "
            "columns read > 1.0 where the gateway is ahead (rates ours / theirs, times and "
            "memory theirs / ours).",
            *(f"- {side.label}: {side.settings()}" for side in sides),
            f"- the gateway's own scaling (a config without `concurrency`): {scaling}.",
        ]
    )
    report(
        "Beside vllm-mlx",
        table(header, body_rows),
        platform_path=sides[0].platform,
        load_before=load_before,
        notes=notes,
    )


if __name__ == "__main__":
    main()
