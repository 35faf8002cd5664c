"""Load `models.yaml`: YAML with positions → env interpolation → defaults merged under
each model → field-by-field validation → cross-field checks → `GatewayConfig`.

Every problem found is reported at once, each as `file:line:column: key.path: message`.
"""

from __future__ import annotations

import difflib
import os
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from engines.errors import ConfigInvalid
from schemas.config import GatewayConfig, ModelConfig, ModelSettings, ServerConfig

KeyPath = tuple[str | int, ...]

ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# In a flow sequence `[${KEY}]` YAML reads `{` as the start of a mapping, so before parsing
# the braces of each reference become private-use characters of the same width (columns
# stay right) and come back once a scalar is read.
_MASK = str.maketrans("{}", "\ue000\ue001")
_UNMASK = str.maketrans("\ue000\ue001", "{}")
_MAX_NODES = 100_000  # alias expansion ("billion laughs") stops here
_MERGE_TAG = "tag:yaml.org,2002:merge"


def load_config(path: str | Path, *, environ: Mapping[str, str] | None = None) -> GatewayConfig:
    """Read and validate a config file; raise `ConfigInvalid` listing every problem found."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigInvalid([f"{path}:1:1: <file>: cannot read: {exc}"]) from None
    return parse_config(text, str(path), environ=environ)


def parse_config(
    text: str, name: str, *, environ: Mapping[str, str] | None = None
) -> GatewayConfig:
    """Validate config text; `name` prefixes every error. `environ` defaults to `os.environ`."""
    src = _Source(name, os.environ if environ is None else environ)
    masked = ENV_REF.sub(lambda m: m.group(0).translate(_MASK), text)
    try:
        node = yaml.compose(masked, Loader=yaml.SafeLoader)
        if node is None:
            raise ConfigInvalid([f"{name}:1:1: <root>: empty; expected a mapping with 'models'"])
        doc = _Walker(src).walk(node, ())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{mark.line + 1}:{mark.column + 1}" if mark else "1:1"
        problem = exc.problem + (f" ({exc.context})" if exc.context else "")
        raise ConfigInvalid([f"{name}:{where}: <yaml>: {problem}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigInvalid([f"{name}:1:1: <yaml>: {exc}"]) from None
    except RecursionError:  # also a recursive alias, `&a [*a]`
        raise ConfigInvalid([f"{name}:1:1: <root>: nesting too deep"]) from None
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
            f"source={m.source or '-'}",
            f"aliases={','.join(m.aliases) or '-'}",
            f"residency={residency}",
            f"context={m.context.max}",
            f"concurrency={m.concurrency}",
        ]
        if m.task:
            parts.append(f"task={m.task}")
        if m.draft:
            parts.append(f"draft={m.draft.model}")
        lines.append("  ".join(parts))
    return lines


@dataclass
class _Source:
    """Where each key and value was written, what came from the environment, what went wrong."""

    name: str
    environ: Mapping[str, str]
    values: dict[KeyPath, yaml.Mark] = field(default_factory=dict)
    keys: dict[KeyPath, yaml.Mark] = field(default_factory=dict)
    env: set[KeyPath] = field(default_factory=set)
    secrets: set[str] = field(default_factory=set)
    # models[i].<rel> -> defaults.<rel> for values that were merged in from `defaults:`
    origin: dict[KeyPath, KeyPath] = field(default_factory=dict)
    errors: list[tuple[int, int, str]] = field(default_factory=list)

    def source_of(self, path: KeyPath) -> KeyPath:
        for n in range(len(path), 2, -1):
            if path[:n] in self.origin:
                return self.origin[path[:n]] + path[n:]
        return path

    def from_env(self, path: KeyPath) -> bool:
        path = self.source_of(path)
        return any(p[: len(path)] == path or path[: len(p)] == p for p in self.env)

    def at(
        self, path: KeyPath, message: str, *, key: bool = False, mark: yaml.Mark | None = None
    ) -> None:
        """Record an error at `mark`, else the key (or value) written at `path` or a parent's."""
        path = self.source_of(path)
        if mark is None and key:
            mark = self.keys.get(path)
        for n in range(len(path), -1, -1):
            if mark is None:
                mark = self.values.get(path[:n])
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        # Values read from the environment may be secrets: never echo one back.
        for secret in sorted(self.secrets, key=len, reverse=True):
            message = message.replace(secret if len(secret) >= 3 else repr(secret), "***")
        text = f"{self.name}:{line}:{column}: {dotted(path)}: {message}"
        self.errors.append((line, column, text))

    def sorted_errors(self) -> list[str]:
        # Sorted by position; a bad value in `defaults:` is found once per model, reported once.
        return list(dict.fromkeys(text for *_, text in sorted(self.errors)))


