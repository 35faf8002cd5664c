"""What each model key means, in the words of the config reference: the rows of
docs/model-keys.yaml (prose kept as data, beside the page it is rendered into), read and
checked when `gateway docs` renders them with `MODEL_KEYS` (`gateway.control.key_docs`)."""

from __future__ import annotations

import functools
from pathlib import Path

import msgspec
import yaml

TEXT_PATH = Path(__file__).resolve().parents[2] / "docs" / "model-keys.yaml"


class KeyRow(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One row of the table: the key or dotted sub-key (several joined by ", "), what it
    does, and its default in words where the struct's own default would not say it."""

    keys: str
    text: str
    default: str | None = None


@functools.cache
def key_text(path: Path = TEXT_PATH) -> dict[str, tuple[KeyRow, ...]]:
    """The rows by key, in the file's order; `id` first (it names the model rather than
    setting it, so it is no entry of `MODEL_KEYS`)."""
    return msgspec.convert(
        yaml.safe_load(path.read_text(encoding="utf-8")), dict[str, tuple[KeyRow, ...]]
    )
