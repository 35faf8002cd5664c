"""`GET /metrics` in Prometheus text, fed by the events and by reading runner state.

Counters and histograms are fed by one listener on `engines.log.emit`, so they count what
the log reports and nothing else; gauges (queue depth, running, load state) are read from
the runners when scraped. Reading either never loads, wakes or touches a model.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator

from litestar import Response, get
from litestar.datastructures import State
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from engines.base import EngineState
from engines.log import bound
from gateway.control.registry import Registry
from gateway.http.shutdown import Admission
from gateway.ops.cache_metrics import CacheMetrics
from gateway.ops.expert_metrics import ExpertMetrics
from schemas.events import (
    ConfigRejected,
    ConfigReloaded,
    Event,
    Generated,
    LimitReached,
    ModelAttached,
    ModelDownloaded,
    ModelFailed,
    ReplicaDown,
    ReplicaUp,
    RequestFinished,
    RequestRouted,
    UpstreamFailed,
)

# Engine states as ops name them: a model is "loaded" when it can serve.
STATE_NAMES = {
    EngineState.UNLOADED: "unloaded",
    EngineState.DOWNLOADING: "downloading",
    EngineState.LOADING: "loading",
    EngineState.READY: "loaded",
    EngineState.FAILED: "failed",
}
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
RECENT_RUNS = 16  # generations that make up a model's recent tokens/s
RECENT_WINDOW_S = 300.0


class Metrics:
    """Every metric of one gateway, in its own Prometheus registry (no process globals)."""

    def __init__(self, registry: Registry, admission: Admission) -> None:
        disable_created_metrics()  # the `_created` twin of every series only doubles a scrape
        self.prometheus = CollectorRegistry(auto_describe=False)
        labelled = {"registry": self.prometheus}
        self.requests = Counter(
            "gateway_requests", "HTTP requests answered, by model served and status",
            ["model", "status"], **labelled,
        )  # fmt: skip
        self.prompt_tokens = Counter(
            "gateway_prompt_tokens", "Prompt tokens processed", ["model"], **labelled
        )
        self.generated_tokens = Counter(
            "gateway_generated_tokens", "Tokens generated", ["model"], **labelled
        )
        # Speculation: tokens drafted and kept; their ratio is the acceptance rate.
        self.drafted_tokens = Counter(
            "gateway_drafted_tokens", "Tokens proposed by speculation", ["model"], **labelled
        )
        self.accepted_tokens = Counter(
            "gateway_accepted_tokens", "Drafted tokens decoding kept", ["model"], **labelled
        )
        self.acceptance = Gauge(
            "gateway_draft_acceptance_ratio", "Accepted over drafted tokens since start",
            ["model"], **labelled,
        )  # fmt: skip
        # Speech to text: the clips' length, and the time spent on them (their ratio is
        # the real-time factor).
        self.audio_seconds = Counter(
            "gateway_audio_seconds", "Seconds of audio transcribed", ["model"], **labelled
        )
        self.audio_busy_seconds = Counter(
            "gateway_audio_transcribe_seconds", "Seconds spent decoding and transcribing audio",
            ["model"], **labelled,
        )  # fmt: skip
        self.ttft = Histogram(
            "gateway_time_to_first_token_seconds", "From admission to the first token",
            ["model"], buckets=TTFT_BUCKETS, **labelled,
        )  # fmt: skip
        self.latency = Histogram(
            "gateway_request_duration_seconds", "Whole request, first byte in to last byte out",
            ["model"], buckets=LATENCY_BUCKETS, **labelled,
        )  # fmt: skip
        self.reloads = Counter("gateway_reloads", "Config reloads", ["result"], **labelled)
        self.loads = Counter("gateway_model_loads", "Model loads", ["model", "result"], **labelled)
        self.downloaded = Counter(
            "gateway_model_download_bytes", "Bytes fetched from the Hugging Face Hub",
            ["model"], **labelled,
        )  # fmt: skip
        # engine upstream/process: fed by their events, like the counters above.
        self.upstream_failures = Counter(
            "gateway_upstream_failures", "Requests a replica failed, before or after output",
            ["model", "replica", "phase"], **labelled,
        )  # fmt: skip
        self.replica_up = Gauge(
            "gateway_replica_up", "1 while a replica is in rotation",
            ["model", "replica"], **labelled,
        )  # fmt: skip
        # Usage per API key, named by its label (never the key): labels and model ids both
        # come from the config, so the series stay bounded. Keyless requests are not here.
        self.key_requests = Counter(
            "gateway_key_requests", "Requests answered, by API key label and model served",
            ["key", "model"], **labelled,
        )  # fmt: skip
        self.key_errors = Counter(
            "gateway_key_errors", "Requests answered with an error status (>= 400), by key",
            ["key", "model"], **labelled,
        )  # fmt: skip
        self.key_prompt_tokens = Counter(
            "gateway_key_prompt_tokens", "Prompt tokens, by API key label and model",
            ["key", "model"], **labelled,
        )  # fmt: skip
        self.key_cached_prompt_tokens = Counter(
            "gateway_key_cached_prompt_tokens",
            "Of the prompt tokens, those read from a cache tier (RAM or disk), by key and model",
            ["key", "model"], **labelled,
        )  # fmt: skip
        self.key_generated_tokens = Counter(
            "gateway_key_generated_tokens", "Tokens generated, by API key label and model",
            ["key", "model"], **labelled,
        )  # fmt: skip
        self.key_limited = Counter(
            "gateway_key_rate_limited", "Requests refused past a key's limit, by label and limit",
            ["key", "limit"], **labelled,
        )  # fmt: skip
        for result in ("ok", "rejected"):
            self.reloads.labels(result)
        self.prometheus.register(RunnerState(registry, admission))
        self.prometheus.register(ExpertMetrics(registry))
        self.kv_cache = CacheMetrics(self.prometheus)
        self._served: dict[str, str] = {}  # request_id -> model, until request_finished
        self._recent: dict[str, deque[tuple[float, int, float]]] = {}
        self._drafts: dict[str, tuple[int, int]] = {}  # model -> (drafted, accepted) so far

    def observe(self, event: Event) -> None:
        """The listener on `emit`: one event in, the metrics it moves moved."""
        fields = bound()
        request_id, key = fields.get("request_id"), fields.get("key_label")
        self.kv_cache.observe(event)
        match event:
            case RequestRouted(served=model) if request_id:
                self._served[request_id] = model
            case RequestFinished(status=status, duration_ms=ms):
                model = self._served.pop(request_id, "") if request_id else ""
                self.requests.labels(model, str(status)).inc()
                self.latency.labels(model).observe(ms / 1000)
                if key:
                    self.key_requests.labels(key, model).inc()
                    if status >= 400:
                        self.key_errors.labels(key, model).inc()
            case Generated(model=model):
                self.prompt_tokens.labels(model).inc(event.prompt_tokens)
                self.generated_tokens.labels(model).inc(event.new_tokens)
                if event.ttft_s is not None:
                    self.ttft.labels(model).observe(event.ttft_s)
                if event.audio_seconds:
                    self.audio_seconds.labels(model).inc(event.audio_seconds)
                    self.audio_busy_seconds.labels(model).inc(event.decode_s)
                if event.drafted_tokens:
                    self._speculated(model, event.drafted_tokens, event.accepted_tokens)
                recent = self._recent.setdefault(model, deque(maxlen=RECENT_RUNS))
                recent.append((time.monotonic(), event.new_tokens, event.decode_s))
                if key:
                    self.key_prompt_tokens.labels(key, model).inc(event.prompt_tokens)
                    self.key_cached_prompt_tokens.labels(key, model).inc(event.reused_prefix_tokens)
                    self.key_generated_tokens.labels(key, model).inc(event.new_tokens)
            case LimitReached(key_label=label, limit=limit):
                self.key_limited.labels(label, limit).inc()
            case ConfigReloaded():
                self.reloads.labels("ok").inc()
            case ConfigRejected():
                self.reloads.labels("rejected").inc()
            case ModelAttached(model=model):
                self.loads.labels(model, "ok").inc()
            case ModelFailed(model=model):
                self.loads.labels(model, "failed").inc()
            case ModelDownloaded(model=model):
                self.downloaded.labels(model).inc(event.bytes)
            case UpstreamFailed(model=model, replica=replica, phase=phase):
                self.upstream_failures.labels(model, replica, phase).inc()
            case ReplicaUp(model=model, replica=replica):
                self.replica_up.labels(model, replica).set(1)
            case ReplicaDown(model=model, replica=replica):
                self.replica_up.labels(model, replica).set(0)

    def _speculated(self, model: str, drafted: int, accepted: int) -> None:
        self.drafted_tokens.labels(model).inc(drafted)
        self.accepted_tokens.labels(model).inc(accepted)
        total, kept = self._drafts.get(model, (0, 0))
        total, kept = total + drafted, kept + accepted
        self._drafts[model] = (total, kept)
        self.acceptance.labels(model).set(round(kept / total, 4))

    def tokens_per_s(self, model: str) -> float | None:
        """Decode speed over the model's recent generations (the last 5 minutes), or None."""
        horizon = time.monotonic() - RECENT_WINDOW_S
        runs = [(n, s) for t, n, s in self._recent.get(model, ()) if t >= horizon]
        seconds = sum(s for _, s in runs)
        return round(sum(n for n, _ in runs) / seconds, 2) if seconds > 0 else None

    def render(self) -> bytes:
        return generate_latest(self.prometheus)


