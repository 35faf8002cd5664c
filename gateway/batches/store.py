"""Files and batches that outlive the process: one SQLite file, `batches.sqlite3` in
`server.state_dir` (0600 in a 0700 directory; in memory with `state_dir: null`).

An uploaded file's bytes are a row's blob, so a file and its metadata are written (and
deleted) in one transaction: no file on disk without its row, or a row without its bytes.
A batch's lines are rows too, each with its result once it has one: a restart runs only
the lines without a result, so nothing that completed runs twice. Every row belongs to the
key that made it (its label, gateway/control/key_names.py; "" with no keys): another key
finds nothing. Every call blocks: the routes and the batch runner call on a worker thread.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec

from engines.errors import PayloadTooLarge, StoreUnavailable
from engines.private_files import private_dir, private_file
from gateway.control.state import state_dir
from schemas.batches import Batch, FileObject, RequestCounts
from schemas.config import ServerConfig

STORE_FILE = "batches.sqlite3"
BUSY_TIMEOUT = 5.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    id TEXT PRIMARY KEY, owner TEXT NOT NULL, created INTEGER NOT NULL,
    filename TEXT NOT NULL, purpose TEXT NOT NULL, bytes INTEGER NOT NULL, content BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS batches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, owner TEXT NOT NULL,
    batch TEXT NOT NULL, stored_owner TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS lines (
    batch_id TEXT NOT NULL, idx INTEGER NOT NULL, custom_id TEXT NOT NULL, body TEXT NOT NULL,
    result TEXT, ok INTEGER, PRIMARY KEY (batch_id, idx)
);
"""

# Statuses a batch is still being worked in: the runner picks these up at start.
FILE_COLUMNS = "id, created, filename, purpose, bytes"
RUNNING = ("in_progress", "finalizing", "cancelling")  # counted from their lines when read
LIVE = ("validating", "in_progress", "finalizing", "cancelling")


def store_path(server: ServerConfig, base_dir: Path) -> Path | None:
    state = state_dir(server, base_dir)
    return None if state is None else state / STORE_FILE


def owner_of(key: str | None) -> str:
    """Who owns a row: the key's label ("" for a gateway without keys)."""
    return key or ""


class Line(msgspec.Struct, frozen=True):
    """A line of a batch still to run: its place, its `custom_id`, its request body (JSON)."""

    idx: int
    custom_id: str
    body: bytes


