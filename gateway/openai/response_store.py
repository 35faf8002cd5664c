"""Stored Responses: a bounded SQLite store (the standard library's `sqlite3`).

A stored response keeps its response object, its own input items (with ids, for
`GET /v1/responses/{id}/input_items`), and the whole conversation up to and including its
output, so that `previous_response_id` continues it and `item_reference` finds any item by
id. Every row belongs to the API key that made it (a SHA-256 of the key, never the key): a
request with another key finds nothing. Rows expire after `server.responses.ttl`; past
`server.responses.max_bytes` the oldest go first. The file lives in `server.state_dir`
(`responses.sqlite3`); with `state_dir: null` the database is in memory.

Every call blocks (a write may wait for another process's lock): the routes make them on a
worker thread, one at a time.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from engines.errors import StoreUnavailable
from engines.private_files import private_dir, private_file
from gateway.control.state import probe_writable, state_dir
from gateway.http.auth import key_digest
from schemas.config import ServerConfig, seconds, size_bytes

BUSY_TIMEOUT = 5.0  # seconds a write waits for another connection's (another process's)

SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY, owner TEXT NOT NULL, created REAL NOT NULL, expires REAL NOT NULL,
    response TEXT NOT NULL, inputs TEXT NOT NULL, context TEXT NOT NULL, size INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS items (
    id TEXT NOT NULL, owner TEXT NOT NULL, response_id TEXT NOT NULL, item TEXT NOT NULL,
    PRIMARY KEY (owner, id)
);
CREATE INDEX IF NOT EXISTS items_by_response ON items (response_id);
CREATE TABLE IF NOT EXISTS events (
    response_id TEXT NOT NULL, seq INTEGER NOT NULL, event TEXT NOT NULL,
    PRIMARY KEY (response_id, seq)
);
CREATE INDEX IF NOT EXISTS responses_by_age ON responses (created);
CREATE INDEX IF NOT EXISTS responses_by_expiry ON responses (expires);
"""


def owner_of(key: str | None) -> str:
    """Who owns a row: a digest of the API key the request presented ("" for none)."""
    return key_digest(key)


def store_path(server: ServerConfig, base_dir: Path) -> Path | None:
    """Where `server.state_dir` puts `responses.sqlite3`; None for the in-memory store."""
    if server.state_dir is None:
        return None
    return state_dir(server, base_dir) / "responses.sqlite3"


