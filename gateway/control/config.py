"""Load `models.yaml`: YAML with positions → env interpolation → defaults merged under
each model → field-by-field validation → cross-field checks → `GatewayConfig`.

Every problem found is reported at once, each as `file:line:column: key.path: message`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args

import msgspec

from engines.errors import ConfigInvalid, SourceError
from engines.sources.hub import NotCached, cache_status, is_hub_source
from gateway.control.adapter_check import check_adapters
from gateway.control.field_check import check_value, report_error, unknown_key
from gateway.control.mcp_check import check_mcp_servers, check_tools_from
from gateway.control.references import check_references, resolve_drafts
from gateway.control.steering_check import check_steering
from gateway.control.yaml_source import KeyPath, Source, read_yaml
from schemas.config import (
    GatewayConfig,
    McpServerConfig,
    ModelConfig,
    ModelSettings,
    ServerConfig,
    Task,
)
from schemas.config_keys import ENGINES, LOCAL, MODEL_KEYS


def load_config(
    path: str | Path, *, environ: Mapping[str, str] | None = None, read_files: bool = False
) -> GatewayConfig:
    """Read and validate a config file; raise `ConfigInvalid` listing every problem found.
    `read_files`: each adapter's directory is read too (`adapters:`), where it is written."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigInvalid([f"{path}:1:1: <file>: cannot read: {exc}"]) from None
    base_dir = Path(path).parent if read_files else None
    return parse_config(text, str(path), environ=environ, adapters_dir=base_dir)


def validate_config(path: str | Path) -> GatewayConfig:
    """What `gateway check` and every reload apply: the file, then every model's source
    (missing, unreadable or corrupt), found without loading anything. Blocking: it reads
    files (a safetensors header can be 100 MB), so async callers run it in a thread."""
    config = load_config(path, read_files=True)
    if errors := source_errors(config, Path(path).parent):
        raise ConfigInvalid(errors)
    return config


def source_errors(config: GatewayConfig, base_dir: Path) -> list[str]:
    """Every model source that is missing or unreadable, found without loading anything.

    An `hf:` source not in the cache yet is no error: its runner downloads it at load."""
    from engines.sources.resolve import check_source

    errors = []
    for model in config.models:
        if model.source is None:
            continue
        try:
            check_source(model.id, model.source, base_dir=base_dir)
        except NotCached:
            continue
        except SourceError as error:
            errors.append(f"models[{model.id}].source: {error.message}")
    return errors


def parse_config(
    text: str,
    name: str,
    *,
    environ: Mapping[str, str] | None = None,
    adapters_dir: Path | None = None,
) -> GatewayConfig:
    """Validate config text; `name` prefixes every error. `environ` defaults to `os.environ`.
    `adapters_dir`: the adapters' directories are read, relative ones from there."""
    doc, src = read_yaml(text, name, os.environ if environ is None else environ)
    config = _validate(doc, src, adapters_dir)
    if src.errors:
        raise ConfigInvalid(src.sorted_errors())
    return config


def summarize(config: GatewayConfig) -> list[str]:
    """One line per model: id, engine, source, aliases, residency, context, concurrency."""
    width = max(len(m.id) for m in config.models)
    lines = []
    for m in config.models:
        residency = "pinned" if m.pinned else f"on_demand(idle_ttl={m.residency.idle_ttl})"
        parts = [
            f"{m.id:<{width}}",
            f"engine={m.engine}",
            _where(m),
            f"aliases={','.join(m.aliases) or '-'}",
            f"residency={residency}",
            f"context={m.context.max}",
            f"concurrency={m.concurrency}",
        ]
        if m.task:
            parts.append(f"task={m.task}")
        if m.draft:
            parts.append(f"draft={m.draft.model}")
        if m.adapters:
            ids = (f"{a.id}(steered)" if a.steering else a.id for a in m.adapters)
            parts.append(f"adapters={','.join(ids)}")
        if m.steering:
            parts.append(f"steering={m.steering.vector}")
        if m.tools_from:
            run = "run" if m.run_tools else "returned"  # who makes the calls (docs/mcp.md)
            parts.append(f"tools_from={','.join(m.tools_from)} ({run})")
        if m.distributed:
            d = m.distributed
            parts.append(f"distributed={d.ranks} ranks, {d.mode}, {d.backend}")
        if m.vision.max_pixels or m.vision.min_pixels:
            pixels = f"{m.vision.min_pixels or 'checkpoint'}..{m.vision.max_pixels or 'checkpoint'}"
            parts.append(f"vision_pixels={pixels}")
        if is_hub_source(m.source):  # from the cache alone: check never touches the network
            parts.append(cache_status(m.id, m.source))
        lines.append("  ".join(parts))
    for server in config.mcp_servers:
        # How it is reached, never its env or headers (they hold tokens).
        reached = (
            f"stdio {server.command}" if server.command else f"{server.transport} {server.url}"
        )
        lines.append(f"mcp server {server.name}: {reached}  timeout={server.timeout}")
    return lines


