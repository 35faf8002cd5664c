"""The gateway on MLX (any backend; made for CUDA) against raw mlx-lm, per model shape, in one run:

1. single stream: decode tokens/s and time to first token through the gateway's SSE against
   in-process `mlx_lm.stream_generate` (the product's bench/inprocess.py) on the same model,
   interleaved round by round as the product's bench/single_stream.py does (its prompts, its
   timing client, its warm-up round);
2. concurrency: aggregate tokens/s of N concurrent streaming clients through the gateway (model
   `concurrency: 64`) against mlx-lm's BatchGenerator in a process of its own (raw_batch.py) on the
   same prompts (the product's bench/concurrency.py prompts), interleaved per client count.

    python3 bench/gpu/bench_gateway.py --product DIR --models DIR --out DIR [--shapes smollm2,1b]

The product's bench/ harness is reused as it is (Gateway, stream_chat, astream_chat, chat_body,
Reference's protocol): its single_stream.py and concurrency.py hardcode the SmolLM2 GGUF as
source, so this script drives the same pieces on the models make_models.py writes.
Writes results.json (every timing), events.log (every gateway's own log) and summary.md to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent


def log(*parts) -> None:
    print(time.strftime("%H:%M:%S"), *parts, flush=True)


class Worker:
    """A subprocess answering one JSON line per JSON line (bench/inprocess.py, raw_batch.py)."""

    def __init__(self, argv: list[str], env: dict, cwd: Path) -> None:
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=cwd
        )

    def ready(self) -> dict:
        line = self.process.stdout.readline()
        ready = json.loads(line or "{}")
        if not ready.get("ready"):
            raise RuntimeError(f"{self.process.args[1]} failed to start")
        return ready

    def ask(self, job: dict) -> dict:
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.process.args[1]} exited (rc {self.process.poll()})")
        return json.loads(line)

    def stop(self) -> None:
        try:
            self.process.stdin.close()
            self.process.wait(timeout=30)
        except Exception:
            self.process.kill()


def gateway_config(
    model_dir: Path,
    concurrency: int,
    budget: str,
    isolated: bool,
    serial_isolated: bool,
    held: bool = False,
) -> str:
    # `serial` is the single-stream model (as the product's single_stream.py: prefix reuse off,
    # so both sides prefill the whole prompt); `batched` the concurrency model at its defaults
    # (prefix reuse on), `batched-noreuse` the same with reuse off (what a reuse miss costs),
    # `batched-isolated` (when asked for) the same as `batched` with `isolation: process`,
    # `batched-held` (when asked for) the same with `stream_interval: 20ms` (tokens held).
    budget_line = f", memory_budget: {budget}" if budget else ""
    models = f"""
server: {{host: 127.0.0.1{budget_line}}}
models:
  - id: serial
    engine: mlx
    source: {model_dir}
    context: {{max: 4096}}
    concurrency: 1
    prefix_reuse: false
"""
    if serial_isolated:  # the single-stream model in a process of its own
        models += f"""  - id: serial-isolated
    engine: mlx
    source: {model_dir}
    context: {{max: 4096}}
    concurrency: 1
    prefix_reuse: false
    isolation: process
"""
    # 1024 tokens of context (prompts of ~60 tokens, 128 new) keep 128 sequences' KV caches of
    # two 8B models inside the memory budget.
    batched = [("batched", "true", "none", ""), ("batched-noreuse", "false", "none", "")]
    batched += [("batched-isolated", "true", "process", "")] * isolated
    batched += [("batched-held", "true", "none", "\n    stream_interval: 20ms")] * held
    for name, reuse, isolation, extra in batched:
        models += f"""  - id: {name}
    engine: mlx
    source: {model_dir}
    context: {{max: 1024}}
    concurrency: {concurrency}
    prefix_reuse: {reuse}
    isolation: {isolation}{extra}
