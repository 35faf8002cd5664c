"""Ops routes: health that answers while every runner is busy."""

from __future__ import annotations

from litestar import Response, get
from litestar.datastructures import State

from engines.runner import Runner
from gateway.control.registry import Generation


def download_state(runner: Runner) -> dict | None:
    """The file an `hf:` model is downloading now: bytes done, total, bytes per second."""
    if runner.download is None:
        return None
    p = runner.download
    return {"file": p.file, "done": p.done, "total": p.total, "rate": round(p.rate)}


@get("/health", opt={"public": True})
async def health(generation: Generation, state: State) -> Response:
    """Liveness and each model's state; reads state only, never loads or wakes a model.

    While the gateway drains for shutdown: 503 and `status: draining`."""
    models = {
        model_id: {
            "state": runner.state.value,
            "queue_depth": runner.queue_depth,
            "running": runner.running,
            **({"error": runner.error} if runner.error else {}),
            **({"download": download_state(runner)} if runner.download else {}),
        }
        for model_id, runner in generation.runners.items()
    }
    draining = state.admission.draining
    body = {"status": "draining" if draining else "ok", "models": models}
    return Response(body, status_code=503 if draining else 200)


ROUTES = [health]