def dotted(path: KeyPath) -> str:
    """`("models", 0, "residency")` → `models[0].residency`."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else part
    return out or "<root>"


class _Walker:
    """Turns the composed node tree into plain values, noting each position in `src`."""

    def __init__(self, src: _Source) -> None:
        self.src = src
        self.constructor = yaml.constructor.SafeConstructor()
        self.count = 0

    def walk(self, node: Node, path: KeyPath) -> Any:
        self.count += 1
        if self.count > _MAX_NODES:
            raise ConfigInvalid([f"{self.src.name}:1:1: <root>: too many nodes (alias expansion?)"])
        self.src.values[path] = node.start_mark
        if isinstance(node, SequenceNode):
            return self.sequence(node, path)
        if isinstance(node, MappingNode):
            return self.mapping(node, path)
        value = self.scalar(node, path)
        if isinstance(value, str) and "${" in value:
            return self.interpolate(value, path)
        return value

    def scalar(self, node: ScalarNode, path: KeyPath) -> Any:
        try:
            value = self.constructor.construct_object(node)
        except yaml.YAMLError as exc:
            self.src.at(path, str(getattr(exc, "problem", exc)), mark=node.start_mark)
            return None
        return value.translate(_UNMASK) if isinstance(value, str) else value

    def interpolate(self, text: str, path: KeyPath) -> str | None:
        """Substitute `${VAR}` / `${VAR:-default}`; an unset (or empty) VAR alone means null."""
        self.src.env.add(path)
        missing: list[str] = []

        def lookup(match: re.Match[str]) -> str:
            name, default = match.groups()
            value = self.src.environ.get(name) or None
            if value is not None:
                self.src.secrets.add(value)
                return value
            if default is None:
                missing.append(name)
            return default or ""

        result = ENV_REF.sub(lookup, text)
        if ENV_REF.fullmatch(text) and missing:
            return None
        if "${" in ENV_REF.sub("", text):
            self.src.at(path, "malformed ${...} reference; write ${NAME} or ${NAME:-default}")
        for name in missing:
            self.src.at(path, f"environment variable {name} is not set (or: ${{{name}:-default}})")
        return result

    def sequence(self, node: SequenceNode, path: KeyPath) -> list[Any]:
        items: list[Any] = []
        for child in node.value:
            item_path = (*path, len(items))
            value = self.walk(child, item_path)
            if value is None and item_path in self.src.env:
                self.src.env.discard(item_path)  # `[${KEY}]` with KEY unset: no item
                continue
            items.append(value)
        return items

    def mapping(self, node: MappingNode, path: KeyPath) -> dict[str, Any]:
        out: dict[str, Any] = {}
        # `<<: *anchor` first, so that explicit keys win and their positions are the ones kept.
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                parts = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
                for part in reversed(parts):  # the first mapping listed wins
                    merged = self.walk(part, path)
                    if not isinstance(merged, dict):
                        self.src.at(path, "'<<' takes a mapping or a list of mappings")
                    out.update(merged if isinstance(merged, dict) else {})
                self.src.values[path] = node.start_mark
        explicit: set[str] = set()
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.scalar(key_node, path) if isinstance(key_node, ScalarNode) else None
            mark = key_node.start_mark
            if not isinstance(key, str):
                shown = f"; this one reads as {key!r}" if isinstance(key_node, ScalarNode) else ""
                self.src.at(path, f"mapping keys must be strings{shown}", mark=mark)
                continue
            if key in explicit:
                first = self.src.keys[(*path, key)].line + 1
                message = f"duplicate key {key!r} (first at line {first})"
                self.src.at((*path, key), message, mark=mark)
                continue
            explicit.add(key)
            self.src.keys[(*path, key)] = mark
            out[key] = self.walk(value_node, (*path, key))
        return out


def _validate(doc: Any, src: _Source) -> GatewayConfig | None:
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
            model = _merge_under(defaults, model, ("models", i), src)
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


def _merge_under(defaults: dict, model: dict, path: KeyPath, src: _Source) -> dict:
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


def _check(value: Any, tp: Any, path: KeyPath, src: _Source) -> None:
    """Report every problem in `value` as a `tp`, going into Structs so each bad key is named."""
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


def _check_references(server: Any, models: list[Any], src: _Source) -> None:
    """Ids and aliases unique; fallback and draft name a model; mlx models have a source."""
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
        if model.get("engine", "mlx") == "mlx" and not model.get("source"):
            src.at(("models", i, "source"), f"model {mid!r}: engine 'mlx' needs a source")
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


def _report(exc: msgspec.ValidationError, path: KeyPath, tp: Any, src: _Source) -> None:
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