"""
    return models


# Single-stream sides that are processes of their own, not gateway models. The reference of a
# round is the faster of the two in-process loops (issue 32): `stream_generate` and mlx-lm's bare
# `generate_step`, both in the reference's own process.
WORKER_SIDES = ("in-process", "in-process-step", "engine")
REFERENCES = ("in-process", "in-process-step")
# A TTFT-only side: the same client against a server that does nothing (bench/http_floor.py),
# the part of every HTTP side's TTFT overhead that is the client's, the loopback's and the
# kernel's rather than the gateway's.
FLOOR = "http-floor"


def reference_runs(single: dict, phase: str) -> list[dict]:
    """Per round, the faster in-process loop's run (decode: higher tok/s; ttft: lower)."""
    runs = [single[phase][side] for side in REFERENCES if side in single[phase]]
    pairs = zip(*runs, strict=False)
    if phase == "decode":
        return [max(pair, key=lambda r: r["decode_tps"] or 0) for pair in pairs]
    return [min(pair, key=lambda r: r["ttft_ms"]) for pair in pairs]


def single_stream(bench, gateway, workers: dict, args) -> dict:
    import httpx

    common, ss = bench["common"], bench["single_stream"]
    sides = ["in-process", "in-process-step", "engine", "serial", "batched"]
    if args.isolated_single:
        sides += ["serial-isolated", "batched-isolated"]
    with httpx.Client(timeout=600) as client:

        def run(side: str, max_tokens: int, messages) -> dict:
            if side == FLOOR:
                t = common.stream_chat(
                    client, workers[FLOOR], common.chat_body("serial", messages, max_tokens)
                )
            elif side in WORKER_SIDES:
                job = {"messages": messages, "max_tokens": max_tokens}
                if side == "in-process-step":
                    job["loop"] = "generate_step"
                out = workers["in-process" if side in REFERENCES else side].ask(job)
                t = ss.worker_timing(out)
            else:
                t = common.stream_chat(
                    client, gateway.url, common.chat_body(side, messages, max_tokens)
                )
                event = gateway.generated(t.request_id)
                t.extra = {
                    k: event.get(k)
                    for k in ("ttft_s", "prefill_s", "decode_s", "new_tokens", "queue_wait_s")
                }
            return {
                "ttft_ms": t.ttft * 1000,
                "decode_tps": t.decode_tps,
                "prompt_tokens": t.prompt_tokens,
                "new_tokens": t.new_tokens,
                "text": t.text,
                "engine": t.extra or None,
            }

        decode = {s: [] for s in sides}
        ttft_sides = sides + ([FLOOR] if FLOOR in workers else [])
        first = {s: [] for s in ttft_sides}
        long_first = {s: [] for s in sides}
        for round_ in range(args.repeats + 1):  # round 0 warms every side up
            for side in ss.rotated(sides, round_):
                r = run(side, args.max_tokens, ss.PROMPT)
                if round_:
                    decode[side].append(r)
                log(
                    f"  decode round {round_} {side:10s} ttft {r['ttft_ms']:7.1f} ms decode "
                    f"{common.fmt(r['decode_tps'])} tok/s ({r['prompt_tokens']}+{r['new_tokens']})"
                )
        for round_ in range(args.ttft_rounds + bool(args.ttft_rounds)):  # round 0: warm-up
            for side in ss.rotated(ttft_sides, round_):
                r = run(side, 1, ss.PROMPT)
                if round_:
                    first[side].append(r)
        log("  ttft  " + medians_ms(first, ttft_sides, common))
        for round_ in range(args.long_rounds):
            for side in ss.rotated(sides, round_):
                long_first[side].append(run(side, 1, ss.LONG_PROMPT))
        log("  long ttft  " + medians_ms(long_first, sides, common))
    return {"decode": decode, "first": first, "long_first": long_first}


def medians_ms(timings: dict, sides: list[str], common) -> str:
    """Each side's median TTFT, for the log line (`n/a` where no round ran: rounds 0)."""
    medians = {s: common.median([r["ttft_ms"] for r in timings[s]]) for s in sides}
    return "  ".join(f"{s} {common.fmt(m)} ms" for s, m in medians.items())