def _where(model: ModelConfig) -> str:
    """Where a model's answers come from: its source, its replicas, or its server program."""
    if model.upstream:
        return f"replicas={','.join(model.upstream.urls)}"
    if model.process:
        return f"command={model.process.command[0]}"
    return f"source={model.source or '-'}"


def _validate(doc: Any, src: Source, adapters_dir: Path | None) -> GatewayConfig | None:
    if not isinstance(doc, dict):
        src.at((), "expected a mapping with 'server', 'defaults' and 'models'")
        return None
    for key in doc.keys() - set(TOP_LEVEL):
        src.at((key,), unknown_key(key, TOP_LEVEL), key=True)
    # An empty section (every line commented out) reads as null: take it as `{}`.
    server = {} if doc.get("server") is None else doc["server"]
    defaults = {} if doc.get("defaults") is None else doc["defaults"]
    check_value(server, ServerConfig, ("server",), src)
    check_value(defaults, ModelSettings, ("defaults",), src)
    mcp_servers = [] if doc.get("mcp_servers") is None else doc["mcp_servers"]
    check_value(mcp_servers, list[McpServerConfig], ("mcp_servers",), src)
    check_mcp_servers(mcp_servers, server, src)
    models = doc.get("models")
    if not isinstance(models, list) or not models:
        message = "a list of at least one model" if "models" in doc else "missing required key"
        src.at(("models",), message, key=True)
        return None
    merged = []
    for i, model in enumerate(models):
        if isinstance(model, dict) and isinstance(defaults, dict):
            model = _merge_under(_defaults_for(defaults, model), model, ("models", i), src)
            _check_keys(model, ("models", i), src)
            _check_sections(model, ("models", i), src)
            _remote_concurrency(model)
        merged.append(model)
        check_value(model, ModelConfig, ("models", i), src)
    check_references(server, merged, src)
    check_tools_from(mcp_servers, merged, src)
    if not src.errors:  # adapters' directories are read only in a config otherwise valid
        offline = isinstance(server, dict) and server.get("offline") is True
        check_adapters(merged, src, adapters_dir, offline)
        check_steering(merged, src, adapters_dir)
    if src.errors:
        return None
    resolve_drafts(merged)
    doc = {**doc, "server": server, "defaults": defaults, "models": merged}
    doc["mcp_servers"] = mcp_servers
    try:
        # Values read from the environment are strings: let "8080" become a port.
        return msgspec.convert(doc, GatewayConfig, strict=not src.env)
    except msgspec.ValidationError as exc:  # the checks above should have caught it
        report_error(exc, (), GatewayConfig, src)
        return None


TOP_LEVEL = ["server", "defaults", "models", "mcp_servers"]
# A remote engine -> its own section: the key that engine alone takes, and must set.
REMOTE = {
    engine: key
    for key, rule in MODEL_KEYS.items()
    if rule.required_by == rule.engines
    for engine in rule.engines
}
# The tasks a model may declare (`task:`); a vision model is found only at load.
DECLARED_TASKS = frozenset(get_args(Task))
UNSET = {f.name: f.default for f in msgspec.structs.fields(ModelConfig)}  # each key's default


def _engine_of(model: dict, defaults: dict) -> str | None:
    """The model's engine; None when it names none we know (the struct check says so)."""
    engine = model.get("engine", defaults.get("engine", "mlx"))
    return engine if isinstance(engine, str) and engine in ENGINES else None


def _task_of(model: dict, defaults: dict) -> str | None:
    """The task the model declares; None when it declares none (or none we know)."""
    task = model.get("task", defaults.get("task"))
    return task if isinstance(task, str) and task in DECLARED_TASKS else None


def _defaults_for(defaults: dict, model: dict) -> dict:
    """`defaults:` as they apply to `model`: the keys `MODEL_KEYS` gives its engine and its
    declared task."""
    engine, task = _engine_of(model, defaults), _task_of(model, defaults)

    def given(key: str) -> bool:
        rule = MODEL_KEYS.get(key)
        return (
            rule is None
            or (engine is None or engine in rule.from_defaults)
            and (task is None or task in rule.tasks)
        )

    return {key: value for key, value in defaults.items() if given(key)}


