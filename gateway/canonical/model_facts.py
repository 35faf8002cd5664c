"""What the listings say about a model, read from its engine so that it is true: the task it
serves (inferred from the weights when the config leaves `task` out) and whether it reasons.
Nothing here loads a model."""

from __future__ import annotations

from gateway.control.registry import Generation
from schemas.config import ModelConfig


def _runner(generation: Generation, model: ModelConfig):
    """The model's runner, an adapter's its base's (or None: not in this generation)."""
    return generation.views.get(model.id) or generation.runners.get(model.id)


def task_of(generation: Generation, model: ModelConfig) -> str:
    """ "embed", "rerank", "transcribe" or "chat": the engine the runner built, which
    inferred what the config omits."""
    runner = _runner(generation, model)
    return runner.engine.capabilities.task if runner else model.task or "chat"


def reasons(generation: Generation, model: ModelConfig) -> bool:
    """Whether the model thinks: its `reasoning` is on, or its engine says so (template)."""
    if model.reasoning not in (None, False, "off"):
        return True
    runner = _runner(generation, model)
    return runner.engine.reasons() if runner else False


def capabilities(generation: Generation, model: ModelConfig) -> list[str]:
    """Ollama's `capabilities` list for `/api/show`."""
    task = task_of(generation, model)
    if task == "embed":
        return ["embedding"]
    if task in ("rerank", "transcribe", "speech"):
        return []  # Ollama names no reranking or speech capability
    thinking = ["thinking"] if reasons(generation, model) else []
    return [
        "completion",
        "tools",
        *thinking,
        *(["vision"] if reads_images(generation, model) else []),
    ]


def reads_images(generation: Generation, model: ModelConfig) -> bool:
    """Whether the engine takes images: chosen from the checkpoint's config, not loaded."""
    runner = _runner(generation, model)
    return runner.engine.capabilities.images if runner else False
