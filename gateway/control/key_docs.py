"""The config reference's table of model keys, generated from `MODEL_KEYS` (`gateway docs`).

One row per entry of the keys' words (docs/model-keys.yaml, read by `key_text`), in
`MODEL_KEYS`' order, after `id`. The columns: the key, its default (read from `ModelConfig`
unless the row says it in words), one column per field of `KeyRule` (each field's own
cell renderer in `CELLS`; a field without one gets a plain rendering under its own name,
so a rule that learns something new shows it at once), then what the key does.
`docs/config.md` holds the table between `BEGIN` and `END`; `gateway docs --check` fails
when it differs from what this renders, and a test runs that check.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from gateway.control.key_text import KeyRow, key_text
from schemas.config import ModelConfig
from schemas.config_keys import ENGINES, MODEL_KEYS, TASKS, KeyRule

DOCS_PATH = Path(__file__).resolve().parents[2] / "docs" / "config.md"
BEGIN = "<!-- model-keys:begin -->"
END = "<!-- model-keys:end -->"


def _names(values: frozenset[str]) -> str:
    return "all" if values == ENGINES else ", ".join(f"`{v}`" for v in sorted(values))


def _engines(rule: KeyRule) -> str:
    cell = _names(rule.engines)
    if rule.from_defaults != rule.engines:
        cell += f" (from `defaults:`: {_names(rule.from_defaults)})"
    return cell


def _tasks(rule: KeyRule) -> str:
    return "all" if rule.tasks == set(TASKS) else ", ".join(f"`{t}`" for t in sorted(rule.tasks))


# A field's header and cell; `defaults_to` is told in the engines' cell, and `why_task` (an
# error's words) in none.
CELLS: dict[str, tuple[str, Callable[[KeyRule], str]] | None] = {
    "engines": ("engines", _engines),
    "restart": ("on reload", lambda rule: "new runner" if rule.restart else "in place"),
    "defaults_to": None,
    "tasks": ("tasks", _tasks),
    "why_task": None,
    "conflicts": ("conflicts with", lambda rule: ", ".join(f"`{k}`" for k in rule.conflicts)),
}


def _plain(value: Any) -> str:
    """A field no renderer knows: sets as names, flags as yes/no, nothing as nothing."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (frozenset, set)):
        return _names(frozenset(value))
    if isinstance(value, (list, tuple)):
        return ", ".join(f"`{v}`" for v in value)
    return f"`{value}`"


def _columns() -> list[tuple[str, Callable[[KeyRule], str]]]:
    columns = []
    for field in KeyRule._fields:
        if field not in CELLS:
            columns.append(
                (field.replace("_", " "), lambda rule, f=field: _plain(getattr(rule, f)))
            )
        elif (column := CELLS[field]) is not None:
            columns.append(column)
    return columns


def _default(keys: str) -> str:
    """`ModelConfig`'s default for a key or dotted sub-key, as the reference writes it."""
    first, *rest = keys.split(".")
    field = next(f for f in msgspec.structs.fields(ModelConfig) if f.name == first)
    value = field.default_factory() if field.default is msgspec.NODEFAULT else field.default
    for part in rest:
        value = getattr(value, part)
    if value is None:
        return "none"
    if isinstance(value, msgspec.Struct):
        raise ValueError(f"{keys}: a section; say its default in words in docs/model-keys.yaml")
    if isinstance(value, (bool, list)):
        return f"`{msgspec.json.encode(value).decode()}`"
    return f"`{value}`"


def _row(row: KeyRow, rule: KeyRule | None, columns: list) -> str:
    keys = ", ".join(f"`{k}`" for k in row.keys.split(", "))
    default = row.default if row.default is not None else _default(row.keys)
    rule_cells = [cell(rule) if rule else "" for _, cell in columns]
    return "| " + " | ".join([keys, default, *rule_cells, row.text]) + " |"


def render_model_keys() -> str:
    """The Markdown table of every model key, as docs/config.md holds it."""
    text = key_text()
    if missing := set(MODEL_KEYS) ^ (set(text) - {"id"}):
        raise ValueError(f"MODEL_KEYS and docs/model-keys.yaml differ in {sorted(missing)}")
    columns = _columns()
    lines = [
        "| " + " | ".join(["key", "default", *(header for header, _ in columns)]) + " | |",
        "| " + " | ".join(["---"] * (len(columns) + 3)) + " |",
        *(_row(row, None, columns) for row in text["id"]),
    ]
    for key, rule in MODEL_KEYS.items():
        lines += [_row(row, rule, columns) for row in text[key]]
    return "\n".join(lines) + "\n"


def splice(text: str, table: str) -> str:
    """`text` with what lies between the markers replaced by `table`."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the markers {BEGIN!r} and {END!r} are missing")
    return text[: start + len(BEGIN)] + "\n" + table + text[end:]


def is_current(path: Path = DOCS_PATH) -> bool:
    """Whether the table in `path` is what `MODEL_KEYS` renders."""
    text = path.read_text(encoding="utf-8")
    return splice(text, render_model_keys()) == text


def write_docs(path: Path = DOCS_PATH) -> bool:
    """Rewrite the table in `path`; whether anything changed."""
    text = path.read_text(encoding="utf-8")
    new = splice(text, render_model_keys())
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text
