"""GGUF → MLX: convert a checked GGUF file once into a content-addressed cache entry.

Each entry lives in `cache_dir/gguf/<sha256>/`, is built in a private, locked temp dir
and published by one rename; its marker records the converter version and sampled
checksums of its files, so a damaged or stale entry is rebuilt. The checks live in
`gguf_check`, the writing of the model in `gguf_model`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from engines.errors import SourceError
from engines.log import emit
from engines.sources.gguf_check import check_gguf
from engines.sources.gguf_model import write_model
from schemas.events import CacheRebuilt

# Bump when the converted layout changes, so stale cache entries are rebuilt.
CONVERTER_VERSION = 2  # 2: the marker records sampled content checksums
MARKER = "mlx-gateway.json"
# What every entry holds; checked (present, not empty) for entries published before the
# marker recorded file sizes.
ENTRY_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
# A converter holds an exclusive lock on this file in its temp dir while it works; a temp
# dir whose lock nobody holds was left by a converter that died, and is removed.
LOCK = ".converting"
# A temp dir without its lock file yet may be a converter's first instant: spared this long.
UNLOCKED_GRACE_S = 60.0


def _hash_file(src: Path, copy_to: Path | None = None) -> str:
    digest = hashlib.sha256()
    with open(src, "rb") as fi, open(copy_to or os.devnull, "wb") as fo:
        while chunk := fi.read(1 << 20):
            digest.update(chunk)
            if copy_to is not None:
                fo.write(chunk)
    return digest.hexdigest()


# A checksum reads these blocks of a file (its size, its first and last block, and evenly
# spaced ones between), so checking an entry at every load costs ~1 MiB of reads, not the
# whole weights; a file this small or smaller is hashed whole.
SAMPLE_BLOCK = 1 << 16
SAMPLES = 16


def sampled_digest(path: Path) -> str:
    """sha256 over the file's size and sampled blocks (all of it when small)."""
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        if size <= SAMPLE_BLOCK * (SAMPLES + 2):
            digest.update(f.read())
            return digest.hexdigest()
        between = (size * i // (SAMPLES + 1) for i in range(1, SAMPLES + 1))
        for offset in sorted({0, *between, size - SAMPLE_BLOCK}):
            f.seek(offset)
            digest.update(f.read(SAMPLE_BLOCK))
    return digest.hexdigest()


def entry_damage(out: Path) -> str | None:
    """None for a published entry of this converter whose files match the sizes and
    checksums recorded when it was written; else what is wrong ("absent" when there is
    none)."""
    try:
        marker = json.loads((out / MARKER).read_text())
    except FileNotFoundError:
        return "absent"
    except (OSError, ValueError) as error:
        return f"its marker is unreadable ({error})"
    if not isinstance(marker, dict) or marker.get("converter_version") != CONVERTER_VERSION:
        return "written by another converter version"
    files = marker.get("files")
    if not isinstance(files, dict) or not set(ENTRY_FILES) <= set(files):
        return "its marker lists no files"
    for name, recorded in files.items():
        try:
            if not isinstance(recorded, dict) or (out / name).stat().st_size != recorded["size"]:
                return f"{name} is not the size it was written at"
            if sampled_digest(out / name) != recorded["sampled_sha256"]:
                return f"{name} does not match the checksum it was written with"
        except (OSError, KeyError, TypeError):
            return f"{name} is missing or unreadable"
    return None


def _is_complete(out: Path) -> bool:
    return entry_damage(out) is None


def clean_stale_temps(root: Path) -> list[Path]:
    """Remove the temp dirs of converters that died (killed mid-conversion); the removed.

    A live converter holds the lock in its temp dir, so only abandoned ones go.
    """
    removed = []
    for tmp in root.glob(".tmp-*") if root.is_dir() else []:
        lock_file = tmp / LOCK
        try:
            with open(lock_file, "rb") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held: alive, skip
        except FileNotFoundError:
            with contextlib.suppress(OSError):
                if time.time() - tmp.stat().st_mtime < UNLOCKED_GRACE_S:
                    continue
        except OSError:
            continue
        shutil.rmtree(tmp, ignore_errors=True)
        removed.append(tmp)
    return removed


def convert_gguf(model_id: str, gguf_path: Path, cache_dir: Path) -> Path:
    """Convert a GGUF file once into `cache_dir/gguf/<sha256>/`; return that directory.

    The file is validated before MLX opens it. The output is built in a private temp
    dir beside the final one and published by one rename, so concurrent converters never
    see, use or leave a half-written directory.
    """
    path = str(gguf_path)
    check_gguf(model_id, path)  # fail fast, before hashing a large file
    root = cache_dir / "gguf"
    clean_stale_temps(root)
    try:
        final = root / _hash_file(gguf_path)
    except OSError as e:
        raise SourceError(model_id, path, f"unreadable: {e.strerror or e}") from None
    damage = entry_damage(final)
    if damage is None:
        return final
    if damage != "absent":  # damaged (a file missing, cut short or overwritten): rebuilt once
        emit(CacheRebuilt(model=model_id, path=str(final), reason=damage), level="warning")
    tmp = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
        with open(tmp / LOCK, "wb") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when done, or when this process dies
            # gguflib maps the file read-write, so MLX fails on a read-only one (measured);
            # a private copy also pins the bytes we validated. Its hash names the result.
            copy = tmp / "source.gguf"
            final = root / _hash_file(gguf_path, copy)
            header = check_gguf(model_id, path, copy)
            write_model(model_id, path, copy, header, tmp)
            copy.unlink()
            (tmp / LOCK).unlink()
            files = {
                f.name: {"size": f.stat().st_size, "sampled_sha256": sampled_digest(f)}
                for f in tmp.iterdir()
                if f.is_file()
            }
            marker = {
                "converter_version": CONVERTER_VERSION,
                "source": path,
                "sha256": final.name,
                "files": files,
            }
            (tmp / MARKER).write_text(json.dumps(marker, indent=2))
            if _publish(tmp, final):
                tmp = None  # renamed into place: nothing of ours left to clean
        return final
    except (OSError, RuntimeError) as e:  # MLX reports a failed write as RuntimeError
        raise SourceError(model_id, path, f"converting into the cache at {final}: {e}") from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _publish(tmp: Path, final: Path) -> bool:
    """Rename `tmp` to `final`; False when another converter got there first (theirs stays)."""
    if final.exists() and not _is_complete(final):
        # Damaged or from an older converter: move it aside (atomic) before replacing it.
        stale = tmp.with_name(tmp.name + "-stale")
        with contextlib.suppress(OSError):
            os.rename(final, stale)
        shutil.rmtree(stale, ignore_errors=True)
    try:
        os.rename(tmp, final)
    except OSError:
        if not _is_complete(final):
            raise
        return False
    return True
