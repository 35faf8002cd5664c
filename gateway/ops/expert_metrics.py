"""The routed-expert caches' metrics (`experts:`), read from the loaded engines when scraped:
the experts kept resident per layer, and the look-ups since load (hits, misses, evictions,
bytes read from the expert files). Reading them never loads or touches a model: they are
counters the model thread keeps (engines/mlx/experts/cache.py `Counts`)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from engines.base import EngineState
from gateway.control.registry import Registry


def loaded_experts(runner):
    """The ExpertSet of a loaded model holding experts partly on disk, or None."""
    experts = getattr(runner.engine, "experts", None)
    return experts if runner.state is EngineState.READY else None


def expert_sets(registry: Registry) -> Iterator[tuple[str, object]]:
    """(model, ExpertSet) of every loaded model holding experts partly on disk."""
    for model, runner in registry.current.runners.items():
        if (experts := loaded_experts(runner)) is not None:
            yield model, experts


def experts_row(runner) -> dict | None:
    """What the ops page shows of a model's expert cache, or None (no `experts:`)."""
    experts = loaded_experts(runner)
    if experts is None:
        return None
    rate = experts.counts.hit_rate
    return {
        "resident": experts.resident,
        "experts": experts.experts,
        "resident_bytes": experts.resident_bytes,
        "hit_rate": None if rate is None else round(rate, 4),
    }


class ExpertMetrics(Collector):
    def __init__(self, registry: Registry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        resident = GaugeMetricFamily(
            "gateway_experts_resident", "Routed experts kept in memory per layer", labels=["model"]
        )
        resident_bytes = GaugeMetricFamily(
            "gateway_experts_resident_bytes", "What the resident experts take", labels=["model"]
        )
        hit_rate = GaugeMetricFamily(
            "gateway_experts_hit_ratio", "Routed experts found resident, since load",
            labels=["model"],
        )  # fmt: skip
        counters = {
            name: CounterMetricFamily(f"gateway_experts_{name}", what, labels=["model"])
            for name, what in (
                ("hits", "Routed experts found resident"),
                ("misses", "Routed experts read from the expert files"),
                ("evictions", "Resident experts dropped to make room"),
                ("read_bytes", "Bytes read from the expert files"),
            )
        }
        for model, experts in expert_sets(self._registry):
            counts = experts.counts
            resident.add_metric([model], experts.resident)
            resident_bytes.add_metric([model], experts.resident_bytes)
            if counts.hit_rate is not None:
                hit_rate.add_metric([model], round(counts.hit_rate, 4))
            counters["hits"].add_metric([model], counts.hits)
            counters["misses"].add_metric([model], counts.misses)
            counters["evictions"].add_metric([model], counts.evictions)
            counters["read_bytes"].add_metric([model], counts.bytes_read)
        yield from (resident, resident_bytes, hit_rate, *counters.values())
