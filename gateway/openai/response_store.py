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

import hashlib
import json
import os
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any

from schemas.config import ServerConfig, seconds, size_bytes

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
CREATE INDEX IF NOT EXISTS responses_by_age ON responses (created);
CREATE INDEX IF NOT EXISTS responses_by_expiry ON responses (expires);
"""


def default_state_dir() -> Path:
    """`$GATEWAY_STATE_DIR`, else the user's data directory for `mlx-gateway`."""
    env = os.environ.get("GATEWAY_STATE_DIR")
    if env:
        return Path(env).expanduser()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "mlx-gateway"
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "mlx-gateway"


def owner_of(key: str | None) -> str:
    """Who owns a row: a digest of the API key the request presented ("" for none)."""
    return hashlib.sha256(key.encode()).hexdigest() if key else ""


class ResponseStore:
    """The stored responses of one gateway process."""

    def __init__(self, server: ServerConfig, base_dir: Path) -> None:
        if server.state_dir is None:
            target = ":memory:"
        else:
            directory = default_state_dir() if server.state_dir == "auto" else None
            directory = directory or (base_dir / Path(server.state_dir).expanduser())
            directory.mkdir(parents=True, exist_ok=True)
            target = str(directory / "responses.sqlite3")
        self.path = target
        self._db = sqlite3.connect(target, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            self._db.executescript(SCHEMA)

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
        with self._lock, self._db:
            self._db.execute("BEGIN")
            self._db.execute(
                "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (response["id"], owner, now, now + seconds(server.responses.ttl), *blobs, size),
            )
            self._db.executemany(
                "INSERT OR REPLACE INTO items VALUES (?, ?, ?, ?)",
                [(i["id"], owner, response["id"], json.dumps(i)) for i in items if i.get("id")],
            )
            self._evict(now, size_bytes(server.responses.max_bytes) or 0)

    def _evict(self, now: float, cap: int) -> None:
        # In SQL, by index: the expired first, then the oldest of the rest while their total
        # is over the cap (a row stays when it and every newer row fit under the cap).
        self._drop("SELECT id FROM responses WHERE expires < ?", (now,))
        total = self._db.execute("SELECT COALESCE(SUM(size), 0) FROM responses").fetchone()[0]
        if total <= cap:
            return
        self._drop(
            "SELECT id FROM (SELECT id, SUM(size) OVER (ORDER BY created DESC, rowid DESC) "
            "AS newer FROM responses) WHERE newer > ?",
            (cap,),
        )

    def _drop(self, query: str, args: tuple[Any, ...]) -> None:
        self._db.execute(f"DELETE FROM items WHERE response_id IN ({query})", args)
        self._db.execute(f"DELETE FROM responses WHERE id IN ({query})", args)

    def _delete(self, response_id: str) -> None:
        self._db.execute("DELETE FROM responses WHERE id = ?", (response_id,))
        self._db.execute("DELETE FROM items WHERE response_id = ?", (response_id,))

    def _row(self, owner: str, response_id: str, column: str) -> Any | None:
        with self._lock:
            row = self._db.execute(
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
        with self._lock:
            row = self._db.execute(
                "SELECT item FROM items JOIN responses ON responses.id = items.response_id "
                "WHERE items.id = ? AND items.owner = ? AND expires >= ?",
                (item_id, owner, time.time()),
            ).fetchone()
        return json.loads(row[0]) if row else None

    def delete(self, owner: str, response_id: str) -> bool:
        """Delete a response and its items; False when there was none for this key."""
        with self._lock, self._db:
            self._db.execute("BEGIN")
            found = self._db.execute(
                "SELECT 1 FROM responses WHERE id = ? AND owner = ?", (response_id, owner)
            ).fetchone()
            if found:
                self._delete(response_id)
        return found is not None
