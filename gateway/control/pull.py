"""`gateway pull`: download (and convert, for a GGUF) the `hf:` models a config declares.

Progress is huggingface_hub's own tqdm bar, one per file (bytes, rate, ETA) on stderr; what
was resolved (the branch's commit, the files, the path) is printed on stdout.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from engines.download import convert
from engines.download import pull as pull_source
from engines.errors import ConfigInvalid, SourceError
from engines.sources.hub import is_hub_source, offline_env, parse_hub_source
from schemas.config import ModelConfig


def file_bar(name: str) -> type:
    """huggingface_hub's tqdm for one file, labelled with the file's name in the repository."""
    from huggingface_hub.utils import tqdm

    class FileBar(tqdm):
        def __init__(self, *args, **kwargs) -> None:
            kwargs["desc"] = name
            super().__init__(*args, **kwargs)

    return FileBar


def pull(path: Path, names: list[str]) -> int:
    """Download every `hf:` model of the config at `path` (or the ones `names` name).

    Exit 0 when each is in the cache afterwards; 1 when any failed (the rest still pulled).
    """
    from gateway.control.config import load_config

    try:
        config = load_config(path)
    except ConfigInvalid as invalid:
        for error in invalid.errors:
            print(error, file=sys.stderr)
        return 1
    chosen, unknown = _choose(config.models, names)
    if unknown:
        known = ", ".join(sorted(n for m in config.models for n in (m.id, *m.aliases)))
        missing = ", ".join(unknown)
        print(f"gateway pull: not in {path}: {missing} (known: {known})", file=sys.stderr)
        return 1
    if not names and not any(is_hub_source(m.source) for m in chosen):
        print(f"{path}: no hf: models to pull")
        return 0
    offline = config.server.offline or offline_env()
    failed = 0
    for model in chosen:
        if not is_hub_source(model.source):
            if names:
                print(f"{model.id}: {model.source or model.engine} is local: nothing to pull")
            continue
        try:
            _pull_one(model, path.resolve().parent, offline)
        except SourceError as error:
            print(f"{model.id}: failed: {error.reason}", file=sys.stderr)
            failed += 1
        except KeyboardInterrupt:  # Ctrl-C: what finished stays in the cache
            print(f"\n{model.id}: interrupted; finished files are kept, pull again to go on",
                  file=sys.stderr)  # fmt: skip
            return 130
    return 1 if failed else 0


def _choose(models: list[ModelConfig], names: list[str]) -> tuple[list[ModelConfig], list[str]]:
    if not names:
        return models, []
    by_name = {n: m for m in models for n in (m.id, *m.aliases)}
    unknown = [n for n in names if n not in by_name]
    chosen = list({by_name[n].id: by_name[n] for n in names if n in by_name}.values())
    return chosen, unknown


def _pull_one(model: ModelConfig, base_dir: Path, offline: bool) -> None:
    spec = parse_hub_source(model.id, model.source)
    print(f"{model.id}: {model.source}", flush=True)
    started = time.perf_counter()
    snap = pull_source(model, offline=offline, bar=file_bar, refresh=True)
    pinned = "pinned" if spec.pinned else f"{spec.revision} ->"
    took = time.perf_counter() - started
    fetched = f"{snap.downloaded / 1e6:.1f} MB in {took:.1f}s" if snap.downloaded else "up to date"
    print(f"{model.id}: {pinned} {snap.commit}, {snap.size / 1e6:.1f} MB, {fetched}")
    print(f"{model.id}: {snap.path}", flush=True)
    if converted := convert(model, base_dir):  # a GGUF: now, so serve starts without the wait
        print(f"{model.id}: converted to MLX in {converted}", flush=True)