def _is_set(model: dict, key: str) -> bool:
    """Whether the model sets `key` to something other than its default (null included)."""
    return model.get(key) is not None and model.get(key) != UNSET.get(key)


def _check_keys(model: dict, path: KeyPath, src: Source) -> None:
    """What `MODEL_KEYS` says of the keys a model sets: those its engine requires are there;
    each applies to the model's engine and its declared task, and none is set beside a key it
    conflicts with. Each error names the
    key (a section by what it holds, as the struct checks do)."""
    engine, task, mid = _engine_of(model, {}), _task_of(model, {}), model.get("id")
    for key, rule in MODEL_KEYS.items():
        if engine in rule.required_by and not model.get(key):
            what = f"a {key!r} section" if key in REMOTE.values() else f"a {key}"
            src.at((*path, key), f"model {mid!r}: engine {engine!r} needs {what}")
    for key in model:
        rule = MODEL_KEYS.get(key)
        if rule is None:
            continue
        if engine is not None and engine not in rule.engines:
            if engine in REMOTE and rule.engines <= LOCAL:
                message = (
                    f"{key!r} does not apply to engine {engine!r} (the server it reaches holds "
                    "the weights, the window and the tool parser)"
                )
            else:
                names = " or ".join(map(repr, sorted(rule.engines)))
                message = f"{key!r} applies to engine {names} only"
            # An engine's section is pointed at by what it holds, as the struct checks do.
            src.at((*path, key), f"model {mid!r}: {message}", key=key not in REMOTE.values())
        if not _is_set(model, key):
            continue
        section = isinstance(model[key], dict)
        if task is not None and task not in rule.tasks:
            src.at((*path, key), f"model {mid!r}: {rule.why_task}", key=not section)
        for other, why in rule.conflicts.items():
            if _is_set(model, other):
                src.at((*path, key), f"model {mid!r}: {why}", key=not section)


def _check_sections(model: dict, path: KeyPath, src: Source) -> None:
    """Within a model's own sections: a process's command names its port, a `distributed:`
    block names one host per rank (or none: all on this machine)."""
    engine, mid = _engine_of(model, {}), model.get("id")
    section = model.get("process")
    if engine == "process" and isinstance(section, dict):
        texts = [*(section.get("command") or []), *(section.get("env") or {}).values()]
        if not any(isinstance(t, str) and "${PORT}" in t for t in texts):
            src.at(
                (*path, "process", "command"),
                f"model {mid!r}: the command (or env) must say ${{PORT}}, the port it is to "
                "serve on (the gateway picks a free one at each start)",
            )
    block = model.get("distributed")
    if isinstance(block, dict):
        ranks, hosts = block.get("ranks"), block.get("hosts")
        if isinstance(ranks, int) and isinstance(hosts, list) and hosts and len(hosts) != ranks:
            src.at(
                (*path, "distributed", "hosts"),
                f"model {mid!r}: {len(hosts)} hosts for {ranks} ranks (one host per rank, "
                "rank 0's first; leave hosts out to run every rank on this machine)",
            )


def _remote_concurrency(model: dict) -> None:
    """A remote model that sets no `concurrency` (`defaults:` give it none), or `auto`, admits
    as many requests at once as its replicas take: urls x max_in_flight (a process is one)."""
    engine = _engine_of(model, {})
    section = model.get(REMOTE[engine]) if engine in REMOTE else None
    if model.get("concurrency", "auto") == "auto" and isinstance(section, dict):
        urls = section.get("urls", [None]) if engine == "upstream" else [None]
        per_replica = section.get("max_in_flight", 4)
        if isinstance(urls, list) and urls and isinstance(per_replica, int) and per_replica > 0:
            model["concurrency"] = len(urls) * per_replica


def _merge_under(defaults: dict, model: dict, path: KeyPath, src: Source) -> dict:
    """Deep-merge `defaults` under `model` (model values win); remember what came from where."""
    out = dict(model)
    for key, value in defaults.items():
        rel = (*path[2:], key)
        if key not in model:
            out[key] = value
            src.origin[(*path, key)] = ("defaults", *rel)
        elif isinstance(value, dict) and isinstance(model[key], dict):
            out[key] = _merge_under(value, model[key], (*path, key), src)
    return out
