"""Load `models.yaml`: YAML with positions → env interpolation → defaults merged under
each model → field-by-field validation → cross-field checks → `GatewayConfig`.

Every problem found is reported at once, each as `file:line:column: key.path: message`.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args

import msgspec

from engines.errors import ConfigInvalid, SourceError
from engines.sources.hub import NotCached, cache_status, is_hub_source
from gateway.control.yaml_source import KeyPath, Source, read_yaml
from schemas.config import (
    ENGINES,
    LOCAL,
    MODEL_KEYS,
    GatewayConfig,
    ModelConfig,
    ModelSettings,
    ServerConfig,
    Task,
)


def load_config(path: str | Path, *, environ: Mapping[str, str] | None = None) -> GatewayConfig:
    """Read and validate a config file; raise `ConfigInvalid` listing every problem found."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigInvalid([f"{path}:1:1: <file>: cannot read: {exc}"]) from None
    return parse_config(text, str(path), environ=environ)


def validate_config(path: str | Path) -> GatewayConfig:
    """What `gateway check` and every reload apply: the file, then every model's source
    (missing, unreadable or corrupt), found without loading anything. Blocking: it reads
    files (a safetensors header can be 100 MB), so async callers run it in a thread."""
    config = load_config(path)
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
    text: str, name: str, *, environ: Mapping[str, str] | None = None
) -> GatewayConfig:
    """Validate config text; `name` prefixes every error. `environ` defaults to `os.environ`."""
    doc, src = read_yaml(text, name, os.environ if environ is None else environ)
    config = _validate(doc, src)
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
        if m.distributed:
            d = m.distributed
            parts.append(f"distributed={d.ranks} ranks, {d.mode}, {d.backend}")
        if m.vision.max_pixels or m.vision.min_pixels:
            pixels = f"{m.vision.min_pixels or 'checkpoint'}..{m.vision.max_pixels or 'checkpoint'}"
            parts.append(f"vision_pixels={pixels}")
        if is_hub_source(m.source):  # from the cache alone: check never touches the network
            parts.append(cache_status(m.id, m.source))
        lines.append("  ".join(parts))
    return lines


def _where(model: ModelConfig) -> str:
    """Where a model's answers come from: its source, its replicas, or its server program."""
    if model.upstream:
        return f"replicas={','.join(model.upstream.urls)}"
    if model.process:
        return f"command={model.process.command[0]}"
    return f"source={model.source or '-'}"


def _validate(doc: Any, src: Source) -> GatewayConfig | None:
    if not isinstance(doc, dict):
        src.at((), "expected a mapping with 'server', 'defaults' and 'models'")
        return None
    for key in doc.keys() - {"server", "defaults", "models"}:
        src.at((key,), _unknown(key, ["server", "defaults", "models"]), key=True)
    # An empty section (every line commented out) reads as null: take it as `{}`.
    server = {} if doc.get("server") is None else doc["server"]
    defaults = {} if doc.get("defaults") is None else doc["defaults"]
    _check(server, ServerConfig, ("server",), src)
    _check(defaults, ModelSettings, ("defaults",), src)
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
        _check(model, ModelConfig, ("models", i), src)
    _check_references(server, merged, src)
    if src.errors:
        return None
    doc = {**doc, "server": server, "defaults": defaults, "models": merged}
    try:
        # Values read from the environment are strings: let "8080" become a port.
        return msgspec.convert(doc, GatewayConfig, strict=not src.env)
    except msgspec.ValidationError as exc:  # the checks above should have caught it
        _report(exc, (), GatewayConfig, src)
        return None


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
    """A remote model that sets no `concurrency` (`defaults:` give it none) admits as many
    requests at once as its replicas take: urls x max_in_flight (a process is one)."""
    engine = _engine_of(model, {})
    section = model.get(REMOTE[engine]) if engine in REMOTE else None
    if "concurrency" not in model and isinstance(section, dict):
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


def _check(value: Any, tp: Any, path: KeyPath, src: Source) -> None:
    """Report every problem in `value` as a `tp`, going into Structs so each bad key is named."""
    if isinstance(value, list) and typing.get_origin(tp) is list:
        (item,) = typing.get_args(tp)
        if _struct_in(item) is not None:  # a list of Structs (api_keys): each entry's keys
            for i, entry in enumerate(value):
                _check(entry, item, (*path, i), src)
            return
    struct = _struct_in(tp) if isinstance(value, dict) else None
    if struct is None:
        try:
            msgspec.convert(value, tp, strict=not src.from_env(path))
        except msgspec.ValidationError as exc:
            _report(exc, path, tp, src)
        return
    fields = {f.encode_name: f for f in msgspec.structs.fields(struct)}
    for key in value:
        if key not in fields:
            src.at((*path, key), _unknown(key, fields), key=True)
    for name, info in fields.items():
        if name in value:
            _check(value[name], info.type, (*path, name), src)
        elif info.required:
            src.at(path, f"missing required key {name!r}")


