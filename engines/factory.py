"""Build the engine a model's config asks for."""

from __future__ import annotations

from pathlib import Path

from engines.base import Engine
from engines.platform import PlatformPath
from schemas.config import ModelConfig, ScriptConfig


def make_engine(model: ModelConfig, platform: PlatformPath, base_dir: Path | None) -> Engine:
    if model.engine == "scripted":
        from engines.scripted import ScriptedEngine

        return ScriptedEngine(model.script or ScriptConfig(), model.tool_parser)
    from engines.mlx_engine import MLXEngine

    return MLXEngine(model, platform, base_dir)
