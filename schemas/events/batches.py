"""Events of batches (`/v1/batches`): a batch's status as it changes, with its counts. Each
line's own request events carry `batch_id` too (bound as the line is run)."""

from __future__ import annotations

from schemas.events.base import Event


class BatchChanged(Event, tag="batch_changed"):
    batch_id: str
    status: str
    total: int = 0
    completed: int = 0
    failed: int = 0


class BackgroundResponseChanged(Event, tag="background_response_changed"):
    """A background response (`/v1/responses` with `background: true`) moving on: `queued`,
    `in_progress`, then `completed`, `incomplete`, `failed` or `cancelled`."""

    response_id: str
    status: str
