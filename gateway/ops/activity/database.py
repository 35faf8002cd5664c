"""The ops page's SQLite file: its tables, and the one connection every reader and the
writer share under one lock.

`activity.sqlite3` under `server.state_dir` (in memory with `state_dir: null`), in WAL
mode so gateways sharing a state_dir share the file: a write waits for another's lock.
Private (0600 in a 0700 directory, its -wal and -shm as the file): it holds the requests'
captured bodies.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from engines.private_files import private_dir, private_file
from gateway.ops.activity.rows import COLUMNS

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
CREATE TABLE IF NOT EXISTS tool_captures (request_id TEXT PRIMARY KEY, calls TEXT);
CREATE TABLE IF NOT EXISTS benchmarks (
    id INTEGER PRIMARY KEY, ts REAL, model TEXT, settings TEXT, results TEXT
);
"""
BUSY_TIMEOUT = 5.0


class ActivityDB:
    """The history's connection (`path`, or in memory when None) and the lock every use of
    it takes; opening raises OSError or sqlite3.Error."""

    def __init__(self, path: Path | None) -> None:
        self._db = _open(path)
        self._lock = threading.Lock()

    def query(self, sql: str, params: tuple = ()) -> list[sqlite3.Row]:
        """The rows `sql` selects."""
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    @contextmanager
    def writing(self) -> Iterator[sqlite3.Connection]:
        """The connection under the lock, in one transaction: committed at the end, rolled
        back when the block raises."""
        with self._lock, self._db:
            yield self._db


def _open(path: Path | None) -> sqlite3.Connection:
    if path is not None:
        private_dir(path.parent)
        private_file(path)  # SQLite's -wal and -shm files copy its mode
    # Gateways sharing a state_dir share the file: a write waits for another's lock.
    db = sqlite3.connect(path or ":memory:", check_same_thread=False, timeout=BUSY_TIMEOUT)
    db.row_factory = sqlite3.Row
    if path is not None:
        db.execute("PRAGMA journal_mode=WAL")
        # A history, not a ledger: a power cut may lose the last moments, never the file.
        db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(SCHEMA)
    return db
