"""Build the engine a model's config asks for."""

from __future__ import annotations

import json
from pathlib import Path

from engines.base import Engine
from engines.cache import CacheDir
from engines.errors import GatewayError
from engines.platform import PlatformPath
from engines.sources.resolve import check_source
from schemas.config import ModelConfig, ScriptConfig


def make_engine(
    model: ModelConfig,
    platform: PlatformPath,
    base_dir: Path | None,
    draft: ModelConfig | None = None,
    disk: CacheDir | None = None,
) -> Engine:
    """The engine for `model`; `draft` is the model its `draft:` setting names, if any;
    `disk` the KV cache's disk tier (`server.cache`), None when it is off."""
    if model.engine == "scripted":
        from engines.scripted import ScriptedEngine

        script = model.script or ScriptConfig()
        return ScriptedEngine(script, model.tool_parser, model.context.max, model.id)
    if model.engine == "upstream":
        from engines.upstream.engine import UpstreamEngine

        return UpstreamEngine(model)
    if model.engine == "process":
        from engines.process.engine import ProcessEngine

        return ProcessEngine(model, base_dir)
    task = infer_task(model, base_dir)
    if task == "embed":
        from engines.embed.engine import EmbeddingEngine

        return EmbeddingEngine(model, base_dir)
    if task == "rerank":
        from engines.rerank.engine import RerankEngine

        return RerankEngine(model, base_dir, platform)
    if task == "transcribe":
        from engines.speech.engine import WhisperEngine

        return WhisperEngine(model, base_dir)
    if task == "speech":
        from engines.tts.engine import KokoroEngine

        return KokoroEngine(model, base_dir)
    if reads_images(model, base_dir):
        from engines.vision.engine import VisionEngine

        return VisionEngine(model, platform, base_dir, disk)
    if model.distributed is not None:  # rank 0 in a process of its own, like isolation's
        from engines.llm.distributed.group import RankGroup
        from engines.llm.isolated import IsolatedEngine

        group = RankGroup(model, platform, base_dir)
        return IsolatedEngine(model, platform, base_dir, group=group)
    if model.isolation == "process":
        from engines.llm.isolated import IsolatedEngine

        return IsolatedEngine(model, platform, base_dir, draft, disk)
    from engines.llm.engine import MLXEngine

    return MLXEngine(model, platform, base_dir, draft, disk)


def reads_images(model: ModelConfig, base_dir: Path | None) -> bool:
    """Whether the model's checkpoint declares a vision tower (`vision_config`): such a
    model is served by the vision engine on mlx-vlm. Only config.json is read."""
    config = _checkpoint_config(model, base_dir)
    return bool(config.get("vision_config")) and model.task not in (
        "embed",
        "rerank",
        "transcribe",
        "speech",
    )


def _checkpoint_config(model: ModelConfig, base_dir: Path | None) -> dict:
    if not model.source or model.source.lower().endswith(".gguf"):
        return {}
    try:
        path = check_source(model.id, model.source, base_dir=base_dir)
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (GatewayError, OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def infer_task(model: ModelConfig, base_dir: Path | None) -> str:
    """`task` when the config says; else "embed" for an embedding architecture, "rerank" for
    a cross-encoder's, "transcribe" for a Whisper checkpoint (MLX or CTranslate2), "speech"
    for a Kokoro checkpoint, else "chat".

    Only a model directory's config.json is read (cheap); a .gguf is a chat model, and a
    source that cannot be read is left for the load to report, for this model alone.
    """
    from engines.embed.engine import EMBEDDING_ARCHITECTURES
    from engines.rerank.cross_encoder import CROSS_ENCODER_ARCHITECTURES
    from engines.sources.kokoro_dir import KOKORO_KEYS

    if model.task is not None:
        return model.task
    if not model.source or model.source.lower().endswith(".gguf"):
        return "chat"
    try:
        path = check_source(model.id, model.source, base_dir=base_dir)
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (GatewayError, OSError, ValueError):
        return "chat"
    if not isinstance(config, dict):
        return "chat"
    if config.get("model_type") == "whisper" or "alignment_heads" in config:
        return "transcribe"  # an MLX Whisper's dimensions, or a CTranslate2 Whisper's config
    if all(k in config for k in KOKORO_KEYS):
        return "speech"  # a Kokoro checkpoint
    architectures = config.get("architectures") or []
    if EMBEDDING_ARCHITECTURES.intersection(architectures):
        return "embed"
    return "rerank" if CROSS_ENCODER_ARCHITECTURES.intersection(architectures) else "chat"


def known_context(model: ModelConfig) -> int | None:
    """The window a model has, as far as its config tells without loading it: a fixed
    `context.max`, or a scripted model's own; None where only a load can tell."""
    if isinstance(model.context.max, int):
        return model.context.max
    if model.engine == "scripted":
        from engines.scripted import SCRIPTED_CONTEXT

        return SCRIPTED_CONTEXT
    return None
