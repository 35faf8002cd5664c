"""Every event the gateway logs: the name is the struct's tag, the payload its fields.

The kinds live by what they tell of (`requests`, `models`, `cache`, `server`), on `Event`
(`base`); every one is importable from here, as `from schemas.events import X`."""

from __future__ import annotations

from schemas.events.base import Event
from schemas.events.batches import BackgroundResponseChanged, BatchChanged
from schemas.events.cache import (
    CacheCorrupt,
    CacheEvicted,
    CacheRatesIgnored,
    CacheRebuilt,
    CacheSaved,
    CacheUnwritable,
    PrefixNotKept,
)
from schemas.events.models import (
    BatchFailed,
    ContextBeyondTraining,
    ModelAttached,
    ModelDetached,
    ModelDownloaded,
    ModelDownloading,
    ModelFailed,
    ModelLoading,
    ModelLog,
    ModelRestarting,
    ReplicaDown,
    ReplicaUp,
    SwapWaiting,
)
from schemas.events.requests import (
    Generated,
    Guardrail,
    ImageFetchFailed,
    InternalError,
    LimitReached,
    OptionsIgnored,
    RequestFinished,
    RequestQueued,
    RequestRouted,
    RequestStarted,
    ToolsDropped,
    UpstreamFailed,
)
from schemas.events.server import (
    ConfigRejected,
    ConfigReloaded,
    ServerDraining,
    ServerStarted,
    ServerStopping,
    TaskFailed,
)
from schemas.events.tools import McpServerFailed, McpServerStarted, McpServerStopped, ToolCalled

__all__ = [
    "Event",
    "BatchChanged",
    "BackgroundResponseChanged",
    "ToolCalled",
    "McpServerStarted",
    "McpServerFailed",
    "McpServerStopped",
    "RequestStarted",
    "RequestRouted",
    "RequestQueued",
    "Generated",
    "Guardrail",
    "OptionsIgnored",
    "ToolsDropped",
    "RequestFinished",
    "ImageFetchFailed",
    "InternalError",
    "ModelLoading",
    "ModelDownloading",
    "ModelDownloaded",
    "CacheRebuilt",
    "CacheSaved",
    "CacheEvicted",
    "CacheCorrupt",
    "PrefixNotKept",
    "CacheUnwritable",
    "CacheRatesIgnored",
    "ModelAttached",
    "ContextBeyondTraining",
    "ModelDetached",
    "ModelFailed",
    "ModelRestarting",
    "ModelLog",
    "UpstreamFailed",
    "ReplicaDown",
    "ReplicaUp",
    "BatchFailed",
    "TaskFailed",
    "ServerStarted",
    "ConfigReloaded",
    "ConfigRejected",
    "ServerDraining",
    "ServerStopping",
    "LimitReached",
    "SwapWaiting",
]
