"""Reload: validate the whole file, diff by model id, swap one reference, drain the rest.

Every trigger — SIGHUP, `POST /admin/reload`, the file watch — calls `Reloader.reload`,
one at a time, so the state after a burst of triggers is the last file's.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import msgspec

from engines.download import make_fetch
from engines.errors import ConfigInvalid
from engines.factory import make_engine
from engines.log import emit
from engines.mlx.platform import PlatformPath
from engines.residency import MemoryBudget
from engines.runner import Runner
from gateway.config import validate_config
from gateway.registry import Generation, Registry
from gateway.tasks import TaskSet
from schemas.config import GatewayConfig, ModelConfig
from schemas.events import ConfigRejected, ConfigReloaded

# Settings the engine is built from: changing one needs a new runner (and a new load).
# Every other setting (aliases, sampling, system, guardrails, queue, residency) is read per
# request or per admission, so the running runner takes it on without touching its weights.
ENGINE_FIELDS = (
    "engine",
    "source",
    "context",
    "kv_bits",
    "draft",
    "task",
    "tool_parser",
    "script",
    "concurrency",
    "prefix_reuse",
    "session_slots",
    "rate",
    "hf_token",
)


class ReloadDiff(msgspec.Struct, frozen=True, kw_only=True):
    added: list[str]
    removed: list[str]
    changed: list[str]
    unchanged: list[str]
    restarted: list[str]  # the changed models that got a new runner (and reload their weights)


def needs_new_engine(old: ModelConfig, new: ModelConfig) -> bool:
    return any(getattr(old, f) != getattr(new, f) for f in ENGINE_FIELDS)


def make_runner(
    model: ModelConfig,
    config: GatewayConfig,
    platform: PlatformPath,
    base_dir: Path,
    budget: MemoryBudget,
) -> Runner:
    draft = next((m for m in config.models if model.draft and m.id == model.draft.model), None)
    fetch = make_fetch(model, draft, offline=config.server.offline)
    return Runner(model, make_engine(model, platform, base_dir, draft), budget, fetch)


class Reloader:
    def __init__(
        self, registry: Registry, path: Path, platform: PlatformPath, budget: MemoryBudget
    ) -> None:
        self.registry = registry
        self.path = path
        self._platform = platform
        self._budget = budget
        self._lock = asyncio.Lock()
        self._draining = TaskSet()
        self.applied_hash = file_hash(path)

    async def reload(self, trigger: str) -> ReloadDiff:
        """Apply the file as it is now, or refuse it whole (`ConfigInvalid`)."""
        async with self._lock:
            digest = file_hash(self.path)
            try:
                # Parsing and source checks read files: never on the loop other clients use.
                config = await asyncio.to_thread(validate_config, self.path)
            except ConfigInvalid as invalid:
                emit(ConfigRejected(trigger=trigger, errors=invalid.errors), level="error")
                raise
            diff = await self._apply(config)
            self.applied_hash = digest
            emit(ConfigReloaded(trigger=trigger, **msgspec.structs.asdict(diff)))
            return diff

    async def _apply(self, config: GatewayConfig) -> ReloadDiff:
        old = self.registry.current
        runners: dict[str, Runner] = {}
        retune: list[tuple[Runner, ModelConfig]] = []
        added, changed, unchanged, restarted = [], [], [], []
        for model in config.models:
            before = old.models.get(model.id)
            if before is None:
                added.append(model.id)
            elif before == model:
                unchanged.append(model.id)
            else:
                changed.append(model.id)
            if before is not None and not needs_new_engine(before, model):
                runners[model.id] = old.runners[model.id]
                retune.append((runners[model.id], model))
                continue
            if before is not None:
                restarted.append(model.id)
            runners[model.id] = make_runner(
                model, config, self._platform, self.path.parent, self._budget
            )
        # New runners bind and (when pinned) load before routes switch: no request waits
        # on a load that could have happened beside the old runner.
        for model_id in added + restarted:
            await runners[model_id].start()
        for runner, model in retune:
            runner.model = model
        self.registry.current = Generation(config, runners)
        removed = [m for m in old.models if m not in self.registry.current.models]
        for model_id in removed:
            self._drain(old.runners[model_id].stop("removed"))
        for model_id in restarted:
            self._drain(old.runners[model_id].stop("changed", finish_queued=True))
        for runner, model in retune:
            if model.pinned:
                self._drain(runner.load())
        return ReloadDiff(
            added=added,
            removed=removed,
            changed=changed,
            unchanged=unchanged,
            restarted=restarted,
        )

    def _drain(self, work) -> None:
        self._draining.spawn(work, "reload drain")

    async def watch(self) -> None:
        """Reload when the file's content changes and holds still; never on a missing file."""
        import watchfiles

        async for _ in watchfiles.awatch(
            self.path.parent,
            debounce=200,
            step=50,
            watch_filter=lambda _, p: Path(p).name == self.path.name,
        ):
            digest = await settled_hash(self.path)
            if digest is None or digest == self.applied_hash:
                continue
            try:
                await self.reload("watch")
            except ConfigInvalid:
                self.applied_hash = digest  # refused once; wait for the next edit


def file_hash(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


async def settled_hash(path: Path, pause: float = 0.15) -> str | None:
    """The file's hash once two reads a pause apart agree; None while missing or empty.

    An editor that writes in several steps, or replaces the file through a temp file,
    shows a missing or half-written file for a moment: that moment is never applied.
    """
    first = file_hash(path)
    while True:
        await asyncio.sleep(pause)
        second = file_hash(path)
        if second == first:
            break
        first = second
    if first is None or first == hashlib.sha256(b"").hexdigest():
        return None
    return first