class RunnerState(Collector):
    """Gauges read from the runners at scrape time: attributes only, never a load."""

    def __init__(self, registry: Registry, admission: Admission) -> None:
        self._registry = registry
        self._admission = admission

    def collect(self) -> Iterator[Metric]:
        runners = self._registry.current.runners
        depth = GaugeMetricFamily("gateway_queue_depth", "Requests waiting", labels=["model"])
        running = GaugeMetricFamily("gateway_running", "Requests generating", labels=["model"])
        state = GaugeMetricFamily(
            "gateway_model_state", "1 for the model's load state", labels=["model", "state"]
        )
        memory = GaugeMetricFamily(
            "gateway_model_memory_bytes", "Weights and KV cache held", labels=["model"]
        )
        for model, runner in runners.items():
            depth.add_metric([model], runner.queue_depth)
            running.add_metric([model], runner.running)
            held = runner.memory_bytes if runner.state is EngineState.READY else 0
            memory.add_metric([model], held)
            for engine_state, name in STATE_NAMES.items():
                state.add_metric([model, name], 1.0 if runner.state is engine_state else 0.0)
        adapters = GaugeMetricFamily(
            "gateway_adapter", "1 for each adapter a base model serves", labels=["model", "adapter"]
        )
        for adapter, view in self._registry.current.views.items():
            adapters.add_metric([view.base_id, adapter], 1.0)
        draining = GaugeMetricFamily("gateway_draining", "1 while shutting down")
        draining.add_metric([], 1.0 if self._admission.draining else 0.0)
        yield from (depth, running, state, memory, adapters, draining)


@get("/metrics", opt={"ops": True}, sync_to_thread=False)
def metrics(state: State) -> Response:
    """Prometheus text; for the admin, or the ops key (gateway/http/auth.py `ops_refusal`)."""
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)


ROUTES = [metrics]