def _check_references(server: Any, models: list[Any], src: Source) -> None:
    """Ids and aliases unique; fallback, draft and key entries name a model."""
    owner: dict[str, tuple[str, KeyPath]] = {}  # id or alias -> (model id, where)
    for i, model in enumerate(models):
        mid = model.get("id") if isinstance(model, dict) else None
        if not isinstance(mid, str):
            continue
        if mid in owner:
            line = src.values[src.source_of(owner[mid][1])].line + 1
            src.at(("models", i, "id"), f"duplicate model id {mid!r} (first at line {line})")
        owner.setdefault(mid, (mid, ("models", i, "id")))
    ids = set(owner)
    for i, model in enumerate(models):
        mid = model.get("id") if isinstance(model, dict) else None
        if not isinstance(mid, str):
            continue
        aliases = model.get("aliases")
        for j, alias in enumerate(aliases if isinstance(aliases, list) else []):
            if not isinstance(alias, str):
                continue
            where = ("models", i, "aliases", j)
            if alias == mid:
                src.at(where, f"model {mid!r}: alias {alias!r} is the model's own id")
            elif alias in ids:
                src.at(where, f"model {mid!r}: alias {alias!r} is the id of another model")
            elif alias in owner:
                other = owner[alias][0]
                what = "listed twice" if other == mid else f"already an alias of model {other!r}"
                src.at(where, f"model {mid!r}: alias {alias!r} is {what}")
            else:
                owner[alias] = (mid, where)
        vision = model.get("vision")
        if isinstance(vision, dict):
            low, high = vision.get("min_pixels"), vision.get("max_pixels")
            if isinstance(low, int) and isinstance(high, int) and low > high:
                src.at(
                    ("models", i, "vision", "min_pixels"),
                    f"model {mid!r}: min_pixels {low} is more than max_pixels {high}",
                )
    for i, model in enumerate(models):
        draft = model.get("draft") if isinstance(model, dict) else None
        target = draft.get("model") if isinstance(draft, dict) else None
        if isinstance(target, str) and isinstance(mid := model.get("id"), str):
            where = ("models", i, "draft", "model")
            if target not in owner:
                src.at(where, f"model {mid!r}: draft model {target!r} names no model")
            elif owner[target][0] == mid:
                src.at(where, f"model {mid!r}: draft model {target!r} is the model itself")
    fallback = server.get("fallback") if isinstance(server, dict) else None
    if isinstance(fallback, str) and fallback not in owner:
        known = ", ".join(sorted(owner)) or "none"
        src.at(("server", "fallback"), f"{fallback!r} names no model id or alias (known: {known})")
    keys = server.get("api_keys") if isinstance(server, dict) else None
    for i, entry in enumerate(keys if isinstance(keys, list) else []):
        names = entry.get("models") if isinstance(entry, dict) else None
        for j, name in enumerate(names if isinstance(names, list) else []):
            if isinstance(name, str) and name not in owner:
                known = ", ".join(sorted(owner)) or "none"
                where = ("server", "api_keys", i, "models", j)
                src.at(where, f"{name!r} names no model id or alias (known: {known})")
    _check_key_entries(keys if isinstance(keys, list) else [], src)
    allow = server.get("fetch_images_allow") if isinstance(server, dict) else None
    for i, network in enumerate(allow if isinstance(allow, list) else []):
        try:
            ipaddress.ip_network(network, strict=False)
        except (TypeError, ValueError):
            src.at(("server", "fetch_images_allow", i), f"{network!r} is not an IP network")


def _check_key_entries(keys: list[Any], src: Source) -> None:
    """Labels unique (events and metrics name keys by them); a default priority within the
    key's ceiling."""
    seen: dict[str, int] = {}
    for i, entry in enumerate(keys):
        if not isinstance(entry, dict):
            continue
        label = entry.get("label")
        if isinstance(label, str):
            if label in seen:
                src.at(
                    ("server", "api_keys", i, "label"),
                    f"duplicate key label {label!r} (also api_keys[{seen[label]}])",
                )
            seen.setdefault(label, i)
        priority = entry.get("priority")
        if isinstance(priority, dict):
            default, ceiling = priority.get("default", 0), priority.get("max", 0)
            if isinstance(default, int) and isinstance(ceiling, int) and default > ceiling:
                src.at(
                    ("server", "api_keys", i, "priority", "default"),
                    f"priority.default {default} is above priority.max {ceiling}",
                )


def _struct_in(tp: Any) -> type[msgspec.Struct] | None:
    """The one Struct type that a mapping given for `tp` must be, if any."""
    if typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return tp
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        structs = [s for s in map(_struct_in, typing.get_args(tp)) if s is not None]
        return structs[0] if len(structs) == 1 else None
    return None


def _report(exc: msgspec.ValidationError, path: KeyPath, tp: Any, src: Source) -> None:
    """Turn msgspec's "message - at `$.a[0]`" into an error at the exact key path."""
    message, _, where = str(exc).partition(" - at `")
    for name, index in re.findall(r"\.([^.\[`]+)|\[(\d+)\]", where):
        path = (*path, name or int(index))
    if message.startswith("Invalid enum value") and (choices := _literals(tp)):
        message += f" (expected one of: {', '.join(map(repr, choices))})"
    elif message.startswith("Expected `str`") and (hint := _description(tp)):
        got = re.search(r", got `\w+`", message)
        hint = hint[0].lower() + hint[1:].rstrip(".")
        message = f"expected {hint}" + (got.group(0) if got else "")
    src.at(path, message)


def _literals(tp: Any) -> list[Any]:
    if typing.get_origin(tp) is typing.Literal:
        return list(typing.get_args(tp))
    return [v for arg in typing.get_args(tp) for v in _literals(arg)]


def _description(tp: Any) -> str | None:
    for arg in typing.get_args(tp):
        if isinstance(arg, msgspec.Meta) and arg.pattern and arg.description:
            return arg.description
        if hint := _description(arg):
            return hint
    return None


def _unknown(key: str, known: typing.Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(known), n=1)
    return f"unknown key {key!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
