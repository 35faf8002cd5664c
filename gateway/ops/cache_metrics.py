"""The KV cache's metrics by tier (RAM, disk), fed by the `generated` and `cache_*` events."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from schemas.events import CacheCorrupt, CacheEvicted, CacheSaved, Event, Generated


class CacheMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        labelled = {"registry": registry}
        self.hits = Counter(
            "gateway_kv_cache_hits", "Prompts that continued a cached prefix, by tier",
            ["model", "tier"], **labelled,
        )  # fmt: skip
        self.misses = Counter(
            "gateway_kv_cache_misses", "Prompts prefilled from scratch (no tier had a prefix)",
            ["model"], **labelled,
        )  # fmt: skip
        self.tokens = Counter(
            "gateway_kv_cache_reused_tokens", "Prompt tokens served from a cache, by tier",
            ["model", "tier"], **labelled,
        )  # fmt: skip
        self.disk_bytes = Gauge(
            "gateway_kv_cache_disk_bytes", "The disk tier's directory size, as last written",
            **labelled,
        )  # fmt: skip
        self.saved = Counter(
            "gateway_kv_cache_saved_bytes", "Bytes of KV blocks written to disk", ["model"],
            **labelled,
        )  # fmt: skip
        self.evicted = Counter(
            "gateway_kv_cache_evicted_bytes", "Bytes of least recently used blocks removed",
            **labelled,
        )  # fmt: skip
        self.corrupt = Counter(
            "gateway_kv_cache_corrupt_blocks", "Blocks that failed their checksum (removed)",
            ["model"], **labelled,
        )  # fmt: skip

    def observe(self, event: Event) -> None:
        match event:
            case Generated(model=model) if event.stop_reason != "embedded":
                tiers = {"ram": event.reused_ram_tokens, "disk": event.reused_disk_tokens}
                for tier, tokens in tiers.items():
                    if tokens:
                        self.hits.labels(model, tier).inc()
                        self.tokens.labels(model, tier).inc(tokens)
                if not any(tiers.values()):
                    self.misses.labels(model).inc()
            case CacheSaved(model=model):
                self.saved.labels(model).inc(event.bytes)
                self.disk_bytes.set(event.dir_bytes)
            case CacheEvicted():
                self.evicted.inc(event.bytes)
                self.disk_bytes.set(event.dir_bytes)
            case CacheCorrupt(model=model):
                self.corrupt.labels(model).inc()