class ResponseStore:
    """The stored responses of one gateway process.

    Opening never raises: a store that cannot be opened (corrupt, unreadable) keeps its
    `problem`, and every use of it raises `StoreUnavailable` naming the file, so that
    `store: false` requests still work and the start reports what is wrong.
    """

    def __init__(self, server: ServerConfig, base_dir: Path) -> None:
        path = store_path(server, base_dir)
        self.path = ":memory:" if path is None else str(path)
        self.problem: str | None = None
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        try:
            self._db = self._open(path)
        except (sqlite3.Error, OSError) as error:
            self.problem = f"{self.path}: {getattr(error, 'strerror', None) or error}"
            return
        try:
            probe_writable(self._db)
        except sqlite3.Error as error:  # readable, not writable: reads still work
            self.problem = f"{self.path}: {error}"

    def _open(self, path: Path | None) -> sqlite3.Connection:
        if path is not None:
            # Private: the stored conversations are the users' own words.
            private_dir(path.parent)
            private_file(path)  # SQLite's -wal and -shm files copy its mode
        db = sqlite3.connect(
            self.path, check_same_thread=False, isolation_level=None, timeout=BUSY_TIMEOUT
        )
        try:
            db.executescript(SCHEMA)
            if path is not None:
                # Two gateways on one state_dir share it: readers never wait for a writer,
                # and a writer waits up to BUSY_TIMEOUT for the other's write.
                db.execute("PRAGMA journal_mode = WAL")
        except sqlite3.Error:
            db.close()
            raise
        return db

    @contextmanager
    def _using(self) -> Iterator[sqlite3.Connection]:
        """The connection, under the lock; a failure of SQLite as `StoreUnavailable`."""
        with self._lock:
            if self._db is None:
                raise StoreUnavailable(self._unavailable(self.problem or ""))
            try:
                yield self._db
            except sqlite3.Error as error:
                raise StoreUnavailable(self._unavailable(f"{self.path}: {error}")) from None

    @staticmethod
    def _unavailable(problem: str) -> str:
        return (
            f"the Responses store cannot be used ({problem}); send store: false without "
            "previous_response_id or item_reference, or fix server.state_dir"
        )

    def check_writable(self) -> None:
        """Raise `StoreUnavailable` unless a save could be written now: asked before
        generating, so that an answer that could not be stored is never computed."""
        with self._using() as db:
            probe_writable(db)

    def save(
        self,
        server: ServerConfig,
        owner: str,
        response: dict[str, Any],
        inputs: list[dict[str, Any]],
        context: list[dict[str, Any]],
    ) -> None:
        """Store one finished response; then drop what expired and what exceeds the cap."""
        now = time.time()
        blobs = [json.dumps(response), json.dumps(inputs), json.dumps(context)]
        size = sum(len(b) for b in blobs)
        items = [*inputs, *response.get("output", [])]
        with self._using() as db, db:
            db.execute("BEGIN")
            db.execute(
                "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (response["id"], owner, now, now + seconds(server.responses.ttl), *blobs, size),
            )
            db.executemany(
                "INSERT OR REPLACE INTO items VALUES (?, ?, ?, ?)",
                [(i["id"], owner, response["id"], json.dumps(i)) for i in items if i.get("id")],
            )
            self._evict(db, now, size_bytes(server.responses.max_bytes) or 0)

    def _evict(self, db: sqlite3.Connection, now: float, cap: int) -> None:
        # In SQL, by index: the expired first, then the oldest of the rest while their total
        # is over the cap (a row stays when it and every newer row fit under the cap).
        self._drop(db, "SELECT id FROM responses WHERE expires < ?", (now,))
        total = db.execute("SELECT COALESCE(SUM(size), 0) FROM responses").fetchone()[0]
        if total <= cap:
            return
        self._drop(
            db,
            "SELECT id FROM (SELECT id, SUM(size) OVER (ORDER BY created DESC, rowid DESC) "
            "AS newer FROM responses) WHERE newer > ?",
            (cap,),
        )

    @staticmethod
    def _drop(db: sqlite3.Connection, query: str, args: tuple[Any, ...]) -> None:
        db.execute(f"DELETE FROM items WHERE response_id IN ({query})", args)
        if db.execute("SELECT 1 FROM events LIMIT 1").fetchone():  # only background ones keep any
            db.execute(f"DELETE FROM events WHERE response_id IN ({query})", args)
        db.execute(f"DELETE FROM responses WHERE id IN ({query})", args)

    @staticmethod
    def _delete(db: sqlite3.Connection, response_id: str) -> None:
        db.execute("DELETE FROM responses WHERE id = ?", (response_id,))
        db.execute("DELETE FROM items WHERE response_id = ?", (response_id,))
        db.execute("DELETE FROM events WHERE response_id = ?", (response_id,))

    def _row(self, owner: str, response_id: str, column: str) -> Any | None:
        with self._using() as db:
            row = db.execute(
                f"SELECT {column} FROM responses WHERE id = ? AND owner = ? AND expires >= ?",
                (response_id, owner, time.time()),
            ).fetchone()
        return json.loads(row[0]) if row else None

    def response(self, owner: str, response_id: str) -> dict[str, Any] | None:
        """A stored response object, or None (unknown, expired, or another key's)."""
        return self._row(owner, response_id, "response")

    def inputs(self, owner: str, response_id: str) -> list[dict[str, Any]] | None:
        """A stored response's own input items, in order."""
        return self._row(owner, response_id, "inputs")

    def context(self, owner: str, response_id: str) -> list[dict[str, Any]] | None:
        """The conversation a response ended: every earlier item, its inputs, its output."""
        return self._row(owner, response_id, "context")

    def item(self, owner: str, item_id: str) -> dict[str, Any] | None:
        """Any stored input or output item by its id, or None."""
        with self._using() as db:
            row = db.execute(
                "SELECT item FROM items JOIN responses ON responses.id = items.response_id "
                "WHERE items.id = ? AND items.owner = ? AND expires >= ?",
                (item_id, owner, time.time()),
            ).fetchone()
        return json.loads(row[0]) if row else None

    def delete(self, owner: str, response_id: str) -> bool:
        """Delete a response and its items; False when there was none for this key."""
        with self._using() as db, db:
            db.execute("BEGIN")
            found = db.execute(
                "SELECT 1 FROM responses WHERE id = ? AND owner = ?", (response_id, owner)
            ).fetchone()
            if found:
                self._delete(db, response_id)
        return found is not None

    # A background response (gateway/openai/background.py): stored `queued` at once, its
    # object rewritten as its status moves, its stream's events kept once it ends.

    def update(self, owner: str, response: dict[str, Any]) -> bool:
        """Rewrite a stored response's object while it is still queued or in progress;
        False when it is not (finished meanwhile, deleted, expired)."""
        with self._using() as db, db:
            db.execute("BEGIN")
            changed = db.execute(
                "UPDATE responses SET response = ? WHERE id = ? AND owner = ? AND "
                "json_extract(response, '$.status') IN ('queued', 'in_progress')",
                (json.dumps(response), response["id"], owner),
            ).rowcount
        return changed > 0

    def keep_events(self, response_id: str, events: list[str]) -> None:
        """A finished background response's stream, kept for `starting_after`; its size is
        the row's, for the cap."""
        with self._using() as db, db:
            db.execute("BEGIN")
            db.executemany(
                "INSERT OR REPLACE INTO events VALUES (?, ?, ?)",
                [(response_id, seq, event) for seq, event in enumerate(events)],
            )
            db.execute(
                "UPDATE responses SET size = size + ? WHERE id = ?",
                (sum(len(e) for e in events), response_id),
            )

    def events(self, owner: str, response_id: str) -> list[str]:
        """A background response's kept stream events (JSON), in order."""
        with self._using() as db:
            rows = db.execute(
                "SELECT event FROM events JOIN responses ON responses.id = events.response_id "
                "WHERE response_id = ? AND owner = ? ORDER BY seq",
                (response_id, owner),
            ).fetchall()
        return [row[0] for row in rows]

    def unfinished(self) -> list[tuple[str, dict[str, Any]]]:
        """Every stored response still queued or in progress, with its owner: at start,
        what a previous run left running."""
        with self._using() as db:
            rows = db.execute(
                "SELECT owner, response FROM responses WHERE "
                "json_extract(response, '$.status') IN ('queued', 'in_progress')"
            ).fetchall()
        return [(owner, json.loads(response)) for owner, response in rows]
