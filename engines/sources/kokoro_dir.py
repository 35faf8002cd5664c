"""A Kokoro text-to-speech directory, as hexgrad/Kokoro-82M and prince-canuma/Kokoro-82M lay
it out: `config.json` (Kokoro's: `istftnet`, `plbert`, `vocab`), the weights in one
`*.safetensors` (any name: `kokoro-v1_0.safetensors`), and `voices/<name>.safetensors`, one
style pack a voice. Checked cheaply (names and JSON), never loaded here."""

from __future__ import annotations

import json
from pathlib import Path

from engines.errors import SourceError

KOKORO_KEYS = ("istftnet", "plbert", "vocab")


def kokoro_config(path: Path) -> dict | None:
    """The directory's config.json where it is Kokoro's, else None."""
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(config, dict) and all(k in config for k in KOKORO_KEYS):
        return config
    return None


def is_kokoro_dir(path: Path) -> bool:
    return path.is_dir() and kokoro_config(path) is not None


def voice_files(path: Path) -> dict[str, Path]:
    """Each voice's name and its pack, sorted by name."""
    folder = path / "voices"
    found = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    return {f.name.removesuffix(".safetensors"): f for f in found}


def check_kokoro_dir(model_id: str, path: Path) -> None:
    """`SourceError` naming what a Kokoro directory lacks."""
    missing = []
    if not any(path.glob("*.safetensors")):
        missing.append("the weights (*.safetensors)")
    if not voice_files(path):
        missing.append("voices/*.safetensors (one style pack a voice)")
    if missing:
        lacks = " and ".join(missing)
        raise SourceError(model_id, str(path), f"a Kokoro directory missing {lacks}")