def server_side(log: Path, since: int, model: str) -> tuple[dict, int]:
    """What the gateway's own events say of the burst logged after byte `since`: how spread
    its arrivals were, and per request the queue wait, TTFT, prefill and reused tokens."""
    time.sleep(0.3)  # the event log is written by its own thread
    with log.open("rb") as f:
        f.seek(since)
        text = f.read()
    text = text[: text.rfind(b"\n") + 1]  # whole lines only: the last may be half-written
    events = [json.loads(x) for x in text.decode().splitlines() if x.startswith("{")]

    def at(e) -> float:
        from datetime import datetime

        return datetime.fromisoformat(e["ts"].replace("Z", "+00:00")).timestamp()

    arrivals = [
        at(e)
        for e in events
        if e.get("event") == "request_started" and e.get("path") == "/v1/chat/completions"
    ]
    done = [e for e in events if e.get("event") == "generated" and e.get("model") == model]

    def med_ms(key: str):
        values = [e[key] for e in done if e.get(key) is not None]
        return round(sorted(values)[len(values) // 2] * 1000, 1) if values else None

    return {
        "requests": len(done),
        "arrival_spread_ms": round((max(arrivals) - min(arrivals)) * 1000, 1) if arrivals else None,
        "queue_wait_ms": med_ms("queue_wait_s"),
        "ttft_ms": med_ms("ttft_s"),
        "ttft_max_ms": round(max(e["ttft_s"] for e in done if e.get("ttft_s")) * 1000, 1)
        if done
        else None,
        "prefill_ms": med_ms("prefill_s"),
        "reused_tokens": sorted(e.get("reused_prefix_tokens", 0) for e in done)[len(done) // 2]
        if done
        else None,
    }, since + len(text)


def concurrency(bench, gateway, raw, args, save, results: dict, client_processes=None) -> dict:
    """Fills `results` as it measures (label -> clients -> runs), so a run cut off by its
    time limit still saves what it measured; returns it. `client_processes`: a
    `common.ClientProcesses` the bursts' clients are spread over (else one process)."""
    common, conc = bench["common"], bench["concurrency"]
    import httpx

    async def burst(model: str, clients: int, round_: int, max_tokens: int) -> dict:
        # A fresh client (and connections) per burst. Connecting first through /health was
        # tried: handing 128 idle pooled connections to 128 requests took httpx's pool seconds
        # (server-side arrivals spread over 2-3 s instead of 50 ms, 2026-11-30 run a).
        bodies = [
            common.chat_body(model, conc.prompt(round_, i), max_tokens) for i in range(clients)
        ]
        if client_processes is not None and clients > 1:
            timings = await client_processes.burst(gateway.url, bodies)
        else:
            pooled = clients + 2
            limits = httpx.Limits(max_connections=pooled, max_keepalive_connections=pooled)
            async with httpx.AsyncClient(timeout=900, limits=limits) as client:
                timings = await asyncio.gather(
                    *(common.astream_chat(client, gateway.url, body) for body in bodies)
                )
        tokens = sum(t.new_tokens or 0 for t in timings)
        wall = max(t.ended for t in timings) - min(t.started for t in timings)
        return {
            "tokens": tokens,
            "wall": wall,
            "aggregate": tokens / wall,
            "ttft_ms_median": common.median([t.ttft * 1000 for t in timings]),
            "ttft_ms_max": max(t.ttft * 1000 for t in timings),
            "stream_tps_median": common.median([t.decode_tps for t in timings]),
            "short_streams": sum(1 for t in timings if (t.new_tokens or 0) != max_tokens),
        }

    prefills = sorted({min(p, c) if p else c for p in args.raw_prefill for c in args.clients})

    def raw_variants(clients: int) -> list[int]:
        return sorted({min(p, clients) if p else clients for p in args.raw_prefill})

    def gateways(clients: int, round_: int = 0) -> list[str]:
        models = ["batched"] + (["batched-noreuse"] if clients in args.noreuse_clients else [])
        models += ["batched-isolated"] if clients in args.isolated_clients else []
        models += ["batched-held"] if clients in args.held_clients else []
        return models[round_ % len(models) :] + models[: round_ % len(models)]

    # Warm-up: every batch size twice, short. MLX's CUDA backend compiles kernels for each new
    # shape on first use; arrivals over HTTP make more batch shapes than one insert does.
    for warm in (-2, -1):
        for clients in args.clients:
            for model in gateways(clients):
                asyncio.run(burst(model, clients, warm, 16))
            for p in raw_variants(clients):
                raw.ask({"clients": clients, "max_tokens": 16, "round": warm, "prefill": p})
    log(f"  warm-up done (raw prefill sizes {prefills})")
    logged = gateway.log.stat().st_size
    for round_ in range(args.rounds):
        for clients in args.clients:
            # One client is over in a second and noisy: measured `--one-client-repeats` times
            # a round, alternating the sides, distinct prompts each time.
            repeats = args.one_client_repeats if clients == 1 else 1
            for repeat in range(repeats):
                prompt_round = round_ * repeats + repeat
                for model in gateways(clients, round_ + repeat):
                    r = asyncio.run(burst(model, clients, prompt_round, args.max_tokens))
                    r["server"], logged = server_side(gateway.log, logged, model)
                    results.setdefault(f"gateway {model}", {}).setdefault(clients, []).append(r)
                    log(
                        f"  round {round_}.{repeat} gateway {model:15s} {clients:3d} clients: "
                        f"{r['aggregate']:8.1f} tok/s ({r['tokens']} tokens in {r['wall']:.2f} s, "
                        f"ttft median {r['ttft_ms_median']:.0f} ms, "
                        f"stream {common.fmt(r['stream_tps_median'])} tok/s) server {r['server']}"
                    )
                    save()
                for p in raw_variants(clients):
                    job = {"clients": clients, "max_tokens": args.max_tokens}
                    r = raw.ask(job | {"round": prompt_round, "prefill": p})
                    results.setdefault(f"raw prefill {p}", {}).setdefault(clients, []).append(r)
                    log(
                        f"  round {round_}.{repeat} raw prefill {p:<5d}         {clients:3d} "
                        f"clients: {r['aggregate']:8.1f} tok/s ({r['tokens']} tokens in "
                        f"{r['wall']:.2f} s, ttft {r.get('ttft', 0) * 1000:.0f} ms)"
                    )
                    save()
    return results


class Profile:
    """py-spy sampling the gateway process (every thread) while a phase runs, when installed."""

    def __init__(self, pid: int, label: str, args) -> None:
        self.label, self.path, self.process = label, args.out / f"{label}.pyspy", None
        spy = shutil.which("py-spy")
        if args.profile and spy:
            self.process = subprocess.Popen(
                [
                    spy,
                    "record",
                    "-p",
                    str(pid),
                    "-r",
                    "100",
                    "-f",
                    "raw",
                    "--threads",
                    *(["--gil"] if args.profile_gil else []),
                    "-o",
                    str(self.path),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )

    def stop(self, into) -> None:
        """Stop sampling (py-spy writes on SIGINT) and append its stacks to `into`."""
        if self.process is None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
        if self.path.exists():
            into.write(f"===== {self.label}\n{self.path.read_text()}")
            into.flush()
            self.path.unlink()


def run_shape(shape: str, bench, args, events_out, save) -> dict:
    import httpx

    common = bench["common"]
    model_dir = args.models / shape
    out: dict = {"shape": shape, "model_dir": str(model_dir)}
    env = common.platform_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(args.product), env.get("PYTHONPATH")]))
    config = gateway_config(
        model_dir,
        args.concurrency,
        args.memory_budget,
        bool(args.isolated_clients) or args.isolated_single,
        args.isolated_single,
        bool(args.held_clients),
    )
    gateway = common.Gateway(config, f"gpu-{shape}")
    reference = raw = engine = floor = None
    t0 = time.perf_counter()
    try:
        # The reference processes load while the gateway loads.
        reference = Worker(
            [sys.executable, str(args.product / "bench" / "inprocess.py"), str(model_dir)],
            env,
            args.product,
        )
        raw = Worker(
            [sys.executable, str(HERE / "raw_batch.py"), str(model_dir), str(args.product)],
            env,
            args.product,
        )
        engine = Worker(
            [sys.executable, str(HERE / "engine_worker.py"), str(model_dir), str(args.product)],
            env,
            args.product,
        )
        if args.ttft_rounds:
            floor = Worker([sys.executable, str(HERE.parent / "http_floor.py")], env, HERE)
        gateway.wait_ready()
        out["reference_ready"] = reference.ready()
        out["raw_ready"] = raw.ready()
        out["engine_ready"] = engine.ready()
        out["load_s"] = time.perf_counter() - t0
        out["server_started"] = gateway.events("server_started")
        out["model_attached"] = gateway.events("model_attached")
        for e in out["server_started"] + out["model_attached"]:
            log("  event", json.dumps(e))
        log(f"  loaded in {out['load_s']:.1f} s; reference platform {out['reference_ready']}")
        # The gateway's first request, before any phase: on CUDA the model thread that decodes
        # first in the process keeps a lead over every other model's (runs 38-41).
        with httpx.Client(timeout=600) as client:
            first = common.chat_body(args.first_served, bench["single_stream"].PROMPT, 8)
            common.stream_chat(client, gateway.url, first)
        out["first_served"] = args.first_served
        profile = Profile(gateway.process.pid, f"{shape}-single", args)
        try:
            workers = {"in-process": reference, "engine": engine}
            if floor is not None:
                workers[FLOOR] = f"http://127.0.0.1:{floor.ready()['port']}"
            if args.repeats:  # --repeats 0: concurrency only
                out["single"] = single_stream(bench, gateway, workers, args)
                save(out)
        except Exception:
            out["single_error"] = traceback.format_exc()
            log(out["single_error"])
        profile.stop(args.profiles)
        for w in (reference, engine, floor):
            if w:
                w.stop()
        reference = engine = floor = None
        args.clients = [c for c in args.clients if c <= args.concurrency] or args.clients
        profile = Profile(gateway.process.pid, f"{shape}-concurrency", args)
        procs = None
        try:
            out["concurrency"] = {}
            if args.client_procs > 1:
                procs = bench["common"].ClientProcesses(args.client_procs)
            out["client_processes"] = args.client_procs
            concurrency(bench, gateway, raw, args, lambda: save(out), out["concurrency"], procs)
        except Exception:
            out["concurrency_error"] = traceback.format_exc()
            log(out["concurrency_error"])
        finally:
            if procs is not None:
                procs.close()
        profile.stop(args.profiles)
    except Exception:
        out["error"] = traceback.format_exc()
        log(out["error"])
    finally:
        for w in (reference, raw, engine, floor):
            if w:
                w.stop()
        try:
            text = gateway.log.read_text()
            events_out.write(f"===== {shape}: gateway log ({gateway.config})\n{text}\n")
            events_out.flush()
            lines = text.splitlines()
            out["errors_logged"] = [
                json.loads(line)
                for line in lines
                if line.startswith("{") and json.loads(line).get("level") in ("error", "warning")
            ][:50]
            out["non_json_lines"] = [x for x in lines if x and not x.startswith("{")][:80]
        except Exception:
            pass
        gateway.stop()
    out["wall_s"] = time.perf_counter() - t0
    return out


def summarize(shape_results: list[dict], bench, args) -> str:
    common = bench["common"]
    med, fmt = common.median, common.fmt
    lines = [f"# Gateway on MLX vs raw mlx-lm — {time.strftime('%Y-%m-%d %H:%M %Z')}", ""]
    for res in shape_results:
        shape = res["shape"]
        lines += [f"## {shape}", ""]
        if res.get("first_served"):
            lines.append(f"- the gateway's first request served by: `{res['first_served']}`")
        for e in res.get("server_started", [])[:1]:
            lines.append(f"- server_started platform: `{json.dumps(e.get('platform'))}`")
        for e in res.get("model_attached", []):
            d = e.get("detail") or {}
            lines.append(
                f"- model_attached {e.get('model')}: weights {d.get('weights')}, "
                f"{d.get('decoding')}, prefix_reuse {d.get('prefix_reuse')}, "
                f"memory {e.get('memory_bytes')}, context {e.get('context')}, "
                f"load_s {e.get('load_s')}"
            )
        for key in ("error", "single_error", "concurrency_error"):
            if res.get(key):
                lines += ["", f"**{key}**:", "```", res[key].strip()[-3000:], "```"]
        if res.get("non_json_lines"):
            lines += ["", "gateway non-JSON output:", "```", *res["non_json_lines"][:40], "```"]
        single = res.get("single")
        if single:
            ref = reference_runs(single, "decode")
            text = single["decode"]["in-process"][0]["text"]
            ref_first = reference_runs(single, "first")
            lines += [
                "",
                "Reference per round: the faster of `stream_generate` and `generate_step` in "
                "the reference's own process. Spread = lowest-highest per-round ratio.",
                "",
                "| side | prompt+new | decode tok/s (median) | ratio vs reference (median of "
                "per-round) | spread | TTFT ms (median) | TTFT overhead ms (median of per-round)"
                " | engine ttft_s ms | engine decode tok/s | same text |",
                "|---" * 10 + "|",
            ]
            names = {
                "in-process": "in-process mlx_lm.stream_generate",
                "in-process-step": "in-process mlx_lm generate_step",
                "engine": "the gateway's engine, no HTTP",
            }
            for side, runs in single["decode"].items():
                ratios = [
                    g["decode_tps"] / r["decode_tps"]
                    for g, r in zip(runs, ref, strict=False)
                    if g["decode_tps"] and r["decode_tps"]
                ]
                over = [
                    g["ttft_ms"] - r["ttft_ms"]
                    for g, r in zip(single["first"][side], ref_first, strict=False)
                ]
                eng = [r["engine"] for r in runs if r.get("engine")]
                eng_first = [r["engine"] for r in single["first"][side] if r.get("engine")]
                eng_tps = med(
                    [
                        (e["new_tokens"] - 1) / e["decode_s"]
                        for e in eng
                        if e.get("decode_s") and (e.get("new_tokens") or 0) > 1
                    ]
                )
                eng_ttft = med(
                    [e["ttft_s"] * 1000 for e in eng_first if e.get("ttft_s") is not None]
                )
                lines.append(
                    "| "
                    + " | ".join(
                        str(x)
                        for x in [
                            names.get(side, f"gateway SSE, model {side}"),
                            f"{runs[0]['prompt_tokens']}+{runs[0]['new_tokens']}"
                            if runs
                            else "n/a",
                            fmt(med([r["decode_tps"] for r in runs]), 1),
                            fmt(med(ratios), 3),
                            f"{fmt(min(ratios), 3)}-{fmt(max(ratios), 3)}" if ratios else "n/a",
                            fmt(med([r["ttft_ms"] for r in single["first"][side]]), 1),
                            fmt(med(over), 1),
                            fmt(eng_ttft, 1) if eng_first else "n/a",
                            fmt(eng_tps, 1) if eng else "n/a",
                            # Against stream_generate's text: its streaming detokenizer is
                            # the gateway's; generate_step's decode-at-once may space a
                            # random model's odd tokens otherwise.
                            "yes" if all(r["text"] == text for r in runs) else "NO",
                        ]
                    )
                    + " |"
                )
            floor = [r["ttft_ms"] for r in single["first"].get(FLOOR, [])]
            if floor:
                lines += [
                    "",
                    f"HTTP floor (`{FLOOR}`: the same client against bench/http_floor.py, a "
                    f"server that answers at once): TTFT {fmt(med(floor), 2)} ms median "
                    f"({fmt(min(floor), 2)}-{fmt(max(floor), 2)}, {len(floor)} rounds); of "
                    "each gateway side's TTFT overhead this much is the client's and the "
                    "loopback's.",
                ]
            lines += [
                "",
                "Long prompt, max_tokens 1:",
                "",
                "| side | prompt tokens | TTFT ms (median) | overhead ms (median of per-round) |",
                "|---|---|---|---|",
            ]
            lf = single["long_first"]
            lf_ref = reference_runs(single, "long_first")
            for side, runs in lf.items():
                over = [g["ttft_ms"] - r["ttft_ms"] for g, r in zip(runs, lf_ref, strict=False)]
                lines.append(
                    f"| {side} | {runs[0]['prompt_tokens'] if runs else 'n/a'} | "
                    f"{fmt(med([r['ttft_ms'] for r in runs]), 1)} | {fmt(med(over), 1)} |"
                )
        conc = res.get("concurrency")
        if conc:
            labels = list(conc)
            raws = [k for k in labels if k.startswith("raw ")]
            lines += [
                "",
                "Aggregate tok/s (median over rounds), max_tokens "
                f"{args.max_tokens}, distinct prompts, the clients in "
                f"{res.get('client_processes', 1)} process(es); best raw = the raw prefill "
                "size with the highest median:",
                "",
                "| clients | " + " | ".join(labels) + " | best raw | gateway / best raw | "
                "per round: batched / best raw (spread) | isolated / best raw (spread) | "
                "held 20ms / best raw (spread) | "
                "reuse on / off | gateway TTFT ms median / max | gateway per-stream tok/s |",
                "|---" * (len(labels) + 9) + "|",
            ]
            for clients in sorted({c for v in conc.values() for c in v}, key=int):
                row = [str(clients)]
                agg = {}
                for label in labels:
                    runs = conc[label].get(clients) or conc[label].get(str(clients)) or []
                    agg[label] = med([r["aggregate"] for r in runs])
                    row.append(fmt(agg[label], 1))
                best = max((k for k in raws if agg.get(k)), key=lambda k: agg[k], default=None)
                g = conc.get("gateway batched", {}).get(clients, [])
                off = agg.get("gateway batched-noreuse")
                row.append(best.removeprefix("raw ") if best else "n/a")
                row.append(fmt(agg["gateway batched"] / agg[best], 3) if best and g else "n/a")
                for label in (
                    "gateway batched",
                    "gateway batched-isolated",
                    "gateway batched-held",
                ):
                    side = conc.get(label, {}).get(clients, [])
                    raw = conc.get(best, {}).get(clients, []) if best else []
                    pairs = zip(side, raw, strict=False)
                    ratios = [a["aggregate"] / b["aggregate"] for a, b in pairs]
                    row.append(
                        f"{fmt(med(ratios), 3)} ({fmt(min(ratios), 3)}-{fmt(max(ratios), 3)})"
                        if ratios
                        else "n/a"
                    )
                row.append(fmt(agg["gateway batched"] / off, 3) if off and g else "n/a")
                row.append(
                    f"{fmt(med([a['ttft_ms_median'] for a in g]), 0)} / "
                    f"{fmt(med([a['ttft_ms_max'] for a in g]), 0)}"
                )
                row.append(fmt(med([a["stream_tps_median"] for a in g]), 1))
                lines.append("| " + " | ".join(row) + " |")
            lines += [
                "",
                "The gateway's own events per burst (medians over rounds of each burst's "
                "median): arrival spread = first to last `request_started`; TTFT from admission "
                "to the first token on the model thread:",
                "",
                "| model | clients | arrival spread ms | queue wait ms | server TTFT ms "
                "(max) | prefill ms | reused tokens |",
                "|---|---|---|---|---|---|---|",
            ]
            for label in [k for k in labels if k.startswith("gateway ")]:
                for clients, runs in sorted(conc[label].items(), key=lambda kv: int(kv[0])):
                    ss = [r["server"] for r in runs if r.get("server")]
                    if not ss:
                        continue

                    def m(key, ss=ss):
                        return fmt(med([x[key] for x in ss if x.get(key) is not None]), 1)

                    lines.append(
                        f"| {label.removeprefix('gateway ')} | {clients} | "
                        f"{m('arrival_spread_ms')} | {m('queue_wait_ms')} | {m('ttft_ms')} "
                        f"({m('ttft_max_ms')}) | {m('prefill_ms')} | {m('reused_tokens')} |"
                    )
        lines += ["", f"(shape wall time {res.get('wall_s', 0):.0f} s)", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--product", type=Path, required=True, help="the product checkout")
    parser.add_argument("--models", type=Path, required=True, help="make_models.py --out")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shapes", default="smollm2,1b,8b")
    parser.add_argument("--repeats", type=int, default=5, help="single-stream decode rounds")
    parser.add_argument("--ttft-rounds", type=int, default=10)
    parser.add_argument("--long-rounds", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--clients", default="1,8,32,64,128")
    parser.add_argument("--rounds", type=int, default=2, help="concurrency rounds")
    parser.add_argument(
        "--one-client-repeats", type=int, default=5, help="1-client bursts per round and side"
    )
    parser.add_argument(
        "--concurrency", type=int, default=128, help="the batched models' concurrency"
    )
    parser.add_argument("--memory-budget", default="", help="server.memory_budget (default auto)")
    parser.add_argument(
        "--noreuse-clients",
        default="1,64",
        help="client counts that also run the batched-noreuse model",
    )
    parser.add_argument(
        "--isolated-clients",
        default="",
        help="client counts that also run `batched-isolated` (`isolation: process`)",
    )
    parser.add_argument(
        "--held-clients",
        default="",
        help="client counts that also run `batched-held` (`stream_interval: 20ms`: a busy "
        "batch's tokens several to a frame; needs a product that has the key)",
    )
    parser.add_argument(
        "--isolated-single",
        action="store_true",
        help="single stream also through `serial-isolated` and `batched-isolated`",
    )
    parser.add_argument(
        "--raw-prefill",
        default="8,32,n",
        help="raw BatchGenerator prefill_batch_size values (n: the client count), "
        "each capped at the client count",
    )
    parser.add_argument(
        "--client-procs",
        type=int,
        default=1,
        help="processes the concurrent clients are spread over (1: all in this process, "
        "whose own SSE parsing then lags behind 64-128 streams)",
    )
    parser.add_argument(
        "--first-served",
        default="serial",
        choices=["serial", "batched"],
        help="the model that serves the gateway's first request (an 8-token chat before "
        "any phase): on CUDA the first model to decode keeps a lead over the others",
    )
    parser.add_argument("--tag", default="", help="suffix of the output file names")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy the gateway in each phase (collapsed stacks to profiles.txt)",
    )
    parser.add_argument(
        "--profile-gil",
        action="store_true",
        help="with --profile: sample only the thread holding the GIL (py-spy --gil), so "
        "each thread's share of the samples is its share of the GIL",
    )
    args = parser.parse_args()
    args.product = args.product.resolve()
    args.models = args.models.resolve()
    args.clients = [int(c) for c in args.clients.split(",")]
    args.noreuse_clients = {int(c) for c in args.noreuse_clients.split(",") if c}
    args.isolated_clients = {int(c) for c in args.isolated_clients.split(",") if c}
    args.held_clients = {int(c) for c in args.held_clients.split(",") if c}
    args.raw_prefill = [0 if p == "n" else int(p) for p in args.raw_prefill.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(args.product / "bench"))
    import common
    import concurrency as conc_module
    import single_stream

    bench = {"common": common, "single_stream": single_stream, "concurrency": conc_module}
    tag = f"-{args.tag}" if args.tag else ""
    results: list[dict] = []
    state = {"summary": ""}

    def save(current: dict | None = None) -> None:
        """Everything so far to --out: a run cut off by its time limit still leaves its data."""
        shapes = results + ([current] if current is not None and current not in results else [])
        (args.out / f"results{tag}.json").write_text(
            json.dumps(
                {
                    "args": {
                        k: (
                            sorted(v)
                            if isinstance(v, set)
                            else str(v)
                            if isinstance(v, Path)
                            else v
                        )
                        for k, v in vars(args).items()
                    },
                    "shapes": shapes,
                },
                indent=1,
                default=str,
            )
        )
        state["summary"] = summarize(shapes, bench, args)
        (args.out / f"summary{tag}.md").write_text(state["summary"])

    with (
        open(args.out / f"events{tag}.log", "w") as events_out,
        open(args.out / f"profiles{tag}.txt", "w") as args.profiles,
    ):
        for shape in args.shapes.split(","):
            log(f"== {shape}")
            results.append(run_shape(shape, bench, args, events_out, save))
            save()
    summary = state["summary"]
    print("\n" + summary, flush=True)


if __name__ == "__main__":
    main()
