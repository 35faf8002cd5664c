"""The plots' series, worked out from the Activity store: per model and time bucket, tokens/s,
requests/s, TTFT p50/p95, queue depth and wait, memory held; errors by kind (status)."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from typing import Any

from gateway.ops.activity.store import ActivityStore

# Each window's length and bucket, in seconds: about 60 points a plot.
WINDOWS = {"5m": (300, 5), "1h": (3600, 60), "24h": (86400, 1800)}


def percentile(values: list[float], fraction: float) -> float | None:
    """The nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def history(
    store: ActivityStore, window: str, key: str | None = None, now: float | None = None
) -> dict[str, Any]:
    """Series over `window` ("5m", "1h", "24h"); only `key`'s requests when it is given."""
    length, step = WINDOWS[window]
    now = now or time.time()
    end = math.floor(now / step) * step + step  # the bucket holding `now` is the last
    start = end - length
    times = [start + i * step for i in range(length // step)]
    slots = len(times)

    def bucket(ts: float) -> int:
        return min(slots - 1, max(0, int((ts - start) // step)))

    where, params = "ts >= ?", [start]
    if key is not None:
        where, params = where + " AND key = ?", [*params, key]
    rows = store.query(
        f"SELECT ts, model, status, new_tokens, ttft_s, queue_wait_s FROM requests "
        f"WHERE {where} AND status IS NOT NULL",
        tuple(params),
    )
    per_model: dict[str, dict[str, list]] = defaultdict(lambda: _series(slots))
    ttfts: dict[str, list[list[float]]] = defaultdict(lambda: [[] for _ in times])
    waits: dict[str, list[list[float]]] = defaultdict(lambda: [[] for _ in times])
    errors: dict[str, list[float]] = defaultdict(lambda: [0.0] * slots)
    for row in rows:
        i, model = bucket(row["ts"]), row["model"] or "(no model)"
        series = per_model[model]
        series["requests_per_s"][i] += 1 / step
        series["tokens_per_s"][i] += (row["new_tokens"] or 0) / step
        if row["ttft_s"] is not None:
            ttfts[model][i].append(row["ttft_s"])
        if row["queue_wait_s"] is not None:
            waits[model][i].append(row["queue_wait_s"])
        if row["status"] >= 400:
            errors[str(row["status"])][i] += 1
    for model, series in per_model.items():
        series["ttft_p50_s"] = [percentile(v, 0.5) for v in ttfts[model]]
        series["ttft_p95_s"] = [percentile(v, 0.95) for v in ttfts[model]]
        series["queue_wait_s"] = [max(v) if v else None for v in waits[model]]
    if key is None:  # runner samples belong to every client: the whole view only
        samples = store.query(
            "SELECT ts, model, queue_depth, memory_bytes FROM samples WHERE ts >= ? ORDER BY ts",
            (start,),
        )
        for sample in samples:
            series = per_model[sample["model"]]
            i = bucket(sample["ts"])
            series["queue_depth"][i] = max(series["queue_depth"][i] or 0, sample["queue_depth"])
            series["memory_bytes"][i] = sample["memory_bytes"]  # the bucket's latest
    return {
        "window": window,
        "step_s": step,
        "t": times,
        "models": dict(per_model),
        "errors": dict(errors),
    }


def _series(slots: int) -> dict[str, list]:
    return {
        "tokens_per_s": [0.0] * slots,
        "requests_per_s": [0.0] * slots,
        "ttft_p50_s": [None] * slots,
        "ttft_p95_s": [None] * slots,
        "queue_depth": [None] * slots,
        "queue_wait_s": [None] * slots,
        "memory_bytes": [None] * slots,
    }