class BatchStore:
    def __init__(self, server: ServerConfig, base_dir: Path) -> None:
        path = store_path(server, base_dir)
        self.path = ":memory:" if path is None else str(path)
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        # Why the store cannot be used, or None. Not replaced by one in memory (as the
        # Responses store is): batches must outlive the process, so the Files and Batch
        # routes answer a 503 saying this, and every other route serves as ever.
        self.problem: str | None = None
        try:
            if path is not None:
                private_dir(path.parent)  # the users' own words: nobody else reads them
                private_file(path)  # SQLite's -wal and -shm files copy its mode
            db = sqlite3.connect(
                self.path, check_same_thread=False, isolation_level=None, timeout=BUSY_TIMEOUT
            )
            db.executescript(SCHEMA)
            if path is not None:
                db.execute("PRAGMA journal_mode = WAL")
            self._db = db
        except (sqlite3.Error, OSError) as error:
            self.problem = (
                f"the batch store {self.path} cannot be used ({error}); fix or move it, or set "
                "server.state_dir (`gateway check` says what is wrong)"
            )

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()

    @contextmanager
    def _using(self) -> Iterator[sqlite3.Connection]:
        if self._db is None:
            raise StoreUnavailable(self.problem or "the batch store is closed")
        with self._lock:
            try:
                yield self._db
            except sqlite3.Error as error:
                raise StoreUnavailable(
                    f"the batch store cannot be used ({self.path}: {error}); fix server.state_dir"
                ) from None

    # Files

    def add_file(
        self, owner: str, file: FileObject, content: bytes, max_bytes: int, bound: str
    ) -> None:
        """Store a file; `PayloadTooLarge` when all files would pass `max_bytes` (`bound`
        names the setting)."""
        with self._using() as db, db:
            db.execute("BEGIN IMMEDIATE")
            (total,) = db.execute("SELECT COALESCE(SUM(bytes), 0) FROM files").fetchone()
            if total + len(content) > max_bytes:
                raise PayloadTooLarge(
                    f"the stored files would exceed {bound} (server.files.max_bytes): "
                    f"{total} bytes are stored; delete files to make room"
                )
            _insert_file(db, owner, file, content)

    def file(self, owner: str, file_id: str) -> FileObject | None:
        with self._using() as db:
            row = db.execute(
                f"SELECT {FILE_COLUMNS} FROM files WHERE id = ? AND owner = ?",
                (file_id, owner),
            ).fetchone()
        return None if row is None else _file(row)

    def content(self, owner: str, file_id: str) -> bytes | None:
        with self._using() as db:
            row = db.execute(
                "SELECT content FROM files WHERE id = ? AND owner = ?", (file_id, owner)
            ).fetchone()
        return None if row is None else bytes(row[0])

    def files(
        self, owner: str, purpose: str | None, after: str | None, limit: int, descending: bool
    ) -> list[FileObject]:
        """The key's files in order of creation (`descending`: newest first), past `after`."""
        order = "DESC" if descending else "ASC"
        cmp = "<" if descending else ">"
        query = f"SELECT {FILE_COLUMNS} FROM files WHERE owner = ?"
        args: list = [owner]
        if purpose is not None:
            query += " AND purpose = ?"
            args.append(purpose)
        if after is not None:
            query += f" AND rowid {cmp} (SELECT rowid FROM files WHERE id = ? AND owner = ?)"
            args += [after, owner]
        query += f" ORDER BY rowid {order} LIMIT ?"
        with self._using() as db:
            rows = db.execute(query, (*args, limit)).fetchall()
        return [_file(row) for row in rows]

    def delete_file(self, owner: str, file_id: str) -> bool:
        with self._using() as db, db:
            deleted = db.execute(
                "DELETE FROM files WHERE id = ? AND owner = ?", (file_id, owner)
            ).rowcount
        return bool(deleted)

    # Batches

    def add_batch(self, owner: str, batch: Batch, stored_owner: str = "") -> None:
        """`stored_owner`: the digest of the key that made it (gateway/http/auth.py
        `key_digest`), whose stored Responses its `/v1/responses` lines read and write."""
        with self._using() as db, db:
            db.execute(
                "INSERT INTO batches (id, owner, batch, stored_owner) VALUES (?, ?, ?, ?)",
                (batch.id, owner, msgspec.json.encode(batch).decode(), stored_owner),
            )

    def stored_owner(self, batch_id: str) -> str:
        with self._using() as db:
            row = db.execute(
                "SELECT stored_owner FROM batches WHERE id = ?", (batch_id,)
            ).fetchone()
        return "" if row is None else row[0]

    def batch(self, owner: str | None, batch_id: str) -> Batch | None:
        """A batch (owner None: whoever's, for the runner and the admin)."""
        query, args = "SELECT batch FROM batches WHERE id = ?", [batch_id]
        if owner is not None:
            query += " AND owner = ?"
            args.append(owner)
        with self._using() as db:
            row = db.execute(query, args).fetchone()
            return None if row is None else _with_counts(db, row[0])

    def owner(self, batch_id: str) -> str | None:
        with self._using() as db:
            row = db.execute("SELECT owner FROM batches WHERE id = ?", (batch_id,)).fetchone()
        return None if row is None else row[0]

    def batches(self, owner: str | None, after: str | None, limit: int) -> list[Batch]:
        """The key's batches, newest first, past `after` (owner None: everyone's)."""
        query, args = "SELECT batch FROM batches WHERE 1", []
        if owner is not None:
            query += " AND owner = ?"
            args.append(owner)
        if after is not None:
            query += " AND seq < (SELECT seq FROM batches WHERE id = ?)"
            args.append(after)
        with self._using() as db:
            rows = db.execute(query + " ORDER BY seq DESC LIMIT ?", (*args, limit)).fetchall()
            return [_with_counts(db, row[0]) for row in rows]

    def owned_batches(self, after: str | None, limit: int) -> list[tuple[str, Batch]]:
        """Every key's batches with their owner, newest first, past `after` (the admin's)."""
        query, args = "SELECT owner, batch FROM batches", []
        if after is not None:
            query += " WHERE seq < (SELECT seq FROM batches WHERE id = ?)"
            args.append(after)
        with self._using() as db:
            rows = db.execute(query + " ORDER BY seq DESC LIMIT ?", (*args, limit)).fetchall()
            return [(owner, _with_counts(db, stored)) for owner, stored in rows]

    def live(self) -> list[str]:
        """The batches still being worked on, oldest first (what a start resumes)."""
        with self._using() as db:
            rows = db.execute("SELECT id, batch FROM batches ORDER BY seq").fetchall()
        return [i for i, b in rows if msgspec.json.decode(b, type=Batch).status in LIVE]

    def update(self, batch: Batch) -> None:
        with self._using() as db, db:
            db.execute(
                "UPDATE batches SET batch = ? WHERE id = ?",
                (msgspec.json.encode(batch).decode(), batch.id),
            )

    def add_lines(self, batch: Batch, lines: list[tuple[str, bytes]]) -> None:
        """A validated batch's lines, and the batch as it now is, in one transaction."""
        with self._using() as db, db:
            db.execute("BEGIN")
            db.execute("DELETE FROM lines WHERE batch_id = ?", (batch.id,))
            db.executemany(
                "INSERT INTO lines (batch_id, idx, custom_id, body) VALUES (?, ?, ?, ?)",
                [(batch.id, i, c, body.decode()) for i, (c, body) in enumerate(lines)],
            )
            db.execute(
                "UPDATE batches SET batch = ? WHERE id = ?",
                (msgspec.json.encode(batch).decode(), batch.id),
            )

    def pending(self, batch_id: str) -> list[Line]:
        """The lines without a result yet, in order."""
        with self._using() as db:
            rows = db.execute(
                "SELECT idx, custom_id, body FROM lines WHERE batch_id = ? AND result IS NULL "
                "ORDER BY idx",
                (batch_id,),
            ).fetchall()
        return [Line(i, c, b.encode()) for i, c, b in rows]

    def finish_line(self, batch_id: str, idx: int, result: bytes, ok: bool) -> None:
        """A line's result (an output or error file's line): once set, the line never runs again."""
        with self._using() as db, db:
            db.execute(
                "UPDATE lines SET result = ?, ok = ? WHERE batch_id = ? AND idx = ? "
                "AND result IS NULL",
                (result.decode(), int(ok), batch_id, idx),
            )

    def counts(self, batch_id: str) -> tuple[int, int, int]:
        """Lines in all, succeeded, failed."""
        with self._using() as db:
            return _counts(db, batch_id)

    def results(self, batch_id: str, ok: bool) -> list[bytes]:
        with self._using() as db:
            rows = db.execute(
                "SELECT result FROM lines WHERE batch_id = ? AND ok = ? ORDER BY idx",
                (batch_id, int(ok)),
            ).fetchall()
        return [r[0].encode() for r in rows]

    def finalize(self, batch: Batch, owner: str, files: list[tuple[FileObject, bytes]]) -> None:
        """The batch's output and error files and its final state, in one transaction."""
        with self._using() as db, db:
            db.execute("BEGIN")
            for file, content in files:
                _insert_file(db, owner, file, content)
            db.execute(
                "UPDATE batches SET batch = ? WHERE id = ?",
                (msgspec.json.encode(batch).decode(), batch.id),
            )


