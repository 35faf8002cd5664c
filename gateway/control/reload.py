"""Reload: validate the whole file, diff by model id, swap one reference, drain the rest.

Every trigger — SIGHUP, `POST /admin/reload`, the file watch — calls `Reloader.reload`,
one at a time, so the state after a burst of triggers is the last file's.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from pathlib import Path

import msgspec

from engines.base import EngineState
from engines.download import make_fetch
from engines.errors import ConfigInvalid, ModelUnavailable
from engines.factory import make_engine
from engines.job import Meter
from engines.log import emit
from engines.platform import PlatformPath
from engines.residency import MemoryBudget
from engines.runner import Runner
from engines.tasks import Tasks
from gateway.control.config import validate_config
from gateway.control.registry import Generation, Registry
from gateway.control.state import cache_dir
from schemas.config import GatewayConfig, ModelConfig
from schemas.config_keys import MODEL_KEYS
from schemas.events import ConfigRejected, ConfigReloaded


class ReloadDiff(msgspec.Struct, frozen=True, kw_only=True):
    added: list[str]
    removed: list[str]
    changed: list[str]
    unchanged: list[str]
    restarted: list[str]  # the changed models that got a new runner (and reload their weights)
    # Changed models that could not load beside their old runner within the memory budget:
    # the old one drained first, then the new one loaded.
    drained_first: list[str] = []
    # Models that failed to load, with why (and what serves them now).
    failed: dict[str, str] = {}


def needs_new_engine(old: ModelConfig, new: ModelConfig) -> bool:
    """Whether a setting the engine is built from changed (`restart` in `MODEL_KEYS`): then
    a new runner loads. Every other setting (aliases, sampling, system, guardrails, queue,
    residency) is read per request or per admission, so the running runner takes it on."""
    changed = any(
        getattr(old, key) != getattr(new, key) for key, rule in MODEL_KEYS.items() if rule.restart
    )
    # Adapters are added, changed and removed on the loaded base (`retune_adapters`); only
    # a base gaining its first or losing its last is built anew (its layers wrapped or not).
    return changed or bool(old.adapters) != bool(new.adapters)


async def retune_adapters(runner: Runner, model: ModelConfig) -> str | None:
    """`model.adapters` onto its running base, which stays loaded (its other adapters and
    the rows decoding under a removed one go on): None, or why they were refused. The files
    are read off the loop."""
    change = getattr(runner.engine, "change_adapters", None)
    if change is None:
        return f"model {model.id!r}: its engine takes no adapters"
    try:
        await asyncio.to_thread(change, model.adapters)
    except ModelUnavailable as refused:
        return str(refused)
    return None


def make_runner(
    model: ModelConfig,
    config: GatewayConfig,
    platform: PlatformPath,
    base_dir: Path,
    budget: MemoryBudget,
    meter: Meter | None = None,
) -> Runner:
    draft = next((m for m in config.models if model.draft and m.id == model.draft.model), None)
    fetch = make_fetch(model, draft, offline=config.server.offline)
    disk = cache_dir(config.server, base_dir)
    engine = make_engine(model, platform, base_dir, draft, disk)
    return Runner(model, engine, budget, fetch, meter)


class Reloader:
    def __init__(
        self,
        registry: Registry,
        path: Path,
        platform: PlatformPath,
        budget: MemoryBudget,
        meter: Meter | None = None,
    ) -> None:
        self.registry = registry
        self.path = path
        self._platform = platform
        self._budget = budget
        self._meter = meter  # every runner tells it the tokens of keyed requests
        self._lock = asyncio.Lock()
        self._draining = Tasks()  # old runners draining, loads begun by a reload
        self.applied_hash = file_hash(path)
        # Called with each config applied, on the loop (the MCP servers follow it: gateway/mcp).
        self.after: list[Callable[[GatewayConfig], None]] = []

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
            for follow in self.after:
                follow(self.registry.current.config)
            emit(ConfigReloaded(trigger=trigger, **msgspec.structs.asdict(diff)))
            return diff

    async def _apply(self, config: GatewayConfig) -> ReloadDiff:
        """Switch to `config`. The order, for a model whose engine settings changed:

        1. If the new runner fits the memory budget beside the old one, it loads first and
           the old one keeps serving meanwhile; routes switch once it is loaded, and the old
           one finishes what it admitted. A new runner that fails to load is not swapped in:
           the old one keeps serving with the previous settings, and `failed` says why.
        2. Otherwise routes switch to the new runner at once (requests wait in its queue),
           the old one drains, and only then does the new one load (`drained_first`). If it
           then fails, the previous settings are loaded again where they can be.
        Pinned models that had failed are loaded again; each failure is named in `failed`.
        """
        old = self.registry.current
        # The models as declared (`old.models` lists each adapter too, served by its base).
        old_models = {m.id: m for m in old.config.models}
        runners: dict[str, Runner] = {}
        declared = {m.id: m for m in config.models}  # what each model serves with, after this
        retune: list[tuple[Runner, ModelConfig]] = []
        added, changed, unchanged, restarted = [], [], [], []
        for model in config.models:
            before = old_models.get(model.id)
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
            runners[model.id] = self._make(model, config)
        failed: dict[str, str] = {}
        drained_first: list[str] = []
        # New runners bind and (when pinned) load before routes switch: no request waits
        # on a load that could have happened beside the old runner.
        for model_id in added:
            await runners[model_id].start()
        for model_id in list(restarted):
            new, previous = runners[model_id], old.runners[model_id]
            if not await self._fits_beside(new, previous):
                drained_first.append(model_id)
                continue
            await new.start()
            if new.state is EngineState.FAILED:
                failed[model_id] = f"{new.error}; the previous settings keep serving"
                await new.stop("failed")
                runners[model_id], declared[model_id] = previous, old_models[model_id]
                restarted.remove(model_id)
        finished_draining: dict[str, asyncio.Future[None]] = {}
        for model_id in drained_first:
            finished_draining[model_id] = asyncio.get_running_loop().create_future()
            runners[model_id].bind(after=finished_draining[model_id])
        for i, (runner, model) in enumerate(retune):
            if (before := old_models[model.id]).adapters != model.adapters:
                why = await retune_adapters(runner, model)
                if why is not None:  # the adapters it had serve on; the rest of it changes
                    failed[model.id] = f"{why}; the previous adapters keep serving"
                    model = msgspec.structs.replace(model, adapters=before.adapters)
                    retune[i] = (runner, model)
                    declared[model.id] = model
            runner.model = model
        self._switch(config, runners, declared)
        removed = [m for m in old_models if m not in declared]
        for model_id in removed:
            self._drain(old.runners[model_id].stop("removed"))
        for model_id in restarted:
            stopping = old.runners[model_id].stop("changed", finish_queued=True)
            if model_id in finished_draining:
                done = finished_draining[model_id]
                stopping = _then(stopping, lambda done=done: done.set_result(None))
            self._drain(stopping)
        retried = [r for r, m in retune if m.pinned and r.state is EngineState.FAILED]
        for runner in retried:
            await runner.load(retry=True)
        for runner, model in retune:
            if model.pinned and runner.state is EngineState.UNLOADED:
                self._drain(
                    runner.load(), f"load {runner.model.id}"
                )  # e.g. residency turned from on-demand to pinned
        for model_id in drained_first:
            if declared[model_id].pinned:
                await runners[model_id].load()
        for model_id in added + drained_first + [r.model.id for r in retried]:
            runner = runners[model_id]
            if runner.state is EngineState.FAILED:
                failed[model_id] = runner.error or "failed to load"
        for model_id in drained_first:
            if model_id in failed:
                failed[model_id] += await self._restore(model_id, old, runners, declared)
        return ReloadDiff(
            added=added,
            removed=removed,
            changed=changed,
            unchanged=unchanged,
            restarted=restarted,
            drained_first=drained_first,
            failed=failed,
        )

    def _make(self, model: ModelConfig, config: GatewayConfig) -> Runner:
        return make_runner(
            model, config, self._platform, self.path.parent, self._budget, self._meter
        )

    def _switch(
        self, config: GatewayConfig, runners: dict[str, Runner], declared: dict[str, ModelConfig]
    ) -> None:
        """Swap the one reference: the generation serves each model as `declared` says."""
        models = [declared[m.id] for m in config.models]
        self.registry.current = Generation(msgspec.structs.replace(config, models=models), runners)

    async def _fits_beside(self, new: Runner, previous: Runner) -> bool:
        """Whether `new` can load while `previous` (the runner it replaces) stays resident."""
        try:
            needed = await asyncio.to_thread(new.engine.estimate_memory)
        except Exception:  # an unreadable source: the load itself reports it
            return True
        if previous.state is EngineState.READY:
            needed = max(needed, previous.memory_bytes)  # weights and KV as really loaded
        return self._budget.could_fit(needed, beside=previous)

    async def _restore(
        self,
        model_id: str,
        old: Generation,
        runners: dict[str, Runner],
        declared: dict[str, ModelConfig],
    ) -> str:
        """After a drained-first model failed: load its previous settings again."""
        previous = old.models[model_id]
        runner = self._make(previous, old.config)
        await runner.start()
        if previous.pinned and runner.state is not EngineState.READY:
            await runner.stop("failed")
            return f"; its previous settings failed too: {runner.error}"
        failed_runner = runners[model_id]
        runners[model_id], declared[model_id] = runner, previous
        self._switch(self.registry.current.config, runners, declared)
        self._drain(failed_runner.stop("failed"))
        return "; the previous settings were loaded again and serve it"

    def _drain(self, work, name: str = "reload: drain") -> None:
        self._draining.spawn(work, name)

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


async def _then(work, after) -> None:
    """Await `work`, then call `after` (also when `work` failed)."""
    try:
        await work
    finally:
        after()


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
