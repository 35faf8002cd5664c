"""The ops page's writer: log lines in from any thread, folded into rows and written to
SQLite in batches by one thread of its own.

The log hands every rendered (so already redacted) line to `tap`, which only queues it:
the writer thread parses the lines, folds them into rows (rows.py) and writes them in
batches, so the event loop never waits on the disk. Past `server.activity.max_rows` or
`max_age` the oldest rows and their events go.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

from engines import timeline
from gateway.logs.handoff import Handoff
from gateway.ops.activity.database import ActivityDB
from gateway.ops.activity.rows import COLUMNS, epoch, fold, new_row
from schemas.config import ActivityConfig, seconds

QUEUE_ITEMS = 100_000  # lines held while the writer is behind (a slow disk), before dropping
PRUNE_EVERY_S = 30.0
EVENTS_PER_ROW = 20  # events outside any row (model and config events) kept per max_rows
_STOP = object()


class ActivityWriter:
    """Lines, samples and captures in (any thread, never blocking), written by its thread."""

    def __init__(
        self,
        db: ActivityDB,
        settings: Callable[[], ActivityConfig],
        key_label: Callable[[], str | None],
    ) -> None:
        """`settings()` is the activity config in force; `key_label()`, called in the
        context of a `request_started` line, names the key the request presented (`NO_ROW`:
        the request is no row, rows.py)."""
        self._db = db
        self._settings = settings
        self._key_label = key_label
        self._queue: Handoff[Any] = Handoff(QUEUE_ITEMS)
        self._open: dict[str, dict[str, Any]] = {}  # request_id -> row, until it finishes
        self._ignored: set[str] = set()  # requests that are no row (the page's own polling)
        self._pruned = time.monotonic()
        self.problem: str | None = None  # the last write's failure, if one failed
        self.failed_batches = 0
        self.prune_every = PRUNE_EVERY_S  # seconds between prunes (a test sets 0)
        self._thread = threading.Thread(target=self._write, name="activity-writer", daemon=True)
        self._thread.start()

    # --- in: from any thread, never blocking ---

    def tap(self, line: str) -> None:
        """A log tap: queue the line (with the presented key's label when it opens a request)."""
        opens = line.startswith('{"event":"request_started"')
        self._offer((line, self._key_label() if opens else None))

    def sample(self, ts: float, runners: list[tuple[str, int, int, int]]) -> None:
        """Each model's (id, queue depth, running, memory bytes) at `ts`, for the plots."""
        self._offer(("sample", ts, runners))

    def capture(self, request_id: str, request: str, response: str, tools: str | None) -> None:
        """A request's bodies, and the MCP calls the gateway made for it (all already
        redacted): only for models with `capture: true`."""
        self._offer(("capture", request_id, request, response, tools))

    def _offer(self, item: tuple) -> None:
        self._queue.offer(item)

    @property
    def dropped(self) -> int:
        """Lines the history never got (the writer was that far behind)."""
        return self._queue.dropped

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until what was queued before this call is written (tests, benchmarks)."""
        done = threading.Event()
        self._queue.put(("flush", done))
        done.wait(timeout)

    def close(self) -> None:
        """Write what is queued, then stop the thread."""
        self._queue.put(_STOP)
        self._thread.join(5)

    # --- the writer thread ---

    def _write(self) -> None:
        while True:
            batch = self._queue.take(2048)
            if timeline.ON:
                timeline.mark("activity lines", len(batch))
            touched: dict[str, dict[str, Any]] = {}
            events: list[tuple] = []
            samples: list[tuple] = []
            captures: list[tuple] = []
            flushes = []
            for item in batch:
                if item is _STOP:
                    self._commit(touched, events, samples, captures)
                    return
                if item[0] == "sample":
                    samples += [(item[1], *runner) for runner in item[2]]
                elif item[0] == "capture":
                    captures.append(item[1:])  # (id, request, response, tools or None)
                elif item[0] == "flush":
                    flushes.append(item[1])
                else:
                    self._take(*item, touched, events)
            self._commit(touched, events, samples, captures)
            if timeline.ON:
                timeline.mark("activity written")
            for done in flushes:
                done.set()

    def _take(self, line: str, key: str | None, touched: dict, events: list) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            return
        rid = event.get("request_id")
        name = event.get("event")
        if rid and name == "request_started":
            row = new_row(event, key)
            if row is None:
                self._ignored.add(rid)
            else:
                self._open[rid] = row
        if rid in self._ignored:
            # What the page's own calls caused (a reload, a load, a benchmark's generations)
            # is kept as model and config events, outside any row.
            if name == "request_finished":
                self._ignored.discard(rid)
            if name in ("request_started", "request_finished"):
                return
            rid = None
        row = self._open.get(rid) if rid else None
        if row is not None:
            fold(row, event)
            touched[rid] = row
            if name == "request_finished":
                del self._open[rid]
        model = event.get("model") or (row or {}).get("model")
        events.append((epoch(event.get("ts")), rid, model, name, line))

    def _commit(self, touched: dict, events: list, samples: list, captures: list) -> None:
        rows = [
            tuple(json.dumps(r[c]) if c == "detail" else r[c] for c in COLUMNS)
            for r in touched.values()
        ]
        marks = ", ".join("?" * len(COLUMNS))
        try:
            self._insert(rows, events, samples, captures, marks)
        except sqlite3.Error as error:
            # The history loses this batch; the gateway (and the log) go on regardless.
            self.failed_batches += 1
            self.problem = f"last write failed: {error}"

    def _insert(self, rows: list, events: list, samples: list, captures: list, marks: str) -> None:
        with self._db.writing() as db:
            db.executemany(f"INSERT OR REPLACE INTO requests VALUES ({marks})", rows)
            db.executemany(
                "INSERT INTO events (ts, request_id, model, event, line) VALUES (?, ?, ?, ?, ?)",
                events,
            )
            db.executemany("INSERT INTO samples VALUES (?, ?, ?, ?, ?)", samples)
            db.executemany(
                "INSERT OR REPLACE INTO captures VALUES (?, ?, ?)", [c[:3] for c in captures]
            )
            db.executemany(
                "INSERT OR REPLACE INTO tool_captures VALUES (?, ?)",
                [(c[0], c[3]) for c in captures if c[3] is not None],
            )
            if time.monotonic() - self._pruned >= self.prune_every:
                self._prune(db)

    def _prune(self, db: sqlite3.Connection) -> None:
        """Keep the newest `max_rows` requests younger than `max_age`, and their events."""
        self._pruned = time.monotonic()
        settings = self._settings()
        oldest = time.time() - seconds(settings.max_age)
        db.execute("DELETE FROM requests WHERE ts < ?", (oldest,))
        db.execute(
            "DELETE FROM requests WHERE request_id IN (SELECT request_id FROM requests "
            "ORDER BY ts DESC LIMIT -1 OFFSET ?)",
            (settings.max_rows,),
        )
        db.execute(
            "DELETE FROM events WHERE request_id IS NOT NULL AND request_id NOT IN "
            "(SELECT request_id FROM requests) AND ts < ?",
            (time.time() - PRUNE_EVERY_S,),  # a request still open has no row written yet
        )
        db.execute("DELETE FROM events WHERE ts < ?", (oldest,))
        db.execute("DELETE FROM captures WHERE request_id NOT IN (SELECT request_id FROM requests)")
        db.execute(
            "DELETE FROM tool_captures WHERE request_id NOT IN (SELECT request_id FROM requests)"
        )
        db.execute(
            "DELETE FROM events WHERE request_id IS NULL AND id NOT IN (SELECT id FROM events "
            "WHERE request_id IS NULL ORDER BY id DESC LIMIT ?)",
            (settings.max_rows * EVENTS_PER_ROW,),
        )
        db.execute("DELETE FROM samples WHERE ts < ?", (oldest,))
        db.execute("DELETE FROM benchmarks WHERE ts < ?", (oldest,))