def _counts(db: sqlite3.Connection, batch_id: str) -> tuple[int, int, int]:
    return db.execute(
        "SELECT COUNT(*), COALESCE(SUM(ok = 1), 0), COALESCE(SUM(ok = 0), 0) "
        "FROM lines WHERE batch_id = ?",
        (batch_id,),
    ).fetchone()


def _with_counts(db: sqlite3.Connection, stored: str) -> Batch:
    """A stored batch; one being run has its counts as its lines have them now."""
    batch = msgspec.json.decode(stored, type=Batch)
    if batch.status not in RUNNING:
        return batch
    total, completed, failed = _counts(db, batch.id)
    counts = RequestCounts(total=total, completed=completed, failed=failed)
    return msgspec.structs.replace(batch, request_counts=counts)


def _insert_file(db: sqlite3.Connection, owner: str, file: FileObject, content: bytes) -> None:
    row = (file.id, owner, file.created_at, file.filename, file.purpose, file.bytes, content)
    db.execute("INSERT INTO files VALUES (?, ?, ?, ?, ?, ?, ?)", row)


def _file(row: tuple) -> FileObject:
    file_id, created, filename, purpose, size = row
    return FileObject(
        id=file_id, bytes=size, created_at=created, filename=filename, purpose=purpose
    )


def now() -> int:
    return int(time.time())
