"""The one hub-download service: a model's `hf:` source made local (`pull`) and, for a
GGUF, converted (`convert`), for every caller: a runner before its engine loads, `gateway
pull` (gateway/control/pull.py) and Ollama's `/api/pull` (gateway/ollama/pull.py).

A runner calls a `SourceFetch` (its model's and its draft's sources) on its own thread;
progress comes back through a callback, which `DownloadThrottle` turns into at most one
`model_downloading` event a second.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from engines.log import emit
from engines.sources.hub import Snapshot, fetch, is_hub_source, parse_hub_source
from engines.sources.hub_client import FileProgress
from schemas.config import ModelConfig
from schemas.events import ModelDownloaded, ModelDownloading

# At most one `model_downloading` event per model per this many seconds.
EVENT_INTERVAL_S = 1.0


class DownloadStopped(Exception):
    """Raised from the progress callback to abandon a transfer when its runner stops."""


def pull(
    model: ModelConfig,
    *,
    offline: bool,
    refresh: bool = False,
    progress: Callable[[FileProgress], None] | None = None,
    bar: Callable[[str], type] | None = None,
) -> Snapshot:
    """`model`'s `hf:` source in the cache: the cached snapshot, else downloaded now.

    `refresh` (the CLI, the admin's `/api/pull`) moves a branch-tracked model to the
    branch's newest commit; `progress` hears each file's bytes, `bar(file)` draws them
    (engines/sources/hub.py `fetch`). Raises `SourceError` naming the model and reason.
    """
    return fetch(model.id, model.source, token=model.hf_token, offline=offline,
                 progress=progress, bar=bar, refresh=refresh)  # fmt: skip


def converts(model: ModelConfig) -> bool:
    """Whether `model`'s pulled source is a GGUF, which `convert` turns into MLX."""
    return bool(parse_hub_source(model.id, model.source).file)


def convert(model: ModelConfig, base_dir: Path | None = None) -> Path | None:
    """A pulled GGUF converted to MLX now, so serving starts without the wait; None for a
    repository (nothing to convert)."""
    if not converts(model):
        return None
    from engines.sources.resolve import resolve_source  # the conversion imports mlx

    return resolve_source(model.id, model.source, base_dir=base_dir)


class SourceFetch:
    """The hub sources one runner needs, fetched in order (the model, then its draft)."""

    def __init__(self, models: list[ModelConfig], *, offline: bool) -> None:
        # The engine that reads weights, on the hub.
        self.models = [m for m in models if m.engine == "mlx" and is_hub_source(m.source)]
        self.sources = [(m.id, m.source, m.hf_token) for m in self.models]
        self.offline = offline

    def __call__(self, progress: Callable[[FileProgress], None]) -> list[Snapshot]:
        """Download what is not cached; raises `SourceError` naming the model and reason."""
        return [pull(m, offline=self.offline, progress=progress) for m in self.models]


def make_fetch(
    model: ModelConfig, draft: ModelConfig | None, *, offline: bool
) -> SourceFetch | None:
    """The fetch a runner for `model` needs, or None when nothing of it is on the Hub."""
    found = SourceFetch([m for m in (model, draft) if m is not None], offline=offline)
    return found if found.sources else None


class DownloadThrottle:
    """Lets a progress report through at most once every `interval` seconds."""

    def __init__(self, interval: float = EVENT_INTERVAL_S) -> None:
        self.interval = interval
        self._last: float | None = None

    def ready(self) -> bool:
        now = time.monotonic()
        if self._last is not None and now - self._last < self.interval:
            return False
        self._last = now
        return True


def downloading_event(model_id: str, progress: FileProgress) -> ModelDownloading:
    return ModelDownloading(
        model=model_id,
        file=progress.file,
        done=progress.done,
        total=progress.total,
        rate=round(progress.rate),
    )


def report_downloaded(
    model_id: str, fetch: SourceFetch, snapshots: list[Snapshot], started: float
) -> dict[str, str]:
    """`model_downloaded` for each source that fetched bytes just now; returns the model's
    own revision and commit, for its `model_attached` detail."""
    detail: dict[str, str] = {}
    for (source_model, source, _), snap in zip(fetch.sources, snapshots, strict=True):
        revision = parse_hub_source(source_model, source).revision
        if source_model == model_id:
            detail = {"revision": revision, "commit": snap.commit}
        if snap.downloaded:
            emit(
                ModelDownloaded(
                    model=source_model,
                    source=source,
                    revision=revision,
                    commit=snap.commit,
                    bytes=snap.downloaded,
                    download_s=round(time.perf_counter() - started, 3),
                )
            )
    return detail
