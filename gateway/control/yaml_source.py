"""YAML with positions: every key and value keeps its line and column, `${ENV}` resolved.

The loader (`gateway/control/config.py`) validates what this reads and reports each problem at
the place it was written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from engines.errors import ConfigInvalid

KeyPath = tuple[str | int, ...]

# `${PORT}` in a process model's `command` and `env` is left for the engine to fill in.
LATE_PORT = "PORT"


def _starts_a_process(path: tuple) -> bool:
    return any(
        part == "process" and path[i + 1 : i + 2] in (("command",), ("env",))
        for i, part in enumerate(path)
    )


ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# In a flow sequence `[${KEY}]` YAML reads `{` as the start of a mapping, so before parsing
# the braces of each reference become private-use characters of the same width (columns
# stay right) and come back once a scalar is read.
_MASK = str.maketrans("{}", "\ue000\ue001")
_UNMASK = str.maketrans("\ue000\ue001", "{}")
_MAX_NODES = 100_000  # alias expansion ("billion laughs") stops here
_MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass
class Source:
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


class Walker:
    """Turns the composed node tree into plain values, noting each position in `src`."""

    def __init__(self, src: Source) -> None:
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
            if name == LATE_PORT and _starts_a_process(path):
                return match.group(0)  # the port the process engine picks at each start
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


def read_yaml(text: str, name: str, environ: Mapping[str, str]) -> tuple[Any, Source]:
    """YAML text → plain values, with every position noted; syntax errors raise at once."""
    src = Source(name, environ)
    masked = ENV_REF.sub(lambda m: m.group(0).translate(_MASK), text)
    try:
        node = yaml.compose(masked, Loader=yaml.SafeLoader)
        if node is None:
            raise ConfigInvalid([f"{name}:1:1: <root>: empty; expected a mapping with 'models'"])
        return Walker(src).walk(node, ()), src
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{mark.line + 1}:{mark.column + 1}" if mark else "1:1"
        problem = exc.problem + (f" ({exc.context})" if exc.context else "")
        raise ConfigInvalid([f"{name}:{where}: <yaml>: {problem}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigInvalid([f"{name}:1:1: <yaml>: {exc}"]) from None
    except RecursionError:  # also a recursive alias, `&a [*a]`
        raise ConfigInvalid([f"{name}:1:1: <root>: nesting too deep"]) from None
