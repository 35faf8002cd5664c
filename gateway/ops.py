"""Ops routes: health that answers while every runner is busy."""

from __future__ import annotations

from litestar import get

from gateway.registry import Generation


@get("/health", opt={"public": True})
async def health(generation: Generation) -> dict:
    """Liveness and each model's state; reads state only, never loads or wakes a model."""
    models = {
        model_id: {
            "state": runner.state.value,
            "queue_depth": runner.queue_depth,
            "running": runner.running,
            **({"error": runner.error} if runner.error else {}),
        }
        for model_id, runner in generation.runners.items()
    }
    return {"status": "ok", "models": models}


ROUTES = [health]
