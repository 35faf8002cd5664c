"""The ops page's memory: Activity rows, their event trails, runner samples and benchmarks,
in SQLite (the standard library's `sqlite3`) under `server.state_dir` (`activity.sqlite3`;
in memory with `state_dir: null`).

`ActivityStore` is the one object the app holds: lines go in through its writer
(writer.py: queued from any thread, folded into rows and written in batches by its own
thread, so the event loop never waits on the disk); reads take the same connection under
its lock (database.py); the routes make them on a worker thread.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.ops.activity.database import ActivityDB
from gateway.ops.activity.rows import rates
from gateway.ops.activity.writer import ActivityWriter
from schemas.config import ActivityConfig


class ActivityStore:
    """Lines in (any thread, never blocking), rows out (blocking reads, for worker threads)."""

    def __init__(
        self,
        path: Path | None,
        settings: Callable[[], ActivityConfig],
        key_label: Callable[[], str | None],
    ) -> None:
        """`settings()` is the activity config in force; `key_label()`, called in the
        context of a `request_started` line, names the key the request presented (`NO_ROW`:
        the request is no row, rows.py)."""
        self.path, self._opened = path, None
        try:
            self._db = ActivityDB(path)
        except (OSError, sqlite3.Error) as error:
            # The page keeps working on a history that ends with the process; said at
            # `/ui/api/models` (`activity_store_problem`).
            self.path, self._opened = None, f"{path}: {error}"
            self._db = ActivityDB(None)
        self._writer = ActivityWriter(self._db, settings, key_label)

    @property
    def problem(self) -> str | None:
        """Why the history is not what `path` promises: the last failed write, or the file
        that could not be opened (then it is in memory); None when all is well."""
        return self._writer.problem or self._opened

    @property
    def prune_every(self) -> float:
        """Seconds between prunes (a test sets 0)."""
        return self._writer.prune_every

    @prune_every.setter
    def prune_every(self, value: float) -> None:
        self._writer.prune_every = value

    # --- in: from any thread, never blocking (the writer's) ---

    def tap(self, line: str) -> None:
        """A log tap: queue the line (with the presented key's label when it opens a request)."""
        self._writer.tap(line)

    def sample(self, ts: float, runners: list[tuple[str, int, int, int]]) -> None:
        """Each model's (id, queue depth, running, memory bytes) at `ts`, for the plots."""
        self._writer.sample(ts, runners)

    def capture(
        self, request_id: str, request: str, response: str, tools: str | None = None
    ) -> None:
        """A request's bodies and the MCP calls the gateway made for it (already redacted):
        only for models with `capture: true`."""
        self._writer.capture(request_id, request, response, tools)

    @property
    def dropped(self) -> int:
        """Lines the history never got (the writer was that far behind)."""
        return self._writer.dropped

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until what was queued before this call is written (tests, benchmarks)."""
        self._writer.flush(timeout)

    def close(self) -> None:
        """Write what is queued, then stop the writer."""
        self._writer.close()

    # --- out: blocking reads ---

    def query(self, sql: str, params: tuple = ()) -> list[sqlite3.Row]:
        return self._db.query(sql, params)

    def activity(
        self, filters: dict[str, Any], *, limit: int = 100, before: float | None = None
    ) -> list[dict[str, Any]]:
        """Rows newest first, each column in `filters` equal to its value."""
        where = [f"{column} = ?" for column in filters]
        params: list[Any] = list(filters.values())
        if before is not None:
            where.append("ts < ?")
            params.append(before)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = self.query(
            f"SELECT * FROM requests {clause} ORDER BY ts DESC LIMIT ?", (*params, limit)
        )
        return [_row(r) for r in rows]

    def request(self, request_id: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """A request's row (with `capture`, its bodies, where kept) and its event trail."""
        rows = self.query(
            "SELECT requests.*, captures.request AS request_body, captures.response AS "
            "response_body, tool_captures.calls AS tool_calls_body FROM requests "
            "LEFT JOIN captures USING (request_id) LEFT JOIN tool_captures USING (request_id) "
            "WHERE request_id = ?",
            (request_id,),
        )
        lines = self.query(
            "SELECT line FROM events WHERE request_id = ? ORDER BY id", (request_id,)
        )
        return (_row(rows[0]) if rows else None), [json.loads(r["line"]) for r in lines]

    def model_events(self, model: str, *, after: int = 0, limit: int = 200) -> list[dict]:
        """A model's events (its `model_log` lines among them), oldest first, past id `after`."""
        rows = self.query(
            "SELECT id, line FROM (SELECT id, line FROM events WHERE model = ? AND id > ? "
            "ORDER BY id DESC LIMIT ?) ORDER BY id",
            (model, after, limit),
        )
        return [{"id": r["id"], **json.loads(r["line"])} for r in rows]

    def last_event(self, *names: str) -> dict[str, Any] | None:
        marks = ", ".join("?" * len(names))
        rows = self.query(
            f"SELECT line FROM events WHERE event IN ({marks}) ORDER BY id DESC LIMIT 1", names
        )
        return json.loads(rows[0]["line"]) if rows else None

    def add_benchmark(self, model: str, settings: dict, results: dict) -> None:
        with self._db.writing() as db:
            db.execute(
                "INSERT INTO benchmarks (ts, model, settings, results) VALUES (?, ?, ?, ?)",
                (time.time(), model, json.dumps(settings), json.dumps(results)),
            )

    def benchmarks(self, limit: int = 50) -> list[dict[str, Any]]:
        rows = self.query("SELECT * FROM benchmarks ORDER BY id DESC LIMIT ?", (limit,))
        return [
            {
                "id": r["id"],
                "ts": r["ts"],
                "model": r["model"],
                "settings": json.loads(r["settings"]),
                "results": json.loads(r["results"]),
            }
            for r in rows
        ]


def _row(row: sqlite3.Row) -> dict[str, Any]:
    found = dict(row)
    if "request_body" in found:
        request, response = found.pop("request_body"), found.pop("response_body")
        tools = found.pop("tool_calls_body")
        found["capture"] = (
            None
            if request is None
            else {"request": request, "response": response, "tool_calls": tools}
        )
    found["detail"] = json.loads(found["detail"] or "{}")
    found["stream"] = None if found["stream"] is None else bool(found["stream"])
    return rates(found)


def activity_path(responses_path: Path | None) -> Path | None:
    """`activity.sqlite3` beside the stored Responses' file (None: in memory as well)."""
    return responses_path.with_name("activity.sqlite3") if responses_path else None
