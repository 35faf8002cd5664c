"""Where state that outlives the process lives: `server.state_dir` and what is under it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from engines.cache import CacheDir
from engines.cache.store import disk_usage
from engines.units import describe
from schemas.config import ServerConfig, size_bytes


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
