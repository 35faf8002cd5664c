"""The KV cache's counters read back per model for the ops page, from the events alone."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from gateway.ops.cache_metrics import CacheMetrics
from schemas.events import CacheCorrupt, CacheEvicted, CacheSaved, Generated


def generated(ram: int = 0, disk: int = 0) -> Generated:
    return Generated(
        model="m", prompt_tokens=700, new_tokens=8, prefill_s=0.1, decode_s=0.2,
        queue_wait_s=0.0, ttft_s=0.1, stop_reason="stop", reused_prefix_tokens=ram + disk,
        reused_ram_tokens=ram, reused_disk_tokens=disk,
    )  # fmt: skip


def test_the_snapshot_counts_hits_and_tokens_by_tier_misses_and_the_directory():
    metrics = CacheMetrics(CollectorRegistry())
    for event in (
        generated(),
        generated(disk=640),
        generated(ram=700),
        CacheSaved(model="m", blocks=10, tokens=640, bytes=3000, save_s=0.1, dir_bytes=3000),
        CacheEvicted(model="m", blocks=4, bytes=1200, dir_bytes=1800),
        CacheCorrupt(model="other", block="ab", reason="cut short"),
    ):
        metrics.observe(event)
    snapshot = metrics.snapshot()
    assert snapshot["models"]["m"] == {
        "hits": {"ram": 1, "disk": 1},
        "misses": 1,
        "reused_tokens": {"ram": 700, "disk": 640},
        "saved_bytes": 3000,
        "corrupt_blocks": 0,
    }
    assert snapshot["models"]["other"]["corrupt_blocks"] == 1
    assert (snapshot["evicted_blocks"], snapshot["evicted_bytes"]) == (4, 1200)
