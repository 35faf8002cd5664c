"""`gateway check` on `adapters:` (and every reload): each adapter's id and aliases a name
no model or other adapter has, and its directory one the text engine can read — there,
in mlx-lm's or PEFT's format, its rank and matrices consistent. The shapes against the
base are checked when the base loads (the base's layers are known then); a mismatch is
refused naming the adapter (engines/llm/adapters.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engines.errors import SourceError
from engines.sources.adapter_files import AdapterError, read_adapter
from engines.sources.adapter_hub import cached_adapter
from engines.sources.hub import is_hub_source
from gateway.control.yaml_source import Source


def check_adapters(
    models: list[Any], src: Source, base_dir: Path | None, offline: bool = False
) -> None:
    """Each error at its adapter's `id`, `aliases` entry or `path`, as `file:line:col`;
    the directories are read only given `base_dir` (`gateway check`, a reload).
    `offline` (server.offline): an `hf:` adapter must be in the cache already."""
    taken: dict[str, str] = {}  # every model id and alias -> what it is
    for model in models:
        if not isinstance(model, dict) or not isinstance(model.get("id"), str):
            continue
        names = [model["id"], *(a for a in model.get("aliases") or [] if isinstance(a, str))]
        for name in names:
            taken.setdefault(name, f"model {model['id']!r}")
    for i, model in enumerate(models):
        adapters = model.get("adapters") if isinstance(model, dict) else None
        if not isinstance(adapters, list):
            continue
        mid = model.get("id")
        for j, adapter in enumerate(adapters):
            if not isinstance(adapter, dict):
                continue
            where = ("models", i, "adapters", j)
            aid = adapter.get("id")
            aliases = adapter.get("aliases")
            named = [(("id",), aid)] + [
                (("aliases", k), alias)
                for k, alias in enumerate(aliases if isinstance(aliases, list) else [])
            ]
            for key, name in named:
                if not isinstance(name, str):
                    continue
                if name in taken:
                    src.at(
                        (*where, *key),
                        f"model {mid!r}: adapter name {name!r} is already a name of {taken[name]}",
                    )
                else:
                    taken[name] = f"adapter {aid!r} of model {mid!r}"
            path = adapter.get("path")
            if isinstance(path, str) and is_hub_source(path):
                who = f"model {mid!r}: adapter {aid!r}"
                _check_hub(path, who, (*where, "path"), src, base_dir is not None, offline)
            elif isinstance(path, str) and base_dir is not None:
                directory = Path(path).expanduser()
                if not directory.is_absolute():
                    directory = base_dir / directory
                try:
                    read_adapter(directory)
                except AdapterError as error:
                    src.at((*where, "path"), f"model {mid!r}: adapter {aid!r}: {error}")


def _check_hub(source: str, who: str, where, src: Source, read: bool, offline: bool) -> None:
    """An `hf:` adapter: its form always; given `read`, its files when cached (else the
    base's load downloads them, as an `hf:` model source's runner does, unless offline)."""
    try:
        cached = cached_adapter(who, source)
    except SourceError as error:
        src.at(where, f"{who}: {error.path}: {error.reason}")
        return
    if read and cached is None and offline:
        src.at(where, f"{who}: {source}: not in the Hugging Face cache and server.offline is set")
    if read and cached is not None:
        try:
            read_adapter(cached)
        except AdapterError as error:
            src.at(where, f"{who}: {source}: {error}")
