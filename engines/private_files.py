"""Files only the gateway's user may read: directories 0700, files 0600, and what is more open.

What the gateway keeps on disk is its users' own words (stored responses, the ops page's
captures) or what steers its answers (the KV cache's blocks): another local user must read
none of it. Everything the gateway creates under `server.state_dir` and the cache directory
is made here; what already exists is never changed (it may be the user's own directory),
only reported by `gateway check` (`too_open`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600
# Open a file where it is, never where a symbolic link points; never wait on a FIFO.
NO_FOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def private_dir(path: Path) -> None:
    """Make `path` (0700) if it is missing; its missing parents as `mkdir -p` makes them."""
    if not path.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(mode=DIR_MODE, exist_ok=True)


def private_file(path: Path) -> None:
    """Make `path` empty (0600) if it is missing (a database SQLite then fills: its -wal
    and -shm files take the database's mode)."""
    # There already, or made meanwhile by another gateway: left as it is.
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | NO_FOLLOW, FILE_MODE))


def create_private(name: str | Path, dir_fd: int | None = None) -> int:
    """A new file's descriptor, open for writing, 0600; FileExistsError when `name` is
    taken (a symbolic link included: nothing is ever written where one points)."""
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.open(name, flags, FILE_MODE, dir_fd=dir_fd)


def too_open(path: Path) -> str | None:
    """Why `path` is readable or writable by others than its owner (`gateway check`'s
    warning), or None: not there, or private."""
    try:
        mode = path.lstat().st_mode
    except OSError:
        return None
    if stat.S_ISLNK(mode) or not mode & 0o077:
        return None
    kind, wanted = ("directory", DIR_MODE) if stat.S_ISDIR(mode) else ("file", FILE_MODE)
    return (
        f"{path}: {kind} mode {stat.S_IMODE(mode):04o}, open to other users "
        f"(the gateway makes it {wanted:04o}: chmod {wanted:o} it)"
    )


def too_open_under(root: Path) -> Iterator[str]:
    """`too_open` of `root` and of every file and directory below it, links not followed."""
    if problem := too_open(root):
        yield problem
    for top, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            if problem := too_open(Path(top) / name):
                yield problem
