"""The ops page's memory: Activity rows, their event trails, runner samples and benchmarks,
in SQLite (the standard library's `sqlite3`) under `server.state_dir` (`activity.sqlite3`;
in memory with `state_dir: null`).

The log hands every rendered (so already redacted) line to `tap`, which only queues it:
one writer thread parses the lines, folds them into rows (rows.py) and writes them
in batches, so the event loop never waits on the disk. Past `server.activity.max_rows` or
`max_age` the oldest rows and their events go. Reads take the same connection under a lock;
the routes make them on a worker thread.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engines import timeline
from gateway.logs.handoff import Handoff
from gateway.ops.activity.rows import COLUMNS, epoch, fold, new_row, rates
from schemas.config import ActivityConfig, seconds

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS requests ({", ".join(COLUMNS)}, PRIMARY KEY (request_id));
CREATE INDEX IF NOT EXISTS requests_by_ts ON requests (ts);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY, ts REAL, request_id TEXT, model TEXT, event TEXT, line TEXT
);
CREATE INDEX IF NOT EXISTS events_by_request ON events (request_id);
CREATE INDEX IF NOT EXISTS events_by_model ON events (model, id);
CREATE TABLE IF NOT EXISTS samples (
    ts REAL, model TEXT, queue_depth INTEGER, running INTEGER, memory_bytes INTEGER
);
CREATE INDEX IF NOT EXISTS samples_by_ts ON samples (ts);
CREATE TABLE IF NOT EXISTS captures (request_id TEXT PRIMARY KEY, request TEXT, response TEXT);
CREATE TABLE IF NOT EXISTS benchmarks (
    id INTEGER PRIMARY KEY, ts REAL, model TEXT, settings TEXT, results TEXT
);
"""
QUEUE_ITEMS = 100_000  # lines held while the writer is behind (a slow disk), before dropping
PRUNE_EVERY_S = 30.0
BUSY_TIMEOUT = 5.0
EVENTS_PER_ROW = 20  # events outside any row (model and config events) kept per max_rows
_STOP = object()


class ActivityStore:
    """Lines in (any thread, never blocking), rows out (blocking reads, for worker threads)."""

    def __init__(
        self,
        path: Path | None,
        settings: Callable[[], ActivityConfig],
        key_label: Callable[[], str | None],
    ) -> None:
        """`settings()` is the activity config in force; `key_label()`, called in the
        context of a `request_started` line, names the key the request presented."""
        self.path, self.problem = path, None
        try:
            self._db = _open(path)
        except (OSError, sqlite3.Error) as error:
            # The page keeps working on a history that ends with the process; said at
            # `/ui/api/models` (`activity_store_problem`).
            self.path, self.problem = None, f"{path}: {error}"
            self._db = _open(None)
        self._lock = threading.Lock()
        self._settings = settings
        self._key_label = key_label
        self._queue: Handoff[Any] = Handoff(QUEUE_ITEMS)
        self._open: dict[str, dict[str, Any]] = {}  # request_id -> row, until it finishes
        self._ignored: set[str] = set()  # requests that are no row (the page's own polling)
        self._pruned = time.monotonic()
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

    def capture(self, request_id: str, request: str, response: str) -> None:
        """A request's bodies (already redacted): only for models with `capture: true`."""
        self._offer(("capture", request_id, request, response))

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
                    captures.append(item[1:])
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
        with self._lock, self._db:
            self._db.executemany(f"INSERT OR REPLACE INTO requests VALUES ({marks})", rows)
            self._db.executemany(
                "INSERT INTO events (ts, request_id, model, event, line) VALUES (?, ?, ?, ?, ?)",
                events,
            )
            self._db.executemany("INSERT INTO samples VALUES (?, ?, ?, ?, ?)", samples)
            self._db.executemany("INSERT OR REPLACE INTO captures VALUES (?, ?, ?)", captures)
            if time.monotonic() - self._pruned >= self.prune_every:
                self._prune()

    def _prune(self) -> None:
        """Keep the newest `max_rows` requests younger than `max_age`, and their events."""
        self._pruned = time.monotonic()
        settings = self._settings()
        oldest = time.time() - seconds(settings.max_age)
        db = self._db
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
            "DELETE FROM events WHERE request_id IS NULL AND id NOT IN (SELECT id FROM events "
            "WHERE request_id IS NULL ORDER BY id DESC LIMIT ?)",
            (settings.max_rows * EVENTS_PER_ROW,),
        )
        db.execute("DELETE FROM samples WHERE ts < ?", (oldest,))
        db.execute("DELETE FROM benchmarks WHERE ts < ?", (oldest,))

    # --- out: blocking reads ---

    def query(self, sql: str, params: tuple = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

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
            "response_body FROM requests LEFT JOIN captures USING (request_id) "
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
        with self._lock, self._db:
            self._db.execute(
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


def _open(path: Path | None) -> sqlite3.Connection:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    # Gateways sharing a state_dir share the file: a write waits for another's lock.
    db = sqlite3.connect(path or ":memory:", check_same_thread=False, timeout=BUSY_TIMEOUT)
    db.row_factory = sqlite3.Row
    if path is not None:
        db.execute("PRAGMA journal_mode=WAL")
        # A history, not a ledger: a power cut may lose the last moments, never the file.
        db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(SCHEMA)
    return db


def _row(row: sqlite3.Row) -> dict[str, Any]:
    found = dict(row)
    if "request_body" in found:
        request, response = found.pop("request_body"), found.pop("response_body")
        found["capture"] = None if request is None else {"request": request, "response": response}
    found["detail"] = json.loads(found["detail"] or "{}")
    found["stream"] = None if found["stream"] is None else bool(found["stream"])
    return rates(found)


def activity_path(responses_path: Path | None) -> Path | None:
    """`activity.sqlite3` beside the stored Responses' file (None: in memory as well)."""
    return responses_path.with_name("activity.sqlite3") if responses_path else None
