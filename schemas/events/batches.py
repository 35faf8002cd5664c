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
