"""The KV cache's metrics by tier (RAM, disk), fed by the `generated` and `cache_*` events;
read back per model for the ops page (`/ui/api/cache`)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from schemas.events import CacheCorrupt, CacheEvicted, CacheSaved, Event, Generated

# Jobs answered whole, with no prompt cache to hit or miss.
NO_PROMPT_CACHE = ("embedded", "reranked", "transcribed")


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
        self.evicted_blocks = Counter(
            "gateway_kv_cache_evicted_blocks", "Least recently used blocks removed",
            **labelled,
        )  # fmt: skip
        self.corrupt = Counter(
            "gateway_kv_cache_corrupt_blocks", "Blocks that failed their checksum (removed)",
            ["model"], **labelled,
        )  # fmt: skip

    def observe(self, event: Event) -> None:
        match event:
            case Generated(model=model) if event.stop_reason not in NO_PROMPT_CACHE:
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
                self.evicted_blocks.inc(event.blocks)
                self.disk_bytes.set(event.dir_bytes)
            case CacheCorrupt(model=model):
                self.corrupt.labels(model).inc()

    def snapshot(self) -> dict:
        """The counters as the ops page shows them: per model (hits and reused tokens by
        tier, misses, bytes saved, corrupt blocks) and for the directory (evictions)."""
        models: dict[str, dict] = {}
        per_model = {
            "hits": self.hits,
            "misses": self.misses,
            "reused_tokens": self.tokens,
            "saved_bytes": self.saved,
            "corrupt_blocks": self.corrupt,
        }
        for field, counter in per_model.items():
            for labels, value in _totals(counter):
                row = models.setdefault(labels["model"], _empty_row())
                if "tier" in labels:
                    row[field][labels["tier"]] = int(value)
                else:
                    row[field] = int(value)
        return {
            "evicted_blocks": int(sum(v for _, v in _totals(self.evicted_blocks))),
            "evicted_bytes": int(sum(v for _, v in _totals(self.evicted))),
            "models": dict(sorted(models.items())),
        }


def _empty_row() -> dict:
    return {
        "hits": {"ram": 0, "disk": 0},
        "misses": 0,
        "reused_tokens": {"ram": 0, "disk": 0},
        "saved_bytes": 0,
        "corrupt_blocks": 0,
    }


def _totals(counter: Counter) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of each of the counter's series."""
    return [
        (sample.labels, sample.value)
        for family in counter.collect()
        for sample in family.samples
        if sample.name.endswith("_total")
    ]
