"""Where state that outlives the process lives: `server.state_dir` and what is under it."""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

from engines.cache import CacheDir
from engines.cache.store import disk_usage
from engines.private_files import too_open, too_open_under
from engines.units import describe
from schemas.config import ServerConfig, size_bytes

# The SQLite files the gateway keeps in `state_dir` (stored Responses, the ops page's
# history, uploaded files and batches), each with the -wal and -shm files SQLite keeps
# beside it.
STATE_FILES = ("responses.sqlite3", "activity.sqlite3", "batches.sqlite3")
# `gateway check` names this many files more open than the gateway makes them, then counts.
NAMED_WARNINGS = 5


def default_state_dir() -> Path:
    """`$GATEWAY_STATE_DIR`, else the user's data directory for `mlx-gateway`."""
    env = os.environ.get("GATEWAY_STATE_DIR")
    if env:
        return Path(env).expanduser()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "mlx-gateway"
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "mlx-gateway"


def state_dir(server: ServerConfig, base_dir: Path) -> Path | None:
    """`server.state_dir` resolved (relative to the config file); None: kept in memory."""
    if server.state_dir is None:
        return None
    if server.state_dir == "auto":
        return default_state_dir()
    return base_dir / Path(server.state_dir).expanduser()


def cache_dir(server: ServerConfig, base_dir: Path) -> CacheDir | None:
    """The disk tier's directory and limit (`server.cache`); None when it is off."""
    cache = server.cache
    limit = cache.max_bytes if isinstance(cache.max_bytes, int) else size_bytes(cache.max_bytes)
    if not limit:
        return None
    if cache.dir is not None:
        return CacheDir(base_dir / Path(cache.dir).expanduser(), limit)
    state = state_dir(server, base_dir)
    return None if state is None else CacheDir(state / "kv-cache", limit)


def cache_summary(server: ServerConfig, base_dir: Path) -> str:
    """What `gateway check` says of the disk tier: where, how full (nothing is created)."""
    where = cache_dir(server, base_dir)
    if where is None:
        return "kv cache: off (server.cache.max_bytes is 0, or state_dir is null)"
    blocks, size = disk_usage(where.path)
    return (
        f"kv cache: {where.path}, {blocks} blocks, {describe(size)} of {describe(where.max_bytes)}"
    )


def open_files(server: ServerConfig, base_dir: Path) -> list[str]:
    """`gateway check`'s warnings: the files and directories of `state_dir` and the KV
    cache that other users may read or write (the gateway makes them 0600 in 0700
    directories, and never changes what exists)."""
    found = []
    if (state := state_dir(server, base_dir)) is not None:
        names = [f"{name}{end}" for name in STATE_FILES for end in ("", "-wal", "-shm")]
        found += [p for p in map(too_open, [state] + [state / n for n in names]) if p]
    if (cache := cache_dir(server, base_dir)) is not None:
        found += too_open_under(cache.path)
    if len(found) > NAMED_WARNINGS:
        more = len(found) - NAMED_WARNINGS
        found = found[:NAMED_WARNINGS] + [f"{more} more files or directories as open"]
    return found


def database_problem(path: Path | None) -> str | None:
    """Why the SQLite file at `path` could not be used (`gateway check`), creating nothing:
    one that exists must open, pass SQLite's quick check and be writable; None: all is
    well, or no file yet (it can be created), or in memory (`path` None)."""
    if path is None:
        return None
    if not path.exists():
        ancestor = next(p for p in path.parents if p.exists())
        if not os.access(ancestor, os.W_OK | os.X_OK):
            return f"{path}: cannot be created ({ancestor} is not writable)"
        return None
    try:
        db = sqlite3.connect(f"{path.as_uri()}?mode=rw", uri=True)
    except sqlite3.Error as error:
        return f"{path}: {error}"
    try:
        probe_writable(db)
        (result,) = db.execute("PRAGMA quick_check").fetchone()
        return None if result == "ok" else f"{path}: {result}"
    except sqlite3.Error as error:
        return f"{path}: {error}"
    finally:
        db.close()


def probe_writable(db: sqlite3.Connection) -> None:
    """Raise unless `db` can be written now: a write to the header, rolled back."""
    (version,) = db.execute("PRAGMA user_version").fetchone()
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute(f"PRAGMA user_version = {int(version)}")
    finally:
        db.execute("ROLLBACK")
